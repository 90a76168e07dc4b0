package bmc

import (
	"context"
	"maps"
)

// fakeBIOS is a fake node's BIOS: pending values and a reset to defaults
// apply when the node boots (on from off, reset, cycle), as on real BMCs,
// so controller tests go through the same apply/reboot/read-back steps.
type fakeBIOS struct {
	registry   *Registry // nil: the node publishes none
	current    map[string]any
	pending    map[string]any
	toDefaults bool
}

func newFakeBIOS() fakeBIOS {
	reg := FakeBIOSRegistry()
	return fakeBIOS{registry: reg, current: registryDefaults(reg), pending: map[string]any{}}
}

func registryDefaults(reg *Registry) map[string]any {
	vals := map[string]any{}
	if reg == nil {
		return vals
	}
	for name, a := range reg.Attributes {
		vals[name] = a.Default
	}
	return vals
}

func (b *fakeBIOS) boot(k FakeKnobs) {
	if k.IgnoreBIOS {
		return
	}
	if b.toDefaults {
		b.current = registryDefaults(b.registry)
		b.toDefaults = false
	}
	maps.Copy(b.current, b.pending)
	b.pending = map[string]any{}
}

func i64(n int64) *int64 { return &n }

// FakeBIOSRegistry returns the registry fake nodes start with: a few
// attributes of each type, named as on Dell iDRAC (and anvil-vbmc).
func FakeBIOSRegistry() *Registry {
	ed := []string{"Enabled", "Disabled"}
	attrs := []Attribute{
		{Name: "BootMode", Type: AttrEnumeration, AllowableValues: []string{"Uefi", "Bios"}, ResetRequired: true, Default: "Uefi"},
		{Name: "ProcVirtualization", Type: AttrEnumeration, AllowableValues: ed, ResetRequired: true, Default: "Enabled"},
		{Name: "LogicalProc", Type: AttrEnumeration, AllowableValues: ed, ResetRequired: true, Default: "Enabled"},
		{Name: "SriovGlobalEnable", Type: AttrEnumeration, AllowableValues: ed, ResetRequired: true, Default: "Disabled"},
		{Name: "PxeDev1VlanId", Type: AttrInteger, LowerBound: i64(1), UpperBound: i64(4094), ScalarIncrement: i64(1), ResetRequired: true, Default: int64(1)},
		{Name: "PowerCycleDelaySecs", Type: AttrInteger, LowerBound: i64(0), UpperBound: i64(300), ScalarIncrement: i64(15), ResetRequired: true, Default: int64(0)},
		{Name: "AssetTag", Type: AttrString, MinLength: i64(0), MaxLength: i64(63), ValueExpression: `^[ -~]*$`, Default: ""},
		{Name: "QuietBoot", Type: AttrBoolean, ResetRequired: true, Default: false},
		{Name: "SystemServiceTag", Type: AttrString, ReadOnly: true, Immutable: true, Unique: true, MaxLength: i64(7), Default: "FAKE001"},
	}
	reg := &Registry{ID: "FakeBiosAttributeRegistry.v1_0_0", Attributes: map[string]Attribute{}}
	for _, a := range attrs {
		reg.Attributes[a.Name] = a
	}
	return reg
}

// FakeBIOS is a fake node's BIOS now.
type FakeBIOS struct {
	Current, Pending map[string]any
	// ToDefaults: ResetBIOS was asked; the defaults apply at the next boot.
	ToDefaults bool
}

// BIOS returns a copy of the node's BIOS.
func (f *Fake) BIOS(id string) FakeBIOS {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.node(id).bios
	return FakeBIOS{Current: maps.Clone(b.current), Pending: maps.Clone(b.pending), ToDefaults: b.toDefaults}
}

// SetBIOS replaces the node's registry (nil: none) and current values
// (nil: the registry's defaults), and drops what was pending.
func (f *Fake) SetBIOS(id string, reg *Registry, current map[string]any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if current == nil {
		current = registryDefaults(reg)
	}
	f.node(id).bios = fakeBIOS{registry: reg, current: maps.Clone(current), pending: map[string]any{}}
}

// bios implements biosSession.
func (s fakeSession) bios(context.Context) (BIOS, error) {
	var out BIOS
	err := s.f.doNode(s.id, "get_bios", func(n *fakeNode) error {
		out = BIOS{Current: maps.Clone(n.bios.current), Pending: maps.Clone(n.bios.pending),
			SupportedApplyTimes: []string{"OnReset"}}
		if n.bios.registry != nil {
			out.RegistryID = n.bios.registry.ID
		}
		return nil
	})
	return out, err
}

// biosRegistry implements biosSession.
func (s fakeSession) biosRegistry(context.Context, string) (*Registry, string, error) {
	var reg *Registry
	err := s.f.doNode(s.id, "get_bios_registry", func(n *fakeNode) error {
		reg = n.bios.registry
		return nil
	})
	if err == nil && reg == nil {
		return nil, "the fake node has no registry", nil
	}
	return reg, "", err
}

// applyBios implements biosSession. The Manager has validated the
// settings when there is a registry.
func (s fakeSession) applyBios(_ context.Context, settings map[string]any) error {
	return s.f.doNode(s.id, "apply_bios", func(n *fakeNode) error {
		maps.Copy(n.bios.pending, settings)
		return nil
	})
}

// resetBios implements biosSession.
func (s fakeSession) resetBios(context.Context) error {
	return s.f.doNode(s.id, "reset_bios", func(n *fakeNode) error {
		n.bios.toDefaults = true
		n.bios.pending = map[string]any{}
		return nil
	})
}
