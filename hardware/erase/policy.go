package erase

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
)

// Policy holds the erase knobs. Defaults are IPA's (Ironic [deploy] options
// copied into driver_internal_info), so an operator moving from Ironic gets
// the same behaviour; AllowDiscard has no IPA equivalent and is off because
// a discard alone does not guarantee the data is unreadable.
type Policy struct {
	Concurrency                 int  `json:"concurrency"`                     // disk_erasure_concurrency (4)
	SkipReadOnly                bool `json:"skip_read_only"`                  // agent_erase_skip_read_only (false: error)
	SkipRemovable               bool `json:"skip_removable"`                  // not in IPA (false)
	EnableNVMeSecureErase       bool `json:"enable_nvme_secure_erase"`        // agent_enable_nvme_secure_erase (true)
	EnableATASecureErase        bool `json:"enable_ata_secure_erase"`         // agent_enable_ata_secure_erase (true)
	ContinueIfSecureEraseFailed bool `json:"continue_if_secure_erase_failed"` // agent_continue_if_secure_erase_failed (false)
	AllowDiscard                bool `json:"allow_discard"`                   // BLKSECDISCARD/BLKDISCARD (false)
	AllowZeroOut                bool `json:"allow_zeroout"`                   // BLKZEROOUT for the zero pass (true)
	Zeroize                     bool `json:"zeroize"`                         // agent_erase_devices_zeroize (true)
	Iterations                  int  `json:"iterations"`                      // agent_erase_devices_iterations (1)
	VerifySamples               int  `json:"verify_samples"`                  // read-back points besides start and end (64)
	EraseSharedFilesystems      bool `json:"erase_shared_filesystems"`        // IPA's special-filesystem guard off (false)
}

// DefaultPolicy returns IPA's defaults.
func DefaultPolicy() Policy {
	return Policy{
		Concurrency:           4,
		EnableNVMeSecureErase: true,
		EnableATASecureErase:  true,
		AllowZeroOut:          true,
		Zeroize:               true,
		Iterations:            1,
		VerifySamples:         64,
	}
}

// PolicyArgs names the step arguments WithArgs understands, with their
// descriptions, for the steps' argsinfo. IPA's driver_internal_info names
// are accepted as aliases.
var policyArgs = map[string]string{
	"concurrency":                     "how many devices to erase in parallel (default 4)",
	"skip_read_only":                  "skip read-only devices instead of failing (default false)",
	"skip_removable":                  "skip removable devices (default false)",
	"enable_nvme_secure_erase":        "use NVMe Format with secure erase when supported (default true)",
	"enable_ata_secure_erase":         "use ATA Security Erase when supported (default true)",
	"continue_if_secure_erase_failed": "fall back to overwriting when a secure erase fails (default false)",
	"allow_discard":                   "allow BLKSECDISCARD/BLKDISCARD when the device then reads back zeros (default false)",
	"allow_zeroout":                   "allow BLKZEROOUT for the zero pass (default true)",
	"zeroize":                         "finish overwrites with a pass of zeros (default true)",
	"iterations":                      "random overwrite passes before the zero pass (default 1)",
	"verify_samples":                  "read-back sample points besides the first and last blocks (default 64)",
	"erase_shared_filesystems":        SharedArgInfo,
}

// SharedArgInfo documents erase_shared_filesystems for every erase step.
const SharedArgInfo = "erase devices holding a shared-storage filesystem (IBM GPFS, VMware VMFS, GFS2, OCFS2), which other hosts on a SAN may be using; " +
	"without it such a device fails the step before anything is written (default false)"

var policyAliases = map[string]string{
	"disk_erasure_concurrency":              "concurrency",
	"agent_erase_skip_read_only":            "skip_read_only",
	"agent_enable_nvme_secure_erase":        "enable_nvme_secure_erase",
	"agent_enable_ata_secure_erase":         "enable_ata_secure_erase",
	"agent_continue_if_secure_erase_failed": "continue_if_secure_erase_failed",
	"agent_continue_if_ata_erase_failed":    "continue_if_secure_erase_failed",
	"agent_erase_devices_zeroize":           "zeroize",
	"agent_erase_devices_iterations":        "iterations",
}

// PolicyArgNames returns the accepted argument names (canonical and IPA
// aliases) with descriptions.
func PolicyArgNames() map[string]string {
	out := map[string]string{}
	for k, v := range policyArgs {
		out[k] = v
	}
	for alias, k := range policyAliases {
		out[alias] = policyArgs[k] + " (IPA name)"
	}
	return out
}

// WithArgs returns p with the knobs present in args applied. Unknown keys
// are ignored here (argsinfo validation rejects them earlier); malformed
// values are errors.
//
// Keys apply in a fixed order, IPA aliases before canonical names, so a
// step argument beats the driver_internal_info value Ironic sends under
// the alias, and agent_continue_if_secure_erase_failed beats its older
// spelling agent_continue_if_ata_erase_failed.
func (p Policy) WithArgs(args map[string]any) (Policy, error) {
	keys := slices.Collect(maps.Keys(args))
	slices.SortFunc(keys, func(a, b string) int {
		_, aliasA := policyAliases[a]
		_, aliasB := policyAliases[b]
		if aliasA != aliasB {
			if aliasA {
				return -1
			}
			return 1
		}
		return strings.Compare(a, b)
	})
	for _, k := range keys {
		v := args[k]
		if c, ok := policyAliases[k]; ok {
			k = c
		}
		var err error
		switch k {
		case "concurrency":
			p.Concurrency, err = toInt(v)
			if err == nil && p.Concurrency < 1 {
				err = fmt.Errorf("must be at least 1")
			}
		case "iterations":
			p.Iterations, err = toInt(v)
			if err == nil && p.Iterations < 0 {
				err = fmt.Errorf("must not be negative")
			}
		case "verify_samples":
			p.VerifySamples, err = toInt(v)
		case "skip_read_only":
			p.SkipReadOnly, err = toBool(v)
		case "skip_removable":
			p.SkipRemovable, err = toBool(v)
		case "enable_nvme_secure_erase":
			p.EnableNVMeSecureErase, err = toBool(v)
		case "enable_ata_secure_erase":
			p.EnableATASecureErase, err = toBool(v)
		case "continue_if_secure_erase_failed":
			p.ContinueIfSecureEraseFailed, err = toBool(v)
		case "allow_discard":
			p.AllowDiscard, err = toBool(v)
		case "allow_zeroout":
			p.AllowZeroOut, err = toBool(v)
		case "zeroize":
			p.Zeroize, err = toBool(v)
		case "erase_shared_filesystems":
			p.EraseSharedFilesystems, err = toBool(v)
		default:
			continue
		}
		if err != nil {
			return p, fmt.Errorf("erase argument %s=%v: %w", k, v, err)
		}
	}
	return p, nil
}

func toInt(v any) (int, error) {
	switch n := v.(type) {
	case int:
		return n, nil
	case int64:
		return int(n), nil
	case float64:
		if n != float64(int(n)) {
			return 0, fmt.Errorf("not an integer")
		}
		return int(n), nil
	case string:
		return strconv.Atoi(n)
	}
	return 0, fmt.Errorf("want an integer, got %T", v)
}

func toBool(v any) (bool, error) {
	switch b := v.(type) {
	case bool:
		return b, nil
	case string:
		return strconv.ParseBool(b)
	}
	return false, fmt.Errorf("want a boolean, got %T", v)
}
