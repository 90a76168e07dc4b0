package conductor

// What the conductor needs of a hardware type (Driver) and the names of
// its power states.

import (
	"context"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// StepStatus says how a step execution ended.
type StepStatus int

// Step outcomes.
const (
	StepDone StepStatus = iota // finished; go to the next step
	StepWait                   // runs asynchronously; the node waits (clean wait / wait call-back)
)

// Driver is what the conductor needs from a hardware type. Implementations:
// fake-hardware (here) and the bmc-backed ipmi/redfish types.
type Driver interface {
	Name() string
	// Validate reports, per interface, whether the node's configuration is usable.
	Validate(n *store.Node) map[string]error
	// VerifyAccess checks the node's management credentials (manage verb).
	VerifyAccess(ctx context.Context, n *store.Node) error
	// PowerState reads the power state; "" means unknown (fake-hardware
	// before any power action, as Ironic's fake interface).
	PowerState(ctx context.Context, n *store.Node) (string, error)
	SetPower(ctx context.Context, n *store.Node, target string) error
	// SetBootDevice sets the next (or every, when persistent) boot device:
	// "pxe" before booting the agent, "disk" after a deploy.
	SetBootDevice(ctx context.Context, n *store.Node, device string, persistent bool) error
	// CleanSteps and DeploySteps list the out-of-band steps, including
	// priority-0 (manual only) ones.
	CleanSteps(n *store.Node) []protocol.Step
	DeploySteps(n *store.Node) []protocol.Step
	ExecuteStep(ctx context.Context, n *store.Node, kind string, step protocol.Step) (StepStatus, error)
	Inspect(ctx context.Context, n *store.Node) error
}

// Power state strings (Ironic's).
const (
	PowerOn       = "power on"
	PowerOff      = "power off"
	Rebooting     = "rebooting"
	SoftRebooting = "soft rebooting"
	SoftPowerOff  = "soft power off"
)
