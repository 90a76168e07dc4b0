package protocol

import (
	"fmt"
	"sort"
	"strings"
)

// Step interfaces known to the controller. The agent's steps use "deploy" and
// "raid" (as IPA's do); the others are out-of-band interfaces of the controller.
const (
	InterfacePower      = "power"
	InterfaceManagement = "management"
	InterfaceDeploy     = "deploy"
	InterfaceFirmware   = "firmware"
	InterfaceBIOS       = "bios"
	InterfaceRAID       = "raid"
)

// Interfaces lists the valid step interfaces in their tie-break order
// (highest first), as Ironic orders steps of equal priority.
var interfaceOrder = []string{InterfacePower, InterfaceManagement, InterfaceDeploy, InterfaceFirmware, InterfaceBIOS, InterfaceRAID}

// InterfaceRank returns the tie-break rank of an interface (higher runs first
// among steps of equal priority) and whether the interface is known.
func InterfaceRank(iface string) (int, bool) {
	for i, name := range interfaceOrder {
		if name == iface {
			return len(interfaceOrder) - i, true
		}
	}
	return 0, false
}

// ArgInfo describes one argument a step accepts.
type ArgInfo struct {
	Description string `json:"description"`
	Required    bool   `json:"required"`
}

// Step describes a clean or deploy step, in the shape IPA reports them
// (interface, step, priority, abortable, reboot_requested, argsinfo) plus the
// arguments of a requested run.
type Step struct {
	Interface       string             `json:"interface"`
	Step            string             `json:"step"`
	Priority        int                `json:"priority"`
	Abortable       bool               `json:"abortable"`
	RebootRequested bool               `json:"reboot_requested"`
	ArgsInfo        map[string]ArgInfo `json:"argsinfo,omitempty"`
	Args            map[string]any     `json:"args,omitempty"`
	// MaxSeconds, when set, is how long one run of the step may take before
	// the controller gives up on it (0: the controller's default).
	MaxSeconds int `json:"max_seconds,omitempty"`
	// ExecuteOnChildNodes runs a requested step on the node's child nodes
	// (Ironic 22.1, with parent_node at API 1.83) instead of on the node,
	// on those LimitChildNodeExecution names when it names any. Only the
	// controller reads them; agents never see such a step.
	ExecuteOnChildNodes     bool     `json:"execute_on_child_nodes,omitempty"`
	LimitChildNodeExecution []string `json:"limit_child_node_execution,omitempty"`
}

// Key is "interface.step", the identity of a step.
func (s Step) Key() string { return s.Interface + "." + s.Step }

// NodeStepKey is the "interface.step" of the step a node is running, from
// its clean_step and deploy_step as Ironic's API and database hold them
// (maps; the clean step when both are set), or "" when neither is.
func NodeStepKey(cleanStep, deployStep map[string]any) string {
	s := cleanStep
	if len(s) == 0 {
		s = deployStep
	}
	if len(s) == 0 {
		return ""
	}
	return fmt.Sprintf("%v.%v", s["interface"], s["step"])
}

// Validate checks the descriptor itself (not a request's arguments).
func (s Step) Validate() error {
	if _, ok := InterfaceRank(s.Interface); !ok {
		return fmt.Errorf("step %q: unknown interface %q (want one of %s)", s.Step, s.Interface, strings.Join(interfaceOrder, ", "))
	}
	if strings.TrimSpace(s.Step) == "" {
		return fmt.Errorf("step with interface %q has an empty name", s.Interface)
	}
	if s.Priority < 0 {
		return fmt.Errorf("step %s: negative priority %d", s.Key(), s.Priority)
	}
	if s.MaxSeconds < 0 {
		return fmt.Errorf("step %s: negative max_seconds %d", s.Key(), s.MaxSeconds)
	}
	return nil
}

// CheckArgs validates args against the step's argsinfo: every required
// argument present, no argument the step does not declare. Errors name the
// step and the arguments so an operator can fix the request.
func (s Step) CheckArgs(args map[string]any) error {
	var missing, unexpected []string
	for name, info := range s.ArgsInfo {
		if _, ok := args[name]; info.Required && !ok {
			missing = append(missing, name)
		}
	}
	for name := range args {
		if _, ok := s.ArgsInfo[name]; !ok {
			unexpected = append(unexpected, name)
		}
	}
	sort.Strings(missing)
	sort.Strings(unexpected)
	switch {
	case len(missing) > 0 && len(unexpected) > 0:
		return fmt.Errorf("step %s is missing required arguments: %s, and has unexpected arguments: %s",
			s.Key(), strings.Join(missing, ", "), strings.Join(unexpected, ", "))
	case len(missing) > 0:
		return fmt.Errorf("step %s is missing required arguments: %s", s.Key(), strings.Join(missing, ", "))
	case len(unexpected) > 0:
		return fmt.Errorf("step %s has unexpected arguments: %s", s.Key(), strings.Join(unexpected, ", "))
	}
	return nil
}

// SortSteps orders steps as they run: priority descending, then interface
// rank descending, then by name so the order is total and reproducible.
func SortSteps(steps []Step) {
	sort.SliceStable(steps, func(i, j int) bool {
		a, b := steps[i], steps[j]
		if a.Priority != b.Priority {
			return a.Priority > b.Priority
		}
		ra, _ := InterfaceRank(a.Interface)
		rb, _ := InterfaceRank(b.Interface)
		if ra != rb {
			return ra > rb
		}
		return a.Step < b.Step
	})
}

// Duplicates returns the steps named more than once (by interface and
// step), each once, sorted by key: a list of deploy steps may name a step
// once only (Ironic's deploy templates).
func Duplicates(steps []Step) []Step {
	count := map[string]int{}
	var out []Step
	for _, s := range steps {
		if count[s.Key()]++; count[s.Key()] == 2 {
			out = append(out, Step{Interface: s.Interface, Step: s.Step})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key() < out[j].Key() })
	return out
}
