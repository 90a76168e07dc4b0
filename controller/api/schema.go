package api

import (
	"math"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/google/uuid"
)

// schema is a resource's body schema as Ironic declares it (PORT_SCHEMA,
// CHASSIS_SCHEMA...) with the validators Ironic runs after it
// (args.dict_valid), so that a refusal reads as Ironic's does. POST
// validates the body, PATCH the patched document (named "patch").
type schema struct {
	props    []prop // sorted by name, as jsonschema reports siblings
	required []string
	// oneOf: exactly one of these lists of required properties is met
	// (PORT_SCHEMA's node_ident or node_uuid).
	oneOf [][]string
}

// prop is one property: its JSON types ("string", "integer", "boolean",
// "object", "null") and Ironic's checks after the schema.
type prop struct {
	name    string
	types   []string
	maxLen  int
	uuid    bool // args.uuid
	mac     bool // args.mac_address
	boolean bool // args.boolean: a boolean or one of its string spellings
}

func (sc *schema) prop(name string) (prop, bool) {
	for _, p := range sc.props {
		if p.name == name {
			return p, true
		}
	}
	return prop{}, false
}

// validate refuses doc as jsonschema 4 and Ironic's validators do: of the
// schema's errors, jsonschema's best_match prefers one at the top (a
// missing property, then unexpected ones) and among properties the one
// last in name order; Ironic's own validators run only on a valid document.
func (sc *schema) validate(name string, doc map[string]any) error {
	for _, k := range sc.required {
		if _, ok := doc[k]; !ok {
			return badRequest("Schema error for %s: %s is a required property", name, pyRepr(k))
		}
	}
	if err := sc.checkOneOf(name, doc); err != nil {
		return err
	}
	var extra []string
	for k := range doc {
		if _, ok := sc.prop(k); !ok {
			extra = append(extra, k)
		}
	}
	if len(extra) > 0 {
		slices.Sort(extra)
		quoted := make([]string, len(extra))
		for i, k := range extra {
			quoted[i] = pyRepr(k)
		}
		verb := "was"
		if len(extra) > 1 {
			verb = "were"
		}
		return badRequest("Schema error for %s: Additional properties are not allowed (%s %s unexpected)", name, strings.Join(quoted, ", "), verb)
	}
	for i := len(sc.props) - 1; i >= 0; i-- {
		p := sc.props[i]
		if v, ok := doc[p.name]; ok {
			if msg := p.schemaError(v); msg != "" {
				return badRequest("Schema error for %s: %s", name, msg)
			}
		}
	}
	// Dict fields are bounded as the node's are (maxFieldJSON): every
	// resource's create and PATCH comes through here.
	for _, p := range sc.props {
		switch v := doc[p.name].(type) {
		case map[string]any, []any:
			if err := boundField(name, p.name, v, maxFieldJSON); err != nil {
				return err
			}
		}
	}
	for _, p := range sc.props {
		v, ok := doc[p.name].(string)
		if !ok {
			continue
		}
		switch {
		case p.uuid && !isUUIDLike(v):
			return badRequest("Expected UUID for %s: %s", p.name, v)
		case p.mac:
			if _, err := normalizeMAC(v); err != nil {
				return badRequest("Expected valid MAC address for %s: %s", p.name, v)
			}
		case p.boolean:
			if _, err := parseBool(v); err != nil {
				return badRequest("Invalid %s: Unrecognized value '%s', acceptable values are: '0', '1', 'f', 'false', 'n', 'no', 'off', 'on', 't', 'true', 'y', 'yes'", p.name, v)
			}
		}
	}
	return nil
}

// checkOneOf refuses a document that meets none, or more than one, of
// the oneOf alternatives, in jsonschema's words.
func (sc *schema) checkOneOf(name string, doc map[string]any) error {
	if len(sc.oneOf) == 0 {
		return nil
	}
	var met []string
	for _, req := range sc.oneOf {
		quoted := make([]string, len(req))
		ok := true
		for i, k := range req {
			quoted[i] = pyRepr(k)
			if _, has := doc[k]; !has {
				ok = false
			}
		}
		alt := "{'required': [" + strings.Join(quoted, ", ") + "]}"
		if ok {
			met = append(met, alt)
		}
	}
	switch {
	case len(met) == 0:
		return badRequest("Schema error for %s: %s is not valid under any of the given schemas", name, pyValue(doc))
	case len(met) > 1:
		return badRequest("Schema error for %s: %s is valid under each of %s", name, pyValue(doc), strings.Join(met, ", "))
	}
	return nil
}

// schemaError is jsonschema's message for v, or "".
func (p prop) schemaError(v any) string {
	if !slices.Contains(p.types, schemaType(v)) && !(schemaType(v) == "integer" && slices.Contains(p.types, "number")) {
		quoted := make([]string, len(p.types))
		for i, t := range p.types {
			quoted[i] = pyRepr(t)
		}
		return pyValue(v) + " is not of type " + strings.Join(quoted, ", ")
	}
	if s, ok := v.(string); ok && p.maxLen > 0 && utf8.RuneCountInString(s) > p.maxLen {
		return pyValue(v) + " is too long"
	}
	return ""
}

// schemaType is v's JSON schema type; a whole number is an integer.
func schemaType(v any) string {
	if f, ok := v.(float64); ok {
		if f == math.Trunc(f) && !math.IsInf(f, 0) {
			return "integer"
		}
		return "number"
	}
	return jsonType(v)
}

// isUUIDLike is oslo's uuidutils.is_uuid_like: any spelling uuid.Parse
// takes with 32 hex digits, braces and "urn:uuid:" included.
func isUUIDLike(s string) bool {
	_, err := uuid.Parse(s)
	return err == nil
}

// pyValue is Python's repr of a decoded JSON value, as Ironic's messages
// quote it.
func pyValue(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1e16 {
			return strconv.FormatFloat(x, 'f', 0, 64)
		}
		return strconv.FormatFloat(x, 'g', -1, 64)
	case string:
		return pyRepr(x)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = pyValue(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		keys := sortedKeys(x)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = pyRepr(k) + ": " + pyValue(x[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	return jsonType(v)
}
