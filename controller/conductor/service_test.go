package conductor

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/storetest"
	"github.com/anvil-metal/anvil/protocol"
)

// activeNode is an active node of driver with an instance, powered on,
// deployed without the agent (out-of-band steps run at once).
func activeNode(t *testing.T, st store.Store, driver string) string {
	t.Helper()
	n := storetest.NewNode("")
	n.Driver, n.ProvisionState = driver, string(state.Active)
	n.Interfaces.Deploy = "fake"
	n.InstanceUUID = strp("0b8a2c64-3f2e-4d52-9d3c-5f0e5a1b2c3d")
	n.InstanceInfo = map[string]any{"image_source": "http://images.test/os.raw"}
	n.PowerState = strp(PowerOn)
	require.NoError(t, st.CreateNode(context.Background(), n))
	return n.UUID
}

func service(c *Conductor, id string, steps ...protocol.Step) error {
	return c.Provision(context.Background(), id, ProvisionRequest{Target: "service", ServiceSteps: steps})
}

func serviceSteps() []protocol.Step {
	return []protocol.Step{
		{Interface: "management", Step: "clear_job_queue"},
		{Interface: "bios", Step: "factory_reset"},
	}
}

// TestServiceOutOfBandReturnsToActive: bios.apply_configuration and
// firmware.update run on the active node through the BMC, in the order
// asked; the node returns to active with its instance, powered on (the
// BIOS step rebooted the running instance to apply its settings).
func TestServiceOutOfBandReturnsToActive(t *testing.T) {
	e := startBIOS(t, bmc.HardwareFake, fwConfig())
	id := activeNode(t, e.st, e.drv.Name())
	ctx := context.Background()
	e.f.SetFirmwareImage("http://images.test/bmc-3.bin", bmc.FakeFirmwareImage{Component: "bmc", Version: "3.0.0"})
	require.NoError(t, e.drv.SetPower(ctx, mustNode(t, e.st, id), PowerOn))

	require.NoError(t, service(e.c, id, applyStep([2]any{"ProcVirtualization", "Disabled"}),
		updateStep(fwSetting("bmc", "http://images.test/bmc-3.bin"))))
	n := e.wait(t, id, state.Active)
	require.Nil(t, n.LastError)
	assert.Nil(t, n.TargetProvisionState)
	assert.Empty(t, n.ServiceStep)
	assert.Nil(t, n.Operation.Service, "the plan goes with the service")
	assert.NotNil(t, n.InstanceUUID, "the instance is kept")
	assert.Equal(t, PowerOn, *n.PowerState)
	assert.Equal(t, bmc.PowerOn, e.f.State(id).Power)
	assert.False(t, n.Maintenance)

	active, _ := e.f.FirmwareVersions(id)
	assert.Equal(t, "3.0.0", active["bmc"])
	settings, err := e.st.ListBIOSSettings(ctx, id)
	require.NoError(t, err)
	for _, s := range settings {
		if s.Name == "ProcVirtualization" {
			assert.Equal(t, "Disabled", s.Value, "the cache is refreshed after the service")
		}
	}
	h := history(t, e.st, id)
	for _, want := range []string{"active -> servicing (service requested)", "service step bios.apply_configuration started (1/2)",
		"service step bios.apply_configuration finished", "service step firmware.update started (2/2)", "servicing -> service wait (wait)",
		"service step firmware.update finished: firmware updated: bmc", "servicing -> active (done)"} {
		assert.Contains(t, h, want)
	}
}

func mustNode(t *testing.T, st store.Store, id string) *store.Node {
	t.Helper()
	n, err := st.GetNode(context.Background(), id)
	require.NoError(t, err)
	return n
}

// TestServiceFailureThenServiceAgain: a failed step leaves the node in
// service failed, in maintenance with fault "service failure", its power
// and instance untouched; service is refused in maintenance with Ironic's
// text and runs again once maintenance is off.
func TestServiceFailureThenServiceAgain(t *testing.T) {
	drv := &scriptDriver{steps: serviceSteps(), outcome: map[string]string{"bios.factory_reset": "fail"}}
	e := start(t, drv, Config{}, nil)
	ctx := context.Background()
	id := activeNode(t, e.st, "script")

	require.NoError(t, service(e.c, id, serviceSteps()...))
	n := e.wait(t, id, state.ServiceFailed)
	require.NotNil(t, n.LastError)
	assert.Equal(t, "Service step bios.factory_reset failed on node "+id+": disk on fire", *n.LastError)
	assert.True(t, n.Maintenance)
	assert.Equal(t, "service failure", *n.Fault)
	assert.Empty(t, n.ServiceStep, "Ironic clears service_step on failure")
	assert.Equal(t, "active", *n.TargetProvisionState)
	assert.Nil(t, n.TargetPowerState, "no power action: the node keeps running")
	assert.Equal(t, PowerOn, *n.PowerState)
	assert.NotNil(t, n.InstanceUUID)

	err := service(e.c, id, serviceSteps()[0])
	require.Error(t, err)
	assert.Equal(t, "The service operation can't be performed on node "+id+" because it's in maintenance mode.", err.Error())

	drv.outcome = map[string]string{}
	_, err = store.MutateNode(ctx, e.st, id, func(m *store.Node) error {
		m.Maintenance, m.MaintenanceReason, m.Fault = false, nil, nil
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, service(e.c, id, serviceSteps()...))
	n = e.wait(t, id, state.Active)
	assert.Nil(t, n.LastError, "a new service starts clean")
	assert.Equal(t, []string{"management.clear_job_queue", "bios.factory_reset", "management.clear_job_queue", "bios.factory_reset"}, drv.executed())
}

// TestServiceAbort: abort in service wait fails the service and returns
// the node to active (Ironic's fail then abort); a step that is not
// abortable is marked abort_after and the service ends after it. From
// service failed, abort returns to active outside maintenance only.
func TestServiceAbort(t *testing.T) {
	ctx := context.Background()
	t.Run("abortable step in service wait", func(t *testing.T) {
		steps := []protocol.Step{{Interface: "management", Step: "clear_job_queue", Abortable: true}, {Interface: "bios", Step: "factory_reset"}}
		drv := &scriptDriver{steps: steps, outcome: map[string]string{"management.clear_job_queue": "wait"}}
		e := start(t, drv, Config{}, nil)
		id := activeNode(t, e.st, "script")
		require.NoError(t, service(e.c, id, steps...))
		e.wait(t, id, state.ServiceWait)
		require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "abort"}))
		n := e.wait(t, id, state.Active)
		assert.Equal(t, `By request, the service operation was aborted during or after the completion of step "management.clear_job_queue"`, *n.LastError)
		assert.Empty(t, n.ServiceStep)
		assert.Nil(t, n.Operation.Service)
		assert.Nil(t, n.TargetPowerState, "no ramdisk was booted: no power action")
		assert.Equal(t, []string{"management.clear_job_queue"}, drv.executed())
		assert.Contains(t, history(t, e.st, id), "service wait -> active (abort requested)")
	})
	t.Run("non-abortable step: abort after it", func(t *testing.T) {
		steps := serviceSteps()
		drv := &scriptDriver{steps: steps, outcome: map[string]string{"management.clear_job_queue": "wait"}}
		e := start(t, drv, Config{}, nil)
		id := activeNode(t, e.st, "script")
		require.NoError(t, service(e.c, id, steps...))
		e.wait(t, id, state.ServiceWait)
		require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "abort"}))
		n := e.wait(t, id, state.ServiceWait)
		assert.Equal(t, true, n.ServiceStep["abort_after"])
		require.NoError(t, e.c.CompleteAsyncStep(ctx, id, "management.clear_job_queue", nil))
		n = e.wait(t, id, state.Active)
		assert.Equal(t, `By request, the service operation was aborted during or after the completion of step "management.clear_job_queue"`, *n.LastError)
		assert.Equal(t, []string{"management.clear_job_queue"}, drv.executed(), "the next step never ran")
		h := history(t, e.st, id)
		assert.Contains(t, h, "service wait -> service failed (fail)")
		assert.Contains(t, h, "service failed -> active (abort)")
	})
	t.Run("from service failed", func(t *testing.T) {
		drv := &scriptDriver{steps: serviceSteps(), outcome: map[string]string{"bios.factory_reset": "fail"}}
		e := start(t, drv, Config{}, nil)
		id := activeNode(t, e.st, "script")
		require.NoError(t, service(e.c, id, serviceSteps()...))
		e.wait(t, id, state.ServiceFailed)
		err := e.c.Provision(ctx, id, ProvisionRequest{Target: "abort"})
		require.Error(t, err)
		assert.Contains(t, err.Error(), `Can not abort service on node "`+id+`" while it is in maintenance mode.`)
		_, err = store.MutateNode(ctx, e.st, id, func(m *store.Node) error { m.Maintenance = false; return nil })
		require.NoError(t, err)
		require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "abort"}))
		n := e.wait(t, id, state.Active)
		assert.Equal(t, "By request, the service operation was aborted", *n.LastError)
	})
}

// TestServiceHold: a hold step rests the service in service hold; unhold
// runs the next step and the node returns to active; a held service takes
// new steps (service from service hold), and abort from service hold
// returns to active.
func TestServiceHold(t *testing.T) {
	ctx := context.Background()
	drv := &scriptDriver{steps: serviceSteps()}
	e := start(t, drv, Config{}, nil)
	id := activeNode(t, e.st, "script")
	hold := protocol.Step{Interface: "management", Step: "hold"}
	require.NoError(t, service(e.c, id, serviceSteps()[0], hold, serviceSteps()[1]))
	n := e.wait(t, id, state.ServiceHold)
	assert.Equal(t, "hold", n.ServiceStep["step"])
	assert.Equal(t, "active", *n.TargetProvisionState)
	assert.Nil(t, n.Reservation)
	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "unhold"}))
	n = e.wait(t, id, state.Active)
	assert.Nil(t, n.LastError)
	assert.Equal(t, []string{"management.clear_job_queue", "bios.factory_reset"}, drv.executed())

	require.NoError(t, service(e.c, id, hold))
	e.wait(t, id, state.ServiceHold)
	require.NoError(t, service(e.c, id, serviceSteps()[1]), "a held service takes new steps")
	e.wait(t, id, state.Active)
	assert.Equal(t, []string{"management.clear_job_queue", "bios.factory_reset", "bios.factory_reset"}, drv.executed())

	require.NoError(t, service(e.c, id, hold))
	e.wait(t, id, state.ServiceHold)
	require.NoError(t, e.c.Provision(ctx, id, ProvisionRequest{Target: "abort"}))
	n = e.wait(t, id, state.Active)
	assert.Equal(t, `By request, the service operation was aborted during or after the completion of step "management.hold"`, *n.LastError)
}

// TestServiceRefusals: the request is refused before anything runs: no
// steps, a step no driver offers, a step that would write the instance's
// disks, a node that is not active.
func TestServiceRefusals(t *testing.T) {
	drv := &scriptDriver{steps: serviceSteps()}
	e := start(t, drv, Config{}, nil)
	id := activeNode(t, e.st, "script")
	for name, tc := range map[string]struct {
		steps []protocol.Step
		want  string
	}{
		"no steps":        {nil, `"service_steps" is required when setting target provision state to service`},
		"unknown step":    {[]protocol.Step{{Interface: "bios", Step: "nope"}}, "Cannot service node " + id + ": node does not support service step bios.nope"},
		"erases the OS":   {[]protocol.Step{{Interface: "deploy", Step: "erase_devices"}}, "Cannot service node " + id + ": service step deploy.erase_devices would write the disks of the instance, which servicing keeps"},
		"writes an image": {[]protocol.Step{{Interface: "deploy", Step: "write_image"}}, "would write the disks of the instance"},
	} {
		err := service(e.c, id, tc.steps...)
		require.Error(t, err, name)
		assert.Contains(t, err.Error(), tc.want, name)
	}
	assert.Equal(t, string(state.Active), mustNode(t, e.st, id).ProvisionState)
	other := e.manageable(t)
	err := service(e.c, other, serviceSteps()...)
	require.Error(t, err)
	assert.Equal(t, `The requested action "service" can not be performed on node "`+other+`" while it is in state "manageable".`, err.Error())
}

// TestServiceResumesAfterARestart: a controller that stops while a
// firmware.update runs under servicing leaves the node in service wait;
// the next one watches the same BMC task (the flash is never asked twice)
// and the service ends in active.
func TestServiceResumesAfterARestart(t *testing.T) {
	cfg := fwConfig()
	cfg.Firmware.StallTimeout = time.Minute
	e := startBIOS(t, bmc.HardwareFake, cfg)
	id := activeNode(t, e.st, e.drv.Name())
	e.f.SetFirmwareImage("http://images.test/bmc.bin", bmc.FakeFirmwareImage{Component: "bmc", Version: "2"})
	e.f.SetFirmwareKnobs(id, bmc.FakeFirmwareKnobs{StallTasks: true})
	require.NoError(t, service(e.c, id, updateStep(fwSetting("bmc", "http://images.test/bmc.bin")), applyStep([2]any{"ProcVirtualization", "Disabled"})))
	require.Eventually(t, func() bool {
		n := mustNode(t, e.st, id)
		return n.Operation.Firmware != nil && n.Operation.Firmware.Items[0].Phase == store.FirmwareFlashing
	}, 5*time.Second, 5*time.Millisecond)
	e.stop()
	assert.Equal(t, string(state.ServiceWait), mustNode(t, e.st, id).ProvisionState)

	e.f.SetFirmwareKnobs(id, bmc.FakeFirmwareKnobs{})
	e2 := startBIOSOn(t, bmc.HardwareFake, cfg, e.st, e.f)
	n := e2.wait(t, id, state.Active)
	require.Nil(t, n.LastError)
	count := 0
	for _, c := range commands(e.f, id) {
		if c == "update_firmware" {
			count++
		}
	}
	assert.Equal(t, 1, count, "the flash is never requested twice")
	active, _ := e.f.FirmwareVersions(id)
	assert.Equal(t, "2", active["bmc"])
	assert.Contains(t, history(t, e.st, id), "service step bios.apply_configuration started (2/2)", "the plan went on after the restart")
}
