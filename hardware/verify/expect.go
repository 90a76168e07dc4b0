package verify

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"

	"github.com/anvil-metal/anvil/protocol"
)

// FromProperties reads the expectations from a node's properties
// (Ironic's keys; numbers may arrive as JSON numbers or strings), the last
// inspection (nil: none) and a profile given to the step, which wins over
// properties.hardware_profile.
func FromProperties(props map[string]any, inspected *protocol.Inventory, profile any) (Expected, error) {
	var e Expected
	var err error
	num := func(key string) uint64 {
		v, ok := props[key]
		if !ok || v == nil || err != nil {
			return 0
		}
		n, perr := toUint(v)
		if perr != nil {
			err = fmt.Errorf("properties.%s: %w", key, perr)
		}
		return n
	}
	e.CPUs = int(num("cpus"))
	e.MemoryMB = num("memory_mb")
	e.LocalGB = num("local_gb")
	if err != nil {
		return e, err
	}
	e.CPUArch, _ = props["cpu_arch"].(string)
	if h, ok := props["root_device"].(map[string]any); ok {
		e.RootDeviceHints = h
	}
	e.Inspected = inspected
	if profile == nil {
		profile = props["hardware_profile"]
	}
	if profile != nil {
		p, perr := ParseProfile(profile)
		if perr != nil {
			return e, perr
		}
		e.Profile = &p
	}
	return e, nil
}

// ParseProfile reads a hardware profile given as a JSON object (or a
// string holding one, as the CLI's --clean-steps passes it through).
// Unknown keys are refused: a misspelt dimm_count must not pass silently.
func ParseProfile(v any) (Profile, error) {
	var raw []byte
	switch t := v.(type) {
	case string:
		raw = []byte(t)
	default:
		var err error
		if raw, err = json.Marshal(t); err != nil {
			return Profile{}, fmt.Errorf("hardware_profile: %w", err)
		}
	}
	var p Profile
	dec := json.NewDecoder(strings.NewReader(string(raw)))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return Profile{}, fmt.Errorf("hardware_profile must be an object with cpu_model, dimm_count, dimm_size_mb, disk_count, disk_models, nic_models, exact: %w", err)
	}
	return p, nil
}

// ParseInventory reads the inspection inventory the controller passes
// (an object, or nil when the node was never inspected).
func ParseInventory(v any) (*protocol.Inventory, error) {
	if v == nil {
		return nil, nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	var inv protocol.Inventory
	if err := json.Unmarshal(raw, &inv); err != nil {
		return nil, fmt.Errorf("inventory: %w", err)
	}
	return &inv, nil
}

func toUint(v any) (uint64, error) {
	switch t := v.(type) {
	case float64:
		if t < 0 || t != math.Trunc(t) {
			return 0, fmt.Errorf("%v is not a whole non-negative number", t)
		}
		return uint64(t), nil
	case int:
		if t < 0 {
			return 0, fmt.Errorf("%d is negative", t)
		}
		return uint64(t), nil
	case int64:
		if t < 0 {
			return 0, fmt.Errorf("%d is negative", t)
		}
		return uint64(t), nil
	case uint64:
		return t, nil
	case json.Number:
		return strconv.ParseUint(t.String(), 10, 64)
	case string:
		n, err := strconv.ParseUint(strings.TrimSpace(t), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("%q is not a whole number", t)
		}
		return n, nil
	}
	return 0, fmt.Errorf("%v (%T) is not a number", v, v)
}
