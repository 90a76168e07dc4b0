package inspectrules

import (
	"fmt"
	"os"

	yaml "go.yaml.in/yaml/v3"
)

// LoadFile reads built-in rules (Ironic's [inspection_rules]built_in_rules):
// a YAML (or JSON) list of rules, each checked as the API checks one but
// for its priority, which may be negative. A rule without a UUID gets
// 00000000-0000-0000-0000-<its index among those>, as Ironic numbers them.
func LoadFile(path string) ([]Rule, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("built-in inspection rules: %w", err)
	}
	return ParseBuiltIn(data, path)
}

// ParseBuiltIn parses the built-in rules file's content; name is for
// errors.
func ParseBuiltIn(data []byte, name string) ([]Rule, error) {
	var raw any
	if err := yaml.Unmarshal(data, &raw); err != nil {
		return nil, fmt.Errorf("error parsing YAML in built-in rules file %s: %w", name, err)
	}
	if raw == nil {
		return nil, nil
	}
	list, ok := jsonValue(raw).([]any)
	if !ok {
		return nil, errorf("built-in rules file (%s) should contain a list of rules", name)
	}
	var out []Rule
	synthetic := 0
	for i, x := range list {
		doc, ok := x.(map[string]any)
		if !ok {
			return nil, errorf("built-in rules file %s: rule %d is not a mapping", name, i)
		}
		if doc["uuid"] == nil {
			doc["uuid"] = fmt.Sprintf("00000000-0000-0000-0000-%012x", synthetic)
			synthetic++
		}
		if doc["conditions"] == nil {
			doc["conditions"] = []any{}
		}
		r, err := Parse(doc, true)
		if err != nil {
			return nil, fmt.Errorf("built-in rules file %s: rule %d (%v): %w", name, i, doc["uuid"], err)
		}
		out = append(out, *r)
	}
	return out, nil
}

// jsonValue turns YAML's decoded values into JSON's (numbers as float64,
// mappings with string keys).
func jsonValue(v any) any {
	switch x := v.(type) {
	case map[string]any:
		for k, e := range x {
			x[k] = jsonValue(e)
		}
		return x
	case map[any]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[fmt.Sprint(k)] = jsonValue(e)
		}
		return out
	case []any:
		for i, e := range x {
			x[i] = jsonValue(e)
		}
		return x
	case int:
		return float64(x)
	case int64:
		return float64(x)
	case uint64:
		return float64(x)
	case float32:
		return float64(x)
	}
	return v
}
