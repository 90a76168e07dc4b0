package conductor

// The fake-hardware driver: every interface succeeds at once.

import (
	"context"
	"fmt"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// FakeDriver is Ironic's fake-hardware: every interface succeeds at once, so
// the whole lifecycle runs without hardware. Power state lives on the node.
type FakeDriver struct{}

// Name of the hardware type.
func (FakeDriver) Name() string { return "fake-hardware" }

// Validate accepts any configuration.
func (FakeDriver) Validate(*store.Node) map[string]error {
	return map[string]error{"boot": nil, "deploy": nil, "management": nil, "power": nil, "bios": nil,
		"console": nil, "inspect": nil, "network": nil, "raid": nil, "rescue": nil, "storage": nil, "firmware": nil}
}

// VerifyAccess always succeeds.
func (FakeDriver) VerifyAccess(context.Context, *store.Node) error { return nil }

// PowerState reports the last state set: like Ironic's fake power
// interface, the node's own record, "" (unknown) until a power action sets
// one, so verifying a new node leaves its power_state null.
func (FakeDriver) PowerState(_ context.Context, n *store.Node) (string, error) {
	if n.PowerState == nil {
		return "", nil
	}
	return *n.PowerState, nil
}

// SetPower succeeds at once; the conductor records the new state.
func (FakeDriver) SetPower(context.Context, *store.Node, string) error { return nil }

// SetBootDevice succeeds at once.
func (FakeDriver) SetBootDevice(context.Context, *store.Node, string, bool) error { return nil }

// CleanSteps are the fake bios interface's manual steps of Ironic 21.4.
func (FakeDriver) CleanSteps(*store.Node) []protocol.Step {
	return []protocol.Step{
		{Interface: protocol.InterfaceBIOS, Step: "factory_reset", Priority: 0},
		{Interface: protocol.InterfaceBIOS, Step: "cache_bios_settings", Priority: 0},
		{Interface: protocol.InterfaceBIOS, Step: "apply_configuration", Priority: 0,
			ArgsInfo: map[string]protocol.ArgInfo{"settings": {Description: "A list of BIOS settings to be applied", Required: true}}},
	}
}

// DeploySteps is the fake deploy interface's single step.
func (FakeDriver) DeploySteps(*store.Node) []protocol.Step {
	return []protocol.Step{{Interface: protocol.InterfaceDeploy, Step: "deploy", Priority: 100}}
}

// ExecuteStep runs a fake step; apply_configuration checks its argument's type.
func (FakeDriver) ExecuteStep(_ context.Context, _ *store.Node, _ string, step protocol.Step) (StepStatus, error) {
	if step.Key() == "bios.apply_configuration" {
		if _, ok := step.Args["settings"].([]any); !ok {
			return StepDone, fmt.Errorf("argument settings of step bios.apply_configuration must be a list, got %T", step.Args["settings"])
		}
	}
	return StepDone, nil
}

// BIOSSettings is a small fixed set, with registry fields, so that the
// BIOS API and its clients can be exercised without hardware. (Ironic's
// fake bios interface caches none; a fake-hardware node there lists no
// settings.)
func (FakeDriver) BIOSSettings(context.Context, *store.Node) ([]store.BIOSSetting, error) {
	no, yes := false, true
	one, cores, zero, tag := 1, 64, 0, 32
	return []store.BIOSSetting{
		{Name: "BootMode", Value: "Uefi", AttributeType: "Enumeration", AllowableValues: []string{"Bios", "Uefi"},
			ReadOnly: &no, ResetRequired: &yes, Unique: &no},
		{Name: "ProcVirtualization", Value: "Enabled", AttributeType: "Enumeration", AllowableValues: []string{"Enabled", "Disabled"},
			ReadOnly: &no, ResetRequired: &yes, Unique: &no},
		{Name: "ProcCores", Value: "8", AttributeType: "Integer", LowerBound: &one, UpperBound: &cores,
			ReadOnly: &no, ResetRequired: &yes, Unique: &no},
		{Name: "AssetTag", Value: "", AttributeType: "String", MinLength: &zero, MaxLength: &tag,
			ReadOnly: &no, ResetRequired: &no, Unique: &yes},
		{Name: "SystemModel", Value: "anvil fake", AttributeType: "String", ReadOnly: &yes, ResetRequired: &no, Unique: &no},
	}, nil
}

var _ BIOSReader = FakeDriver{}

// Inspect finds nothing new.
func (FakeDriver) Inspect(context.Context, *store.Node) error { return nil }
