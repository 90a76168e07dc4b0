package inspectrules

// The checks of Ironic's create_request_body schema, with jsonschema's
// messages; of several errors the one nearest the top is reported, as
// jsonschema's best_match picks it.

import (
	"fmt"
	"math"
	"sort"
	"strings"
)

type schemaErr struct {
	depth int
	msg   string
}

type schemaCheck struct{ errs []schemaErr }

func (c *schemaCheck) add(depth int, format string, a ...any) {
	c.errs = append(c.errs, schemaErr{depth, fmt.Sprintf(format, a...)})
}

// checkSchema checks doc as Ironic's schema; priority's minimum is not
// enforced on built-in rules.
func checkSchema(doc map[string]any, builtIn bool) error {
	c := &schemaCheck{}
	if _, ok := doc["actions"]; !ok {
		c.add(0, "'actions' is a required property")
	}
	var extra []string
	for k := range doc {
		switch k {
		case "actions", "conditions", "description", "phase", "priority", "sensitive", "uuid":
		default:
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		sort.Strings(extra)
		quoted := make([]string, len(extra))
		for i, k := range extra {
			quoted[i] = quotePy(k)
		}
		verb := "was"
		if len(extra) > 1 {
			verb = "were"
		}
		c.add(0, "Additional properties are not allowed (%s %s unexpected)", strings.Join(quoted, ", "), verb)
	}
	if v, ok := doc["actions"]; ok {
		c.items(v, 1, actionOps, false)
	}
	if v, ok := doc["conditions"]; ok {
		ops := append([]string{}, conditionOps...)
		for _, o := range conditionOps {
			ops = append(ops, "!"+o)
		}
		c.items(v, 0, ops, true)
	}
	c.optString(doc, "description", 255)
	c.optString(doc, "phase", 16)
	if v, ok := doc["priority"]; ok {
		f, isNum := v.(float64)
		switch {
		case !isNum || f != math.Trunc(f):
			c.add(1, "%s is not of type 'integer'", pyRepr(v, nil))
		case f < 0 && !builtIn:
			c.add(1, "%s is less than the minimum of 0", pyRepr(v, nil))
		case math.Abs(f) > 1<<31:
			c.add(1, "%s is too large", pyRepr(v, nil)) // the column is an integer
		}
	}
	if v, ok := doc["sensitive"]; ok && v != nil {
		if _, isBool := v.(bool); !isBool {
			c.add(1, "%s is not of type 'boolean', 'null'", pyRepr(v, nil))
		}
	}
	if v, ok := doc["uuid"]; ok && v != nil {
		if _, isStr := v.(string); !isStr {
			c.add(1, "%s is not of type 'string', 'null'", pyRepr(v, nil))
		}
	}
	if len(c.errs) == 0 {
		return nil
	}
	best := c.errs[0]
	for _, e := range c.errs[1:] {
		if e.depth < best.depth {
			best = e
		}
	}
	return invalid("Schema error: %s", best.msg)
}

func (c *schemaCheck) optString(doc map[string]any, key string, max int) {
	v, ok := doc[key]
	if !ok || v == nil {
		return
	}
	s, isStr := v.(string)
	if !isStr {
		c.add(1, "%s is not of type 'string', 'null'", pyRepr(v, nil))
	} else if len([]rune(s)) > max {
		c.add(1, "%s is too long", quotePy(s))
	}
}

// items checks the actions or conditions list.
func (c *schemaCheck) items(v any, minItems int, ops []string, condition bool) {
	list, ok := v.([]any)
	if !ok {
		c.add(1, "%s is not of type 'array'", pyRepr(v, nil))
		return
	}
	if len(list) < minItems {
		c.add(1, "[] should be non-empty")
	}
	quotedOps := make([]string, len(ops))
	for i, o := range ops {
		quotedOps[i] = quotePy(o)
	}
	enum := "[" + strings.Join(quotedOps, ", ") + "]"
	for _, it := range list {
		m, ok := it.(map[string]any)
		if !ok {
			c.add(2, "%s is not of type 'object'", pyRepr(it, nil))
			continue
		}
		for _, k := range []string{"op", "args"} {
			if _, ok := m[k]; !ok {
				c.add(2, "%s is a required property", quotePy(k))
			}
		}
		if op, ok := m["op"]; ok {
			s, _ := op.(string)
			found := false
			for _, o := range ops {
				found = found || o == s && s != ""
			}
			if !found {
				c.add(3, "%s is not one of %s", pyRepr(op, nil), enum)
			}
		}
		for _, k := range []string{"args", "loop"} {
			if x, ok := m[k]; ok {
				switch x.(type) {
				case []any, map[string]any:
				default:
					c.add(3, "%s is not of type 'array', 'object'", pyRepr(x, nil))
				}
			}
		}
		if x, ok := m["multiple"]; ok && condition {
			if s, _ := x.(string); s != "any" && s != "all" && s != "first" && s != "last" {
				c.add(3, "%s is not one of ['any', 'all', 'first', 'last']", pyRepr(x, nil))
			}
		}
	}
}
