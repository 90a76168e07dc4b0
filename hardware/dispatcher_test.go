package hardware

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/anvil-metal/anvil/protocol"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func step(iface, name string, prio int) protocol.Step {
	return protocol.Step{Interface: iface, Step: name, Priority: prio}
}

func answer(tag string) func(context.Context, Kind, protocol.Step, map[string]any, ProgressFunc) (any, error) {
	return func(_ context.Context, _ Kind, s protocol.Step, _ map[string]any, p ProgressFunc) (any, error) {
		p.Report(Progress{Percent: 100, Message: tag})
		return tag + ":" + s.Step, nil
	}
}

func TestNewDispatcherOrdersBySupportAndDropsNone(t *testing.T) {
	ctx := context.Background()
	gen := &FakeManager{ManagerName: "generic", ManagerVersion: "1.0", Level: SupportGeneric}
	vendor := &FakeManager{ManagerName: "vendor", ManagerVersion: "2.0", Level: SupportServiceProvider}
	main := &FakeManager{ManagerName: "mainline", ManagerVersion: "1.1", Level: SupportMainline}
	none := &FakeManager{ManagerName: "absent", ManagerVersion: "9", Level: SupportNone}

	d, err := NewDispatcher(ctx, gen, none, vendor, main)
	require.NoError(t, err)
	var names []string
	for _, m := range d.Managers() {
		names = append(names, m.Name)
	}
	assert.Equal(t, []string{"vendor", "mainline", "generic"}, names)
	assert.Equal(t, map[string]string{"vendor": "2.0", "mainline": "1.1", "generic": "1.0"}, d.Versions())
}

func TestNewDispatcherRejectsBadManagerLists(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name     string
		managers []Manager
		want     string
	}{
		{"empty", nil, "no manager supports"},
		{"only none", []Manager{&FakeManager{ManagerName: "a", Level: SupportNone}}, "no manager supports"},
		{"duplicate", []Manager{&FakeManager{ManagerName: "a", Level: 1}, &FakeManager{ManagerName: "a", Level: 2}}, "two managers named"},
		{"unnamed", []Manager{&FakeManager{Level: 1}}, "empty name"},
		{"nil", []Manager{nil}, "nil manager"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewDispatcher(ctx, tt.managers...)
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestStepsDeduplicatesLikeIPA(t *testing.T) {
	ctx := context.Background()
	tests := []struct {
		name      string
		managers  []*FakeManager
		wantPrio  map[string]int    // step -> priority of the surviving copy
		wantOrder []string          // clean step order
		wantIface map[string]string // step -> interface of the surviving copy
	}{
		{
			name: "higher support wins even with lower priority",
			managers: []*FakeManager{
				{ManagerName: "generic", Level: SupportGeneric, Catalogue: Catalogue{Clean: []protocol.Step{step("deploy", "erase_devices", 10)}}},
				{ManagerName: "vendor", Level: SupportServiceProvider, Catalogue: Catalogue{Clean: []protocol.Step{step("deploy", "erase_devices", 5)}}},
			},
			wantPrio:  map[string]int{"erase_devices": 5},
			wantOrder: []string{"erase_devices"},
		},
		{
			name: "same support: higher priority wins",
			managers: []*FakeManager{
				{ManagerName: "a", Level: SupportMainline, Catalogue: Catalogue{Clean: []protocol.Step{step("deploy", "erase_devices", 10)}}},
				{ManagerName: "b", Level: SupportMainline, Catalogue: Catalogue{Clean: []protocol.Step{step("deploy", "erase_devices", 30)}}},
			},
			wantPrio:  map[string]int{"erase_devices": 30},
			wantOrder: []string{"erase_devices"},
		},
		{
			name: "full tie: alphabetically first manager wins",
			managers: []*FakeManager{
				{ManagerName: "zeta", Level: SupportMainline, Catalogue: Catalogue{Clean: []protocol.Step{step("raid", "delete_configuration", 0)}}},
				{ManagerName: "alpha", Level: SupportMainline, Catalogue: Catalogue{Clean: []protocol.Step{step("deploy", "delete_configuration", 0)}}},
			},
			wantPrio:  map[string]int{"delete_configuration": 0},
			wantOrder: []string{"delete_configuration"},
			wantIface: map[string]string{"delete_configuration": "deploy"},
		},
		{
			name: "distinct steps are merged and sorted by priority",
			managers: []*FakeManager{
				{ManagerName: "generic", Level: SupportGeneric, Catalogue: Catalogue{Clean: []protocol.Step{step("deploy", "erase_devices", 10), step("deploy", "erase_devices_metadata", 99)}}},
				{ManagerName: "vendor", Level: SupportMainline, Catalogue: Catalogue{Clean: []protocol.Step{step("raid", "create_configuration", 0), step("deploy", "update_firmware", 50)}}},
			},
			wantPrio:  map[string]int{"erase_devices": 10, "erase_devices_metadata": 99, "create_configuration": 0, "update_firmware": 50},
			wantOrder: []string{"erase_devices_metadata", "update_firmware", "erase_devices", "create_configuration"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ms := make([]Manager, len(tt.managers))
			for i, m := range tt.managers {
				ms[i] = m
			}
			d, err := NewDispatcher(ctx, ms...)
			require.NoError(t, err)
			cat := d.Steps(ctx)
			var order []string
			for _, s := range cat.Clean {
				order = append(order, s.Step)
				assert.Equal(t, tt.wantPrio[s.Step], s.Priority, s.Step)
				if iface, ok := tt.wantIface[s.Step]; ok {
					assert.Equal(t, iface, s.Interface)
				}
			}
			assert.Equal(t, tt.wantOrder, order)
			assert.Empty(t, cat.Deploy)
		})
	}
}

func TestRunFallsThroughOnNotSupported(t *testing.T) {
	ctx := context.Background()
	erase := step("deploy", "erase_devices", 10)
	tests := []struct {
		name       string
		vendorRun  func(context.Context, Kind, protocol.Step, map[string]any, ProgressFunc) (any, error)
		want       any
		wantErr    error
		wantVendor int
		wantGen    int
	}{
		{"vendor handles it", answer("vendor"), "vendor:erase_devices", nil, 1, 0},
		{"vendor declines", func(context.Context, Kind, protocol.Step, map[string]any, ProgressFunc) (any, error) {
			return nil, fmt.Errorf("no NVMe here: %w", ErrNotSupported)
		}, "generic:erase_devices", nil, 1, 1},
		{"vendor fails for real: no fall-through", func(context.Context, Kind, protocol.Step, map[string]any, ProgressFunc) (any, error) {
			return nil, errors.New("boom")
		}, nil, errors.New("boom"), 1, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			vendor := &FakeManager{ManagerName: "vendor", Level: SupportServiceProvider, Catalogue: Catalogue{Clean: []protocol.Step{erase}}, RunFunc: tt.vendorRun}
			gen := &FakeManager{ManagerName: "generic", Level: SupportGeneric, Catalogue: Catalogue{Clean: []protocol.Step{erase}}, RunFunc: answer("generic")}
			d, err := NewDispatcher(ctx, gen, vendor)
			require.NoError(t, err)
			var reports []Progress
			got, err := d.Run(ctx, KindClean, "erase_devices", nil, func(p Progress) { reports = append(reports, p) })
			if tt.wantErr != nil {
				require.Error(t, err)
				assert.EqualError(t, err, tt.wantErr.Error())
			} else {
				require.NoError(t, err)
				assert.Equal(t, tt.want, got)
				require.Len(t, reports, 1)
				assert.Equal(t, 100.0, reports[0].Percent)
			}
			assert.Len(t, vendor.Calls(), tt.wantVendor)
			assert.Len(t, gen.Calls(), tt.wantGen)
		})
	}
}

func TestRunErrors(t *testing.T) {
	ctx := context.Background()
	withArg := protocol.Step{Interface: "deploy", Step: "write_image", ArgsInfo: map[string]protocol.ArgInfo{"image_url": {Required: true}}}
	declines := &FakeManager{ManagerName: "generic", Level: SupportGeneric,
		Catalogue: Catalogue{Deploy: []protocol.Step{withArg}, Clean: []protocol.Step{step("deploy", "erase_devices", 10)}}}
	d, err := NewDispatcher(ctx, declines)
	require.NoError(t, err)

	tests := []struct {
		name     string
		kind     Kind
		step     string
		args     map[string]any
		wantType string
	}{
		{"unknown step", KindClean, "nope", nil, protocol.ErrTypeUnknownStep},
		{"step exists only for the other kind", KindClean, "write_image", map[string]any{"image_url": "x"}, protocol.ErrTypeUnknownStep},
		{"bad kind", Kind("service"), "erase_devices", nil, protocol.ErrTypeInvalidArgs},
		{"missing required arg", KindDeploy, "write_image", nil, protocol.ErrTypeInvalidArgs},
		{"unexpected arg", KindDeploy, "write_image", map[string]any{"image_url": "x", "bogus": 1}, protocol.ErrTypeInvalidArgs},
		{"every manager declines", KindClean, "erase_devices", nil, protocol.ErrTypeNotSupported},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := d.Run(ctx, tt.kind, tt.step, tt.args, nil)
			require.Error(t, err)
			var pe *protocol.Error
			require.ErrorAs(t, err, &pe)
			assert.Equal(t, tt.wantType, pe.Type)
		})
	}
}

func TestRunPassesArgsAndKindToManager(t *testing.T) {
	ctx := context.Background()
	var gotKind Kind
	var gotStep protocol.Step
	m := &FakeManager{ManagerName: "generic", Level: SupportGeneric,
		Catalogue: Catalogue{Deploy: []protocol.Step{{Interface: "deploy", Step: "write_image", ArgsInfo: map[string]protocol.ArgInfo{"image_url": {Required: true}}}}},
		RunFunc: func(_ context.Context, k Kind, s protocol.Step, args map[string]any, _ ProgressFunc) (any, error) {
			gotKind, gotStep = k, s
			return args["image_url"], nil
		}}
	d, err := NewDispatcher(ctx, m)
	require.NoError(t, err)
	got, err := d.Run(ctx, KindDeploy, "write_image", map[string]any{"image_url": "http://x/img"}, nil)
	require.NoError(t, err)
	assert.Equal(t, "http://x/img", got)
	assert.Equal(t, KindDeploy, gotKind)
	assert.Equal(t, "http://x/img", gotStep.Args["image_url"])
}

func TestFingerprint(t *testing.T) {
	ctx := context.Background()
	base := func() []*FakeManager {
		return []*FakeManager{
			{ManagerName: "generic", ManagerVersion: "1.0", Level: SupportGeneric, Catalogue: Catalogue{Clean: []protocol.Step{step("deploy", "erase_devices", 10)}}},
			{ManagerName: "vendor", ManagerVersion: "3.1", Level: SupportMainline, Catalogue: Catalogue{Deploy: []protocol.Step{step("deploy", "write_image", 0)}}},
		}
	}
	fp := func(ms []*FakeManager) string {
		in := make([]Manager, len(ms))
		for i, m := range ms {
			in[i] = m
		}
		d, err := NewDispatcher(ctx, in...)
		require.NoError(t, err)
		return d.Fingerprint(ctx)
	}
	ref := fp(base())
	require.Regexp(t, `^sha256:[0-9a-f]{64}$`, ref)

	reversed := base()
	reversed[0], reversed[1] = reversed[1], reversed[0]
	assert.Equal(t, ref, fp(reversed), "order of construction must not matter")

	tests := map[string]func([]*FakeManager) []*FakeManager{
		"version bump":     func(ms []*FakeManager) []*FakeManager { ms[1].ManagerVersion = "3.2"; return ms },
		"renamed manager":  func(ms []*FakeManager) []*FakeManager { ms[1].ManagerName = "vendor2"; return ms },
		"priority changed": func(ms []*FakeManager) []*FakeManager { ms[0].Catalogue.Clean[0].Priority = 11; return ms },
		"manager removed":  func(ms []*FakeManager) []*FakeManager { return ms[:1] },
		"step added": func(ms []*FakeManager) []*FakeManager {
			ms[0].Catalogue.Clean = append(ms[0].Catalogue.Clean, step("deploy", "erase_devices_metadata", 99))
			return ms
		},
	}
	for name, mutate := range tests {
		t.Run(name, func(t *testing.T) {
			assert.NotEqual(t, ref, fp(mutate(base())))
		})
	}
}

func TestCheckFingerprint(t *testing.T) {
	ctx := context.Background()
	m := &FakeManager{ManagerName: "generic", ManagerVersion: "1.0", Level: SupportGeneric, Catalogue: Catalogue{Clean: []protocol.Step{step("deploy", "erase_devices", 10)}}}
	d, err := NewDispatcher(ctx, m)
	require.NoError(t, err)
	fp := d.Fingerprint(ctx)
	assert.NoError(t, d.CheckFingerprint(ctx, fp))
	assert.NoError(t, d.CheckFingerprint(ctx, ""), "empty skips the check")

	m.Catalogue.Clean[0].Priority = 20 // the manager's steps changed under the controller
	err = d.CheckFingerprint(ctx, fp)
	var pe *protocol.Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, protocol.ErrTypeVersionMismatch, pe.Type)
}

func TestStepsByManagerGroupsWinnersByManager(t *testing.T) {
	ctx := context.Background()
	gen := &FakeManager{ManagerName: "generic", Level: SupportGeneric, Catalogue: Catalogue{
		Clean:  []protocol.Step{step("deploy", "erase_devices", 10), step("deploy", "erase_devices_metadata", 99)},
		Deploy: []protocol.Step{step("deploy", "write_image", 0)},
	}}
	vendor := &FakeManager{ManagerName: "vendor", Level: SupportMainline, Catalogue: Catalogue{
		Clean: []protocol.Step{step("deploy", "erase_devices", 5), step("deploy", "update_firmware", 50)},
	}}
	d, err := NewDispatcher(ctx, gen, vendor)
	require.NoError(t, err)

	clean := d.StepsByManager(ctx, KindClean)
	names := func(steps []protocol.Step) []string {
		var out []string
		for _, s := range steps {
			out = append(out, s.Step)
		}
		return out
	}
	assert.Equal(t, []string{"erase_devices_metadata"}, names(clean["generic"]), "the vendor's erase_devices wins on support")
	assert.Equal(t, []string{"update_firmware", "erase_devices"}, names(clean["vendor"]))
	assert.Equal(t, map[string][]protocol.Step{"generic": {step("deploy", "write_image", 0)}}, d.StepsByManager(ctx, KindDeploy))
	assert.Empty(t, d.StepsByManager(ctx, Kind("bogus")))
}
