package api

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/google/uuid"

	"github.com/anvil-metal/anvil/controller/store"
)

// writableField is a node field a client may set on create or PATCH: the
// version that introduced it, how to read it (raw, unmasked) for patching,
// and how to set it from a decoded JSON value with type checking.
type writableField struct {
	min int
	get func(n *store.Node) any
	set func(n *store.Node, v any) error
}

var nameRE = regexp.MustCompile(`^[A-Za-z0-9\-._~]+$`)

var reservedNames = map[string]bool{"maintenance": true, "management": true, "states": true,
	"vendor_passthru": true, "detail": true, "validate": true}

func validName(name string) error {
	if len(name) == 0 || len(name) > 255 || !nameRE.MatchString(name) {
		return badRequest("Expected a logical name but received %q: use 1 to 255 characters from A-Z a-z 0-9 - . _ ~", name)
	}
	if _, err := uuid.Parse(name); err == nil {
		return badRequest("Expected a logical name but received %q, which looks like a UUID", name)
	}
	if reservedNames[name] {
		return badRequest("Node name %q is reserved", name)
	}
	return nil
}

func asOptString(field string, v any, maxLen int) (*string, error) {
	if v == nil {
		return nil, nil
	}
	s, ok := v.(string)
	if !ok {
		return nil, badRequest("Invalid value for %s: expected a string, got %s", field, jsonType(v))
	}
	if maxLen > 0 && len(s) > maxLen {
		return nil, badRequest("Invalid value for %s: longer than %d characters", field, maxLen)
	}
	return &s, nil
}

func asObject(field string, v any) (map[string]any, error) {
	if v == nil {
		return map[string]any{}, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, badRequest("Invalid value for %s: expected an object, got %s", field, jsonType(v))
	}
	return m, nil
}

// asBool accepts JSON booleans and Ironic's string spellings ("True", "1").
func asBool(field string, v any) (bool, error) {
	switch b := v.(type) {
	case nil:
		return false, nil
	case bool:
		return b, nil
	case string:
		x, err := parseBool(b)
		if err != nil {
			return false, badRequest("Invalid value for %s: %q is not a boolean", field, b)
		}
		return x, nil
	}
	return false, badRequest("Invalid value for %s: expected a boolean, got %s", field, jsonType(v))
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case bool:
		return "boolean"
	case float64:
		return "number"
	case string:
		return "string"
	case []any:
		return "array"
	case map[string]any:
		return "object"
	}
	return fmt.Sprintf("%T", v)
}

func optStringField(min, maxLen int, name string, ptr func(n *store.Node) **string) writableField {
	return writableField{min: min,
		get: func(n *store.Node) any { return sp(*ptr(n)) },
		set: func(n *store.Node, v any) error {
			s, err := asOptString(name, v, maxLen)
			*ptr(n) = s
			return err
		}}
}

// objectField is a dict field of at most max bytes as JSON (boundField).
func objectField(min int, name string, max int, ptr func(n *store.Node) *map[string]any) writableField {
	return writableField{min: min,
		get: func(n *store.Node) any { return *ptr(n) },
		set: func(n *store.Node, v any) error {
			m, err := asObject(name, v)
			if err == nil {
				err = boundField("node", name, m, max)
			}
			*ptr(n) = m
			return err
		}}
}

func boolField(min int, name string, ptr func(n *store.Node) *bool) writableField {
	return writableField{min: min,
		get: func(n *store.Node) any { return *ptr(n) },
		set: func(n *store.Node, v any) error {
			b, err := asBool(name, v)
			*ptr(n) = b
			return err
		}}
}

func ifaceField(min int, name string, ptr func(n *store.Node) *string) writableField {
	return writableField{min: min,
		get: func(n *store.Node) any { return *ptr(n) },
		set: func(n *store.Node, v any) error {
			s, err := asOptString(name, v, 255)
			*ptr(n) = ""
			if s != nil {
				*ptr(n) = *s
			}
			return err
		}}
}

// writable lists the PATCHable fields (Ironic's PATCH_ALLOWED_FIELDS, to
// 1.86).
var writable = map[string]writableField{
	"name": {min: 5, get: func(n *store.Node) any { return sp(n.Name) }, set: func(n *store.Node, v any) error {
		s, err := asOptString("name", v, 255)
		if err != nil {
			return err
		}
		if s != nil {
			if err := validName(*s); err != nil {
				return err
			}
		}
		n.Name = s
		return nil
	}},
	"driver": {min: 1, get: func(n *store.Node) any { return n.Driver }, set: func(n *store.Node, v any) error {
		s, err := asOptString("driver", v, 255)
		if err != nil {
			return err
		}
		if s == nil || *s == "" {
			return badRequest("driver is required and cannot be removed")
		}
		n.Driver = *s
		return nil
	}},
	"driver_info":   objectField(1, "driver_info", maxFieldJSON, func(n *store.Node) *map[string]any { return &n.DriverInfo }),
	"properties":    objectField(1, "properties", maxFieldJSON, func(n *store.Node) *map[string]any { return &n.Properties }),
	"instance_info": objectField(1, "instance_info", maxBody, func(n *store.Node) *map[string]any { return &n.InstanceInfo }),
	"extra":         objectField(1, "extra", maxFieldJSON, func(n *store.Node) *map[string]any { return &n.Extra }),
	"network_data":  objectField(66, "network_data", maxFieldJSON, func(n *store.Node) *map[string]any { return &n.NetworkData }),
	"instance_uuid": {min: 1, get: func(n *store.Node) any { return sp(n.InstanceUUID) }, set: func(n *store.Node, v any) error {
		s, err := asOptString("instance_uuid", v, 36)
		if err != nil {
			return err
		}
		if s != nil {
			if _, err := uuid.Parse(*s); err != nil {
				return badRequest("Invalid value for instance_uuid: %q is not a UUID", *s)
			}
		}
		n.InstanceUUID = s
		return nil
	}},
	"chassis_uuid":     optStringField(1, 36, "chassis_uuid", func(n *store.Node) **string { return &n.ChassisUUID }),
	"maintenance":      boolField(1, "maintenance", func(n *store.Node) *bool { return &n.Maintenance }),
	"resource_class":   optStringField(21, 80, "resource_class", func(n *store.Node) **string { return &n.ResourceClass }),
	"protected":        boolField(48, "protected", func(n *store.Node) *bool { return &n.Protected }),
	"protected_reason": optStringField(48, 255, "protected_reason", func(n *store.Node) **string { return &n.ProtectedReason }),
	"owner":            optStringField(50, 255, "owner", func(n *store.Node) **string { return &n.Owner }),
	"description":      optStringField(51, 4096, "description", func(n *store.Node) **string { return &n.Description }),
	"retired":          boolField(61, "retired", func(n *store.Node) *bool { return &n.Retired }),
	"retired_reason":   optStringField(61, 255, "retired_reason", func(n *store.Node) **string { return &n.RetiredReason }),
	"lessee":           optStringField(65, 255, "lessee", func(n *store.Node) **string { return &n.Lessee }),
	"shard":            optStringField(82, 255, "shard", func(n *store.Node) **string { return &n.Shard }),
	// a UUID or a name, resolved to the parent's UUID (resolveParent)
	"parent_node": optStringField(parentNodeVersion, 36, "parent_node", func(n *store.Node) **string { return &n.ParentNode }),
	"conductor_group": {min: 46, get: func(n *store.Node) any { return n.ConductorGroup }, set: func(n *store.Node, v any) error {
		s, err := asOptString("conductor_group", v, 255)
		n.ConductorGroup = ""
		if s != nil {
			n.ConductorGroup = strings.ToLower(*s)
		}
		return err
	}},
	"automated_clean": {min: 47, get: func(n *store.Node) any {
		if n.AutomatedClean == nil {
			return nil
		}
		return *n.AutomatedClean
	}, set: func(n *store.Node, v any) error {
		if v == nil {
			n.AutomatedClean = nil
			return nil
		}
		b, err := asBool("automated_clean", v)
		n.AutomatedClean = &b
		return err
	}},
	"boot_interface":       ifaceField(31, "boot_interface", func(n *store.Node) *string { return &n.Interfaces.Boot }),
	"console_interface":    ifaceField(31, "console_interface", func(n *store.Node) *string { return &n.Interfaces.Console }),
	"deploy_interface":     ifaceField(31, "deploy_interface", func(n *store.Node) *string { return &n.Interfaces.Deploy }),
	"inspect_interface":    ifaceField(31, "inspect_interface", func(n *store.Node) *string { return &n.Interfaces.Inspect }),
	"management_interface": ifaceField(31, "management_interface", func(n *store.Node) *string { return &n.Interfaces.Management }),
	"network_interface":    ifaceField(20, "network_interface", func(n *store.Node) *string { return &n.Interfaces.Network }),
	"power_interface":      ifaceField(31, "power_interface", func(n *store.Node) *string { return &n.Interfaces.Power }),
	"raid_interface":       ifaceField(31, "raid_interface", func(n *store.Node) *string { return &n.Interfaces.RAID }),
	"vendor_interface":     ifaceField(31, "vendor_interface", func(n *store.Node) *string { return &n.Interfaces.Vendor }),
	"storage_interface":    ifaceField(33, "storage_interface", func(n *store.Node) *string { return &n.Interfaces.Storage }),
	"rescue_interface":     ifaceField(38, "rescue_interface", func(n *store.Node) *string { return &n.Interfaces.Rescue }),
	"bios_interface":       ifaceField(biosVersion, "bios_interface", func(n *store.Node) *string { return &n.Interfaces.BIOS }),
	"firmware_interface":   ifaceField(firmwareVersion, "firmware_interface", func(n *store.Node) *string { return &n.Interfaces.Firmware }),
	"disable_power_off":    boolField(disablePowerOffVersion, "disable_power_off", func(n *store.Node) *bool { return &n.DisablePowerOff }),
	"instance_name": {min: instanceNameVersion, get: func(n *store.Node) any { return sp(n.InstanceName) }, set: func(n *store.Node, v any) error {
		s, err := asOptString("instance_name", v, 255)
		if err == nil && s != nil && *s == "" {
			err = badRequest("Invalid value for instance_name: an empty string (use null to unset it)")
		}
		n.InstanceName = s
		return err
	}},
}

// createOnly are accepted on POST but not PATCH.
var createOnly = map[string]writableField{
	// Not createUUID: a node body is no writes document, and Ironic's
	// node validator has its own refusal.
	"uuid": {min: 1, set: func(n *store.Node, v any) error {
		s, err := asOptString("uuid", v, 36)
		if err != nil || s == nil {
			return err
		}
		u, err := uuid.Parse(*s)
		if err != nil {
			return badRequest("Invalid value for uuid: %q is not a UUID", *s)
		}
		n.UUID = u.String()
		return nil
	}},
	"console_enabled": boolField(1, "console_enabled", func(n *store.Node) *bool { return &n.ConsoleEnabled }),
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sortStrings(out)
	return out
}
