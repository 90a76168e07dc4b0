// Package burnin is the agent's burn-in: CPU, memory, disk and network
// stress with verification, under Ironic's step names (deploy.burnin_cpu,
// burnin_memory, burnin_disk, burnin_network) and Ironic's driver_info
// options (agent_burnin_*, the names and defaults of IPA's burnin.py).
//
// IPA runs stress-ng and fio; this package is Go code of ours instead:
// the tools would cost about 2 MiB of a 20 MiB initramfs that has 0.8 MiB
// left, and their pass/fail exit codes would still have to be parsed into
// the per-device evidence (failing CPU, address range, disk offset,
// throughput) that the step result carries.
package burnin

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/protocol"
)

// Ironic's driver_info keys (IPA burnin.py: "agent_burnin_" + stressor +
// option). The memory stressor is stress-ng's "vm", hence agent_burnin_vm_*.
const (
	ArgCPUTimeout            = "agent_burnin_cpu_timeout"
	ArgCPUCount              = "agent_burnin_cpu_cpu"
	ArgVMTimeout             = "agent_burnin_vm_timeout"
	ArgVMCount               = "agent_burnin_vm_vm"
	ArgVMBytes               = "agent_burnin_vm_vm-bytes"
	ArgDiskLoops             = "agent_burnin_fio_disk_loops"
	ArgDiskRuntime           = "agent_burnin_fio_disk_runtime"
	ArgNetworkConfig         = "agent_burnin_fio_network_config"
	ArgNetworkRuntime        = "agent_burnin_fio_network_runtime"
	ArgNetworkPairingTimeout = "agent_burnin_fio_network_pairing_timeout"
)

// IPA's defaults.
const (
	DefaultTimeout        = 24 * time.Hour // cpu and vm: 86400 s
	DefaultVMBytes        = "98%"
	DefaultDiskLoops      = 4
	DefaultNetworkRuntime = 6 * time.Hour // 21600 s
	DefaultPairingTimeout = 15 * time.Minute
	// NetworkPort is the port fio's net engine uses in IPA; the partner's
	// firewall rules written for IPA stay right.
	NetworkPort = 9000
)

// StepArgs lists each step's arguments (the driver_info keys the
// controller copies into the command) with their descriptions.
func StepArgs() map[string]map[string]protocol.ArgInfo {
	return map[string]map[string]protocol.ArgInfo{
		"burnin_cpu": {
			ArgCPUTimeout: {Description: "seconds to run (default 86400)"},
			ArgCPUCount:   {Description: "workers, one per CPU (default 0: every CPU)"},
		},
		"burnin_memory": {
			ArgVMTimeout: {Description: "seconds to run (default 86400)"},
			ArgVMCount:   {Description: "workers sharing the memory (default 0: one per CPU)"},
			ArgVMBytes:   {Description: `memory to test: "98%" of the available memory (default), or a size such as 512M, 4G`},
		},
		"burnin_disk": {
			ArgDiskLoops:   {Description: "passes over each disk, each writing and verifying it (default 4)"},
			ArgDiskRuntime: {Description: "seconds to run, repeating passes; 0 (default) means the loops decide"},
		},
		"burnin_network": {
			ArgNetworkConfig:         {Description: `{"role": "writer"|"reader", "partner": "<host>"}: the pair, as Ironic's static pairing`},
			ArgNetworkRuntime:        {Description: "seconds this node writes when it is the writer (default 21600)"},
			ArgNetworkPairingTimeout: {Description: "seconds to wait for the partner (default 900)"},
		},
	}
}

// seconds reads a duration in seconds: a JSON number or a numeric string
// (driver_info set from the command line holds strings).
func seconds(args map[string]any, key string, def time.Duration) (time.Duration, error) {
	v, ok := args[key]
	if !ok || v == nil {
		return def, nil
	}
	f, err := number(v)
	if err != nil || f < 0 || f > math.MaxInt64/float64(time.Second) {
		return 0, fmt.Errorf("%s must be a number of seconds ≥ 0, got %v", key, v)
	}
	return time.Duration(f * float64(time.Second)), nil
}

// count reads a non-negative integer.
func count(args map[string]any, key string, def int) (int, error) {
	v, ok := args[key]
	if !ok || v == nil {
		return def, nil
	}
	f, err := number(v)
	if err != nil || f < 0 || f != math.Trunc(f) || f > 1<<20 {
		return 0, fmt.Errorf("%s must be a whole number ≥ 0, got %v", key, v)
	}
	return int(f), nil
}

func number(v any) (float64, error) {
	switch x := v.(type) {
	case float64:
		return x, nil
	case int:
		return float64(x), nil
	case int64:
		return float64(x), nil
	case json.Number:
		return x.Float64()
	case string:
		return strconv.ParseFloat(strings.TrimSpace(x), 64)
	}
	return 0, fmt.Errorf("not a number: %T", v)
}

// CPUArgs reads burnin_cpu's arguments.
func CPUArgs(args map[string]any) (CPUOptions, error) {
	var o CPUOptions
	var err error
	if o.Duration, err = seconds(args, ArgCPUTimeout, DefaultTimeout); err != nil {
		return o, err
	}
	o.Workers, err = count(args, ArgCPUCount, 0)
	return o, err
}

// MemoryArgs reads burnin_memory's arguments; available is the memory
// that a percentage applies to.
func MemoryArgs(args map[string]any, available uint64) (MemoryOptions, error) {
	var o MemoryOptions
	var err error
	if o.Duration, err = seconds(args, ArgVMTimeout, DefaultTimeout); err != nil {
		return o, err
	}
	if o.Workers, err = count(args, ArgVMCount, 0); err != nil {
		return o, err
	}
	spec := DefaultVMBytes
	if v, ok := args[ArgVMBytes]; ok && v != nil {
		spec = fmt.Sprint(v)
	}
	o.Bytes, err = ParseBytes(spec, available)
	if err != nil {
		return o, fmt.Errorf("%s: %w", ArgVMBytes, err)
	}
	return o, nil
}

// ParseBytes reads a stress-ng size: "N%" of available, or a number with
// an optional b, k, m, g or t suffix (powers of 1024, as stress-ng).
func ParseBytes(s string, available uint64) (uint64, error) {
	s = strings.ToLower(strings.TrimSpace(s))
	if p, ok := strings.CutSuffix(s, "%"); ok {
		f, err := strconv.ParseFloat(p, 64)
		if err != nil || f <= 0 || f > 100 {
			return 0, fmt.Errorf("%q is not a percentage in (0, 100]", s)
		}
		return uint64(float64(available) * f / 100), nil
	}
	mult := uint64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'b':
			s = s[:n-1]
		case 'k':
			mult, s = 1<<10, s[:n-1]
		case 'm':
			mult, s = 1<<20, s[:n-1]
		case 'g':
			mult, s = 1<<30, s[:n-1]
		case 't':
			mult, s = 1<<40, s[:n-1]
		}
	}
	n, err := strconv.ParseUint(s, 10, 64)
	if err != nil || n == 0 || n > math.MaxUint64/mult {
		return 0, fmt.Errorf("%q is not a size (N%%, or a number with b, k, m, g or t)", s)
	}
	return n * mult, nil
}

// DiskArgs reads burnin_disk's arguments.
func DiskArgs(args map[string]any) (DiskOptions, error) {
	var o DiskOptions
	var err error
	if o.Loops, err = count(args, ArgDiskLoops, DefaultDiskLoops); err != nil {
		return o, err
	}
	if o.Runtime, err = seconds(args, ArgDiskRuntime, 0); err != nil {
		return o, err
	}
	if o.Loops == 0 && o.Runtime == 0 {
		return o, fmt.Errorf("%s is 0 and %s is 0: nothing to run", ArgDiskLoops, ArgDiskRuntime)
	}
	return o, nil
}

// NetworkArgs reads burnin_network's arguments. Only Ironic's static
// pairing is supported: dynamic pairing needs a tooz coordination backend.
func NetworkArgs(args map[string]any) (NetworkOptions, error) {
	var o NetworkOptions
	var err error
	if o.Runtime, err = seconds(args, ArgNetworkRuntime, DefaultNetworkRuntime); err != nil {
		return o, err
	}
	if o.PairingTimeout, err = seconds(args, ArgNetworkPairingTimeout, DefaultPairingTimeout); err != nil {
		return o, err
	}
	raw, ok := args[ArgNetworkConfig]
	if !ok || raw == nil {
		return o, fmt.Errorf("%s is required (%s): dynamic pairing through a tooz backend is not supported", ArgNetworkConfig, `{"role": "writer"|"reader", "partner": "<host>"}`)
	}
	var cfg map[string]any
	switch v := raw.(type) {
	case map[string]any:
		cfg = v
	case string:
		if err := json.Unmarshal([]byte(v), &cfg); err != nil {
			return o, fmt.Errorf("%s is not a JSON object: %w", ArgNetworkConfig, err)
		}
	default:
		return o, fmt.Errorf("%s must be an object, got %T", ArgNetworkConfig, raw)
	}
	o.Role, _ = cfg["role"].(string)
	o.Partner, _ = cfg["partner"].(string)
	if o.Role != RoleWriter && o.Role != RoleReader {
		return o, fmt.Errorf("%s: unknown role %q (writer or reader)", ArgNetworkConfig, o.Role)
	}
	if strings.TrimSpace(o.Partner) == "" {
		return o, fmt.Errorf("%s: no partner", ArgNetworkConfig)
	}
	return o, nil
}
