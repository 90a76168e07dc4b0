package api

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/simagent"
	"github.com/anvil-metal/anvil/controller/store"
)

// makeActive puts a node in active with an instance, powered on, as a
// deploy leaves it (the service tests start there).
func (e *testEnv) makeActive(node string) {
	e.t.Helper()
	_, err := store.MutateNode(context.Background(), e.st, node, func(m *store.Node) error {
		m.ProvisionState, m.TargetProvisionState = "active", nil
		m.InstanceUUID = strp("7d3c1a54-9b0e-4f11-8c2d-1e2f3a4b5c6d")
		m.PowerState = strp("power on")
		return nil
	})
	require.NoError(e.t, err)
}

// TestServiceThroughTheAPI: the service verb and its fields per
// microversion, with Ironic's errors, and a service of out-of-band steps
// on fake-hardware that returns the node to active.
func TestServiceThroughTheAPI(t *testing.T) {
	e := newEnv(t)
	id := e.createNode("svc", nil)["uuid"].(string)
	require.Equal(t, 202, e.provision("svc", "manage", nil).status)
	e.waitState("svc", "manageable")
	put := func(ver string, body map[string]any) resp {
		return e.do("PUT", "/v1/nodes/svc/states/provision", ver, body)
	}
	steps := []map[string]any{{"interface": "bios", "step": "apply_configuration",
		"args": map[string]any{"settings": []any{map[string]any{"name": "ProcVirtualization", "value": "Disabled"}}}}}

	r := put("1.87", map[string]any{"target": "service", "service_steps": steps})
	require.Equal(t, 400, r.status, string(r.body))
	assert.Equal(t, `The requested action "service" can not be performed on node "`+id+`" while it is in state "manageable".`, r.fault(t))
	e.makeActive(id)

	n := e.do("GET", "/v1/nodes/svc", "1.86", nil).json(t)
	assert.NotContains(t, n, "service_step", "absent below 1.87")
	n = e.do("GET", "/v1/nodes/svc", "1.87", nil).json(t)
	assert.Equal(t, map[string]any{}, n["service_step"], "{} when no step runs, as clean_step")

	for _, tc := range []struct {
		name, ver string
		body      map[string]any
		status    int
		fault     string
	}{
		{"service below 1.87", "1.86", map[string]any{"target": "service", "service_steps": steps}, 406, "Request not acceptable."},
		{"no steps", "1.87", map[string]any{"target": "service"}, 400, `"service_steps" is required when setting target provision state to service`},
		{"empty steps", "1.87", map[string]any{"target": "service", "service_steps": []any{}}, 400, `"service_steps" is required when setting target provision state to service`},
		{"steps with clean", "1.87", map[string]any{"target": "clean", "service_steps": steps}, 400, `"service_steps" is only valid when setting target provision state to service`},
		{"bad interface", "1.87", map[string]any{"target": "service", "service_steps": []any{map[string]any{"interface": "nope", "step": "x"}}}, 400,
			"Invalid service step 0: interface nope is not one of power, management, deploy, firmware, bios, raid"},
		{"priority is not a service step key", "1.87", map[string]any{"target": "service", "service_steps": []any{map[string]any{"interface": "bios", "step": "factory_reset", "priority": 1}}}, 400,
			`Invalid service step 0: unexpected key "priority"`},
		{"disable_ramdisk below 1.108", "1.107", map[string]any{"target": "service", "service_steps": steps, "disable_ramdisk": true}, 406, "disable_ramdisk is not acceptable in this API version"},
		{"disable_ramdisk with deploy", "1.108", map[string]any{"target": "active", "disable_ramdisk": true}, 400, "disable_ramdisk is supported only with manual cleaning or servicing"},
		{"unknown step", "1.87", map[string]any{"target": "service", "service_steps": []any{map[string]any{"interface": "bios", "step": "nope"}}}, 400,
			"Cannot service node " + id + ": node does not support service step bios.nope"},
	} {
		r := put(tc.ver, tc.body)
		require.Equal(t, tc.status, r.status, "%s: %s", tc.name, r.body)
		assert.Equal(t, tc.fault, r.fault(t), tc.name)
	}
	assert.Equal(t, "active", e.do("GET", "/v1/nodes/svc", latest, nil).json(t)["provision_state"], "nothing was started")

	r = put("1.108", map[string]any{"target": "service", "service_steps": steps, "disable_ramdisk": true})
	require.Equal(t, 202, r.status, string(r.body))
	n = e.waitState("svc", "active")
	assert.Nil(t, n["last_error"])
	assert.Equal(t, "power on", n["power_state"])
	hist := historyText(e, "svc")
	assert.Contains(t, hist, "active -> servicing (service requested)")
	assert.Contains(t, hist, "service step bios.apply_configuration finished")
	assert.Contains(t, hist, "servicing -> active (done)")

	// held: service_step shows the hold step at 1.87; the states filter
	hold := []map[string]any{{"interface": "bios", "step": "hold"}}
	require.Equal(t, 202, put("1.87", map[string]any{"target": "service", "service_steps": hold}).status)
	n = e.waitState("svc", "service hold")
	assert.Equal(t, "active", n["target_provision_state"])
	got := e.do("GET", "/v1/nodes/svc", "1.87", nil).json(t)
	assert.Equal(t, "hold", got["service_step"].(map[string]any)["step"])
	list := e.do("GET", "/v1/nodes?provision_state=service+hold", latest, nil)
	require.Equal(t, 200, list.status, string(list.body))
	assert.Len(t, list.json(t)["nodes"], 1)
	require.Equal(t, 202, put("1.87", map[string]any{"target": "unhold"}).status)
	e.waitState("svc", "active")
}

// TestServiceInBandWithTheAgent: an in-band service step boots the agent
// ramdisk on the active node, runs there, and the node boots its instance
// again (out of the ramdisk, powered on) and returns to active. With
// disable_ramdisk the in-band step is refused before anything runs.
func TestServiceInBandWithTheAgent(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	id := e.agentNode("ib", nil)
	e.makeActive(id)
	a := simagent.New(e.srv.URL, mac1)
	steps := []map[string]any{{"interface": "deploy", "step": "burnin_cpu", "args": map[string]any{}}}

	r := e.do("PUT", "/v1/nodes/ib/states/provision", "1.108", map[string]any{"target": "service", "service_steps": steps, "disable_ramdisk": true})
	require.Equal(t, 400, r.status, string(r.body))
	assert.Equal(t, "Cannot service node "+id+": service step deploy.burnin_cpu requires the agent ramdisk, but disable_ramdisk is set: only out-of-band steps can run", r.fault(t))
	r = e.do("PUT", "/v1/nodes/ib/states/provision", "1.87", map[string]any{"target": "service", "service_steps": []map[string]any{{"interface": "deploy", "step": "erase_devices"}}})
	require.Equal(t, 400, r.status, string(r.body))
	assert.Contains(t, r.fault(t), "service step deploy.erase_devices would write the disks of the instance")

	r = e.do("PUT", "/v1/nodes/ib/states/provision", "1.87", map[string]any{"target": "service", "service_steps": steps})
	require.Equal(t, 202, r.status, string(r.body))
	n := e.drive(a, "ib", "active", nil)
	assert.Nil(t, n["last_error"])
	assert.Equal(t, "power on", n["power_state"])
	assert.NotNil(t, n["instance_uuid"], "the instance is kept")
	assert.Equal(t, []string{"deploy.burnin_cpu"}, a.Ran())
	dii := n["driver_internal_info"].(map[string]any)
	assert.NotContains(t, dii, "agent_secret_token", "the agent's session ended with the service")
	assert.NotContains(t, dii, "service_steps")
	hist := historyText(e, "ib")
	for _, want := range []string{"servicing -> service wait (wait)", "rebooted into the agent ramdisk; waiting for it to call back",
		"service step deploy.burnin_cpu finished", "left the agent ramdisk; the node boots its instance again", "servicing -> active (done)"} {
		assert.Contains(t, hist, want)
	}
}

// TestServiceAbortWithTheAgent: abort while the agent runs an abortable
// service step ends the service at once in active (Ironic's fail, then
// abort), the agent's token revoked and the node rebooted into its
// instance.
func TestServiceAbortWithTheAgent(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	id := e.agentNode("ab", nil)
	e.makeActive(id)
	a := simagent.New(e.srv.URL, mac1)
	a.Outcomes["deploy.burnin_cpu"] = simagent.Outcome{Release: make(chan struct{})}
	steps := []map[string]any{{"interface": "deploy", "step": "burnin_cpu"}}
	require.Equal(t, 202, e.do("PUT", "/v1/nodes/ab/states/provision", "1.87", map[string]any{"target": "service", "service_steps": steps}).status)
	aborted := false
	n := e.drive(a, "ab", "active", func(n map[string]any) {
		if !aborted && n["provision_state"] == "service wait" && stepRunning(n) {
			r := e.do("PUT", "/v1/nodes/ab/states/provision", "1.87", map[string]any{"target": "abort"})
			require.Equal(t, 202, r.status, string(r.body))
			aborted = true
		}
	})
	require.True(t, aborted)
	assert.Equal(t, `By request, the service operation was aborted during or after the completion of step "deploy.burnin_cpu"`, n["last_error"])
	assert.Equal(t, "power on", n["power_state"])
	assert.Nil(t, n["target_power_state"])
	assert.Contains(t, historyText(e, "ab"), "power action succeeded: rebooting")
	_, err := a.Heartbeat(context.Background())
	assert.Error(t, err, "the agent's token died with the service")
}

// TestAbortInWaitCallBackAt1110: abort in wait call-back is Ironic's at
// 1.110 (deploy failed, no automated cleaning, Ironic's last_error) and
// stays anvil's documented extension below it.
func TestAbortInWaitCallBackAt1110(t *testing.T) {
	for _, ver := range []string{"1.110", "1.82"} {
		e := newEnvWith(t, agentConfig(), ":memory:")
		name := "wcb-" + strings.ReplaceAll(ver, ".", "")
		e.agentNode(name, map[string]any{"automated_clean": false, "instance_info": map[string]any{"image_source": "http://127.0.0.1:8080/img.raw",
			"image_checksum": "sha256:" + strings.Repeat("ab", 32)}})
		require.Equal(t, 202, e.provision(name, "provide", nil).status)
		e.waitState(name, "available")
		require.Equal(t, 202, e.provision(name, "active", nil).status)
		e.waitState(name, "wait call-back") // the ramdisk never calls back here
		r := e.do("PUT", "/v1/nodes/"+name+"/states/provision", ver, map[string]any{"target": "abort"})
		require.Equal(t, 202, r.status, "%s: %s", ver, r.body)
		n := e.waitState(name, "deploy failed")
		assert.Equal(t, `By request, the deploy operation was aborted during or after the completion of step "deploy.deploy": no agent step was running; the node is powered off`, n["last_error"], ver)
		assert.Equal(t, "power off", n["power_state"], ver)
		_, after, _ := strings.Cut(historyText(e, name), "wait call-back -> deploy failed (abort requested)")
		assert.NotContains(t, after, "cleaning", "%s: no automated cleaning", ver)
		assert.Contains(t, after, "power action succeeded: power off", ver)
	}
}
