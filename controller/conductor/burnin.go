package conductor

// Burn-in options: the node's agent_burnin_* driver_info keys become the
// arguments of the agent's burn-in steps when their command is issued,
// and the step's time limit follows the burn-in's own.

import (
	"maps"
	"strconv"
	"strings"

	"github.com/anvil-metal/anvil/protocol"
)

// burninPrefix marks the driver_info keys that are burn-in options
// (Ironic's agent_burnin_*).
const burninPrefix = "agent_burnin_"

// burninLimits are the burn-in steps bounded by time: the options that
// bound them and Ironic's defaults in seconds. A step runs at most their
// sum, plus burninMargin; burnin_disk bounded by loops is not here (its
// time depends on the disks) and keeps --step-timeout.
func burninLimits(stepKey string) []burninLimit {
	switch stepKey {
	case "deploy.burnin_cpu":
		return []burninLimit{{"agent_burnin_cpu_timeout", 86400, 1}}
	case "deploy.burnin_memory":
		return []burninLimit{{"agent_burnin_vm_timeout", 86400, 1}}
	case "deploy.burnin_network":
		return []burninLimit{{"agent_burnin_fio_network_runtime", 21600, 2}, {"agent_burnin_fio_network_pairing_timeout", 900, 2}}
	}
	return nil
}

type burninLimit struct {
	key string
	def float64
	n   float64 // times the option counts (the network runs both ways)
}

// burninMargin is what a time-bound burn-in may take beyond its limit:
// starting, the last report, a network partner's longer runtime.
const burninMargin = 30 * 60

// withBurninArgs copies the node's burn-in options into a step's
// arguments when its command is issued. Ironic's agent reads them from
// the node's driver_info, which its commands carry; ours never gets
// driver_info (it holds the BMC credentials), so only keys that start
// with agent_burnin_ and that the agent's own catalogue lists for this
// step are copied. An argument given with the step wins. A time-bound
// burn-in without max_seconds gets its own limit plus a margin instead of
// --step-timeout (12 h), which Ironic's 24-hour defaults would exceed.
func withBurninArgs(driverInfo map[string]any, step protocol.Step) protocol.Step {
	var args map[string]any
	for k, v := range driverInfo {
		if _, listed := step.ArgsInfo[k]; !listed || !strings.HasPrefix(k, burninPrefix) {
			continue
		}
		if _, given := step.Args[k]; given {
			continue
		}
		if args == nil {
			args = make(map[string]any, len(step.Args)+1)
			maps.Copy(args, step.Args)
		}
		args[k] = v
	}
	if args != nil {
		step.Args = args
	}
	if limits := burninLimits(step.Key()); limits != nil && step.MaxSeconds == 0 {
		total := float64(burninMargin)
		for _, l := range limits {
			total += l.n * burninSeconds(step.Args[l.key], l.def)
		}
		step.MaxSeconds = int(min(total, 1<<31-1))
	}
	return step
}

// burninSeconds reads an option as the agent does (a number or a numeric
// string); anything else counts as the default (the agent refuses it).
func burninSeconds(v any, def float64) float64 {
	switch x := v.(type) {
	case float64:
		if x >= 0 {
			return x
		}
	case string:
		if f, err := strconv.ParseFloat(strings.TrimSpace(x), 64); err == nil && f >= 0 {
			return f
		}
	}
	return def
}
