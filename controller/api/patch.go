package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// patchOp is one RFC 6902 operation; Ironic accepts add, replace and remove.
type patchOp struct {
	Op    string          `json:"op"`
	Path  string          `json:"path"`
	Value json.RawMessage `json:"value,omitempty"`
}

// ironicPatchPath is the path pattern of Ironic's patch schema
// (ironic/common/args.py). Keys with '.', ':', '~' or '/' escapes do not
// match it, so Ironic 21.4 refuses /extra/foo.bar with 400, and so do we.
// patchPathRE is the same pattern as Python reads it: \w is any Unicode
// letter or digit or '_', and '$' also matches before a final newline.
const ironicPatchPath = `^(/[\w-]+)+$`

var patchPathRE = regexp.MustCompile(`^(/[\p{L}\p{N}_-]+)+\n?$`)

// From 1.98 a key may hold '~' and '/', escaped in the path as RFC 6901
// has it: "~0" and "~1" (the version history's "patching object
// attributes with keys containing ~ or /"). Ironic master decodes them
// (decode_json_pointer) but its args.patch pattern still refuses any '~'
// before that code is reached; anvil takes them, as the version says
// (the pattern ^(/([\w-]|~[01])+)+$ as Python reads it).
var escapedPatchPathRE = regexp.MustCompile(`^(/([\p{L}\p{N}_-]|~[01])+)+\n?$`)

// readPatch reads and checks a request's JSON patch body.
func readPatch(r *http.Request) ([]patchOp, error) {
	body, err := readBody(r)
	if err != nil {
		return nil, err
	}
	return decodePatchAt(body, version(r.Context()) >= patchEscapeVersion)
}

// decodePatch parses and checks a JSON patch document as below 1.98.
func decodePatch(body []byte) ([]patchOp, error) { return decodePatchAt(body, false) }

// patchTokens are the keys of a checked path, unescaped (~1 is '/', ~0
// is '~', in that order, as RFC 6901 says).
func patchTokens(path string) []string {
	parts := strings.Split(path[1:], "/")
	for i, p := range parts {
		if strings.Contains(p, "~") {
			parts[i] = strings.ReplaceAll(strings.ReplaceAll(p, "~1", "/"), "~0", "~")
		}
	}
	return parts
}

// decodePatchAt parses and checks a JSON patch document; escapes: its
// paths may hold ~0 and ~1 (1.98).
func decodePatchAt(body []byte, escapes bool) ([]patchOp, error) {
	var raw []map[string]json.RawMessage
	if err := json.Unmarshal(body, &raw); err != nil {
		return nil, badRequest("Schema error for patch: the body must be a JSON list of operations: %v", err)
	}
	ops := make([]patchOp, 0, len(raw))
	for i, m := range raw {
		var op patchOp
		for k, v := range m {
			switch k {
			case "op":
				if err := json.Unmarshal(v, &op.Op); err != nil {
					return nil, badRequest("Schema error for patch: operation %d: op must be a string", i)
				}
			case "path":
				if err := json.Unmarshal(v, &op.Path); err != nil {
					return nil, badRequest("Schema error for patch: operation %d: path must be a string", i)
				}
			case "value":
				op.Value = v
			default:
				return nil, badRequest("Schema error for patch: operation %d: unexpected key %q", i, k)
			}
		}
		switch op.Op {
		case "add", "replace":
			if op.Value == nil {
				return nil, badRequest("Schema error for patch: operation %d (%s %s) needs a value", i, op.Op, op.Path)
			}
		case "remove":
		default:
			return nil, badRequest("Schema error for patch: operation %d: op %q is not one of add, replace, remove", i, op.Op)
		}
		re := patchPathRE
		if escapes {
			re = escapedPatchPathRE
		}
		if !re.MatchString(op.Path) {
			// Ironic's words, whose pattern does not show the escapes
			return nil, badRequest("Schema error for patch: %s does not match %s", pyRepr(op.Path), pyRepr(ironicPatchPath))
		}
		ops = append(ops, op)
	}
	return ops, nil
}

// applyPatch applies ops in order to doc. Root keys must exist in doc (the
// caller puts every patchable field there): add on a root key replaces it,
// remove of a root key sets it to null (the field's default).
func applyPatch(doc map[string]any, ops []patchOp) error {
	for _, op := range ops {
		parts := patchTokens(op.Path)
		if _, ok := doc[parts[0]]; !ok {
			return badRequest("Cannot patch %s. Only the following can be updated: %s", op.Path, strings.Join(sortedKeys(doc), ", "))
		}
		var val any
		if op.Value != nil {
			if err := json.Unmarshal(op.Value, &val); err != nil {
				return badRequest("Couldn't apply patch '%s %s'. Reason: invalid value: %v", op.Op, op.Path, err)
			}
		}
		if len(parts) == 1 {
			if op.Op == "remove" {
				doc[parts[0]] = nil
			} else {
				doc[parts[0]] = val
			}
			continue
		}
		if err := applyNested(doc, parts, op.Op, val); err != nil {
			return badRequest("Couldn't apply patch '%s %s'. Reason: %v", op.Op, op.Path, err)
		}
	}
	return nil
}

func applyNested(doc map[string]any, parts []string, op string, val any) error {
	var parent any = doc
	// set replaces parent in its own container: a list grows or shrinks
	set := func(any) {}
	for i, p := range parts[:len(parts)-1] {
		next, err := child(parent, p)
		if err != nil {
			return err
		}
		if next == nil && i == 0 && op == "add" {
			// adding under a null object field (e.g. empty driver_info) creates it
			next = map[string]any{}
			doc[p] = next
		}
		set = setter(parent, p)
		parent = next
	}
	last := parts[len(parts)-1]
	switch c := parent.(type) {
	case map[string]any:
		_, exists := c[last]
		switch op {
		case "add":
			c[last] = val
		case "replace":
			if !exists {
				return fmt.Errorf("can't replace a non-existent object '%s'", last)
			}
			c[last] = val
		case "remove":
			if !exists {
				return fmt.Errorf("can't remove a non-existent object '%s'", last)
			}
			delete(c, last)
		}
		return nil
	case []any:
		// RFC 6902 on a list: add inserts before the index (or appends
		// at "-"), replace and remove need an existing element
		i, err := strconv.Atoi(last)
		switch {
		case op == "add" && last == "-":
			i = len(c)
		case err != nil || i < 0 || i > len(c) || (op != "add" && i == len(c)):
			return fmt.Errorf("index '%s' out of range", last)
		}
		switch op {
		case "add":
			set(slices.Insert(slices.Clone(c), i, val))
		case "replace":
			c[i] = val
		case "remove":
			set(slices.Delete(slices.Clone(c), i, i+1))
		}
		return nil
	}
	return fmt.Errorf("member '%s' is not inside an object", last)
}

// setter returns the function that replaces container's member key.
func setter(container any, key string) func(any) {
	switch c := container.(type) {
	case map[string]any:
		return func(v any) { c[key] = v }
	case []any:
		i, _ := strconv.Atoi(key) // child checked it
		return func(v any) { c[i] = v }
	}
	return func(any) {}
}

func child(v any, key string) (any, error) {
	switch c := v.(type) {
	case map[string]any:
		x, ok := c[key]
		if !ok {
			return nil, fmt.Errorf("member '%s' not found", key)
		}
		return x, nil
	case []any:
		i, err := strconv.Atoi(key)
		if err != nil || i < 0 || i >= len(c) {
			return nil, fmt.Errorf("index '%s' out of range", key)
		}
		return c[i], nil
	}
	return nil, fmt.Errorf("member '%s' not found", key)
}

func sortStrings(s []string) { sort.Strings(s) }
