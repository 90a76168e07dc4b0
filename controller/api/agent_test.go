package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"
	"unicode"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/simagent"
	"github.com/anvil-metal/anvil/protocol"
)

const mac1, mac2 = "52:54:00:aa:00:01", "52:54:00:aa:00:02"

func agentConfig() conductor.Config {
	return conductor.Config{CheckInterval: 20 * time.Millisecond,
		Agent: conductor.AgentConfig{HeartbeatInterval: 10 * time.Millisecond, BootTimeout: time.Minute, SilenceTimeout: time.Minute}}
}

// agentNode creates a manageable fake-hardware node with the direct deploy
// interface (in-band steps through the agent) and a port for mac1.
func (e *testEnv) agentNode(name string, extra map[string]any) string {
	e.t.Helper()
	body := map[string]any{"deploy_interface": "direct", "inspect_interface": "agent"}
	for k, v := range extra {
		body[k] = v
	}
	n := e.createNode(name, body)
	require.Equal(e.t, 201, e.do("POST", "/v1/ports", latest, map[string]any{"address": mac1, "node_uuid": n["uuid"]}).status)
	require.Equal(e.t, 202, e.provision(name, "manage", nil).status)
	e.waitState(name, "manageable")
	return n["uuid"].(string)
}

// drive makes the simulated agent look up and heartbeat until the node
// rests in want (or fails the test after 10 s). before runs each round.
func (e *testEnv) drive(a *simagent.Agent, node, want string, before func(n map[string]any)) map[string]any {
	e.t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		n := e.do("GET", "/v1/nodes/"+node, latest, nil).json(e.t)
		if n["provision_state"] == want && n["reservation"] == nil && e.cond.Idle() {
			return n
		}
		if before != nil {
			before(n)
		}
		// The controller rebooted the node after this agent booted (the
		// await names the agent's boot as the old one): like a real node,
		// the simulated agent comes back with a new boot.
		dii, _ := n["driver_internal_info"].(map[string]any)
		if aw, ok := dii["agent_await"].(map[string]any); ok && aw["old_boot_id"] != "" && aw["old_boot_id"] == dii["agent_boot_id"] && a.Token() != "" {
			a.Boot()
		}
		if a.Token() == "" {
			_ = a.Lookup(ctx)
		} else if _, err := a.Heartbeat(ctx); errors.Is(err, simagent.ErrUnauthorized) {
			a.Boot()
		}
		time.Sleep(5 * time.Millisecond)
	}
	n := e.do("GET", "/v1/nodes/"+node, latest, nil).json(e.t)
	e.t.Fatalf("node %s stuck in %v (want %s); last_error=%v; agent ran %v", node, n["provision_state"], want, n["last_error"], a.Ran())
	return nil
}

func historyText(e *testEnv, node string) string {
	var out []string
	for _, ev := range e.do("GET", "/v1/nodes/"+node+"/history", latest, nil).json(e.t)["history"].([]any) {
		out = append(out, ev.(map[string]any)["event"].(string))
	}
	return strings.Join(out, "\n")
}

func TestAgentAutomatedCleaning(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	e.agentNode("clean1", nil)

	r := e.do("GET", "/v1/nodes/clean1/cleaning/steps", latest, nil)
	require.Equal(t, http.StatusAccepted, r.status, "nothing cached before the agent ran")
	assert.Equal(t, "-1", r.header.Get("Retry-Request-After"))
	assert.Contains(t, r.json(t)["message"], "has not reported its clean steps yet")

	// lookup is refused while the node expects no agent
	a := simagent.New(e.srv.URL, mac1)
	a.Outcomes["deploy.erase_devices"] = simagent.Outcome{Summary: "/dev/nvme0n1 erased by nvme_format_crypto_erase,\n\x1b[31mverified"}
	err := a.Lookup(context.Background())
	require.Error(t, err)
	assert.Contains(t, err.Error(), "No node expects an agent at these addresses now")

	require.Equal(t, 202, e.provision("clean1", "provide", nil).status)
	n := e.waitState("clean1", "clean wait")
	dii := n["driver_internal_info"].(map[string]any)
	assert.Contains(t, dii, "agent_await", "the node was rebooted into the ramdisk and waits for it")

	var token, boot string
	n = e.drive(a, "clean1", "available", func(map[string]any) {
		dii := e.do("GET", "/v1/nodes/clean1", latest, nil).json(t)["driver_internal_info"].(map[string]any)
		if b, ok := dii["agent_boot_id"].(string); ok && a.Token() != "" {
			token, boot = a.Token(), b
		}
	})
	assert.Equal(t, []string{"inventory", "deploy.erase_devices_metadata", "inventory", "deploy.erase_devices"}, a.Ran(),
		"priority order, each erase step after the agent reported what it sees")
	assert.Equal(t, "power off", n["power_state"])
	dii = n["driver_internal_info"].(map[string]any)
	assert.NotContains(t, dii, "agent_secret_token")
	require.NotEmpty(t, token)
	r = e.do("POST", "/v1/heartbeat/clean1", latest, map[string]any{"agent_token": token, "agent_version": "x", "boot_id": boot, "fingerprint": "f"})
	assert.Equal(t, 401, r.status, "the old agent can no longer act: %s", r.body)

	steps := e.do("GET", "/v1/nodes/clean1/cleaning/steps", latest, nil)
	require.Equal(t, 200, steps.status)
	body := steps.json(t)
	assert.NotEmpty(t, body["fingerprint"])
	assert.Equal(t, a.Version, body["agent_version"])
	list := body["steps"].([]any)
	require.Len(t, list, 3+len(a.Clean), "3 fake bios steps and the agent's")
	assert.Equal(t, "erase_devices_metadata", list[0].(map[string]any)["step"], "highest priority first")
	high := e.do("GET", "/v1/nodes/clean1/cleaning/steps?min_priority=10", latest, nil).json(t)["steps"].([]any)
	assert.Len(t, high, 2)

	hist := historyText(e, "clean1")
	assert.Contains(t, hist, "clean step deploy.erase_devices finished: /dev/nvme0n1 erased by nvme_format_crypto_erase,  [31mverified\n",
		"the agent's summary, on one line, without control characters")
	assert.Contains(t, hist, "clean step deploy.erase_devices_metadata finished\n", "no summary, nothing appended")
	assert.Contains(t, hist, "agent step catalogue cached")
}

func TestAgentStepFailure(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	e.agentNode("fail1", nil)
	a := simagent.New(e.srv.URL, mac1)
	a.Outcomes["deploy.erase_devices"] = simagent.Outcome{Fail: "Failed to erase /dev/nvme0n1", Runs: 2}
	require.Equal(t, 202, e.provision("fail1", "provide", nil).status)
	n := e.drive(a, "fail1", "clean failed", nil)
	assert.Contains(t, n["last_error"], "Clean step deploy.erase_devices failed")
	assert.Contains(t, n["last_error"], "Failed to erase /dev/nvme0n1")
	assert.Contains(t, n["last_error"], "BlockDeviceEraseError")
	assert.Equal(t, true, n["maintenance"])
	assert.Equal(t, "clean failure", n["fault"])
	assert.Equal(t, "erase_devices", n["clean_step"].(map[string]any)["step"])
	assert.Equal(t, "power off", n["power_state"], "a failed cleaning is torn down: node powered off")
}

func TestAgentStepFailureCarriesThePartialResultSummary(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	e.agentNode("fail2", nil)
	a := simagent.New(e.srv.URL, mac1)
	a.Outcomes["deploy.erase_devices"] = simagent.Outcome{Fail: "1 of 2 devices\twere not erased",
		Result:  map[string]any{"devices": []any{map[string]any{"device": "/dev/sda", "status": "erased"}, map[string]any{"device": "/dev/sdb", "status": "failed"}}},
		Summary: "/dev/sda erased by overwrite, verified (64 MB, 1.2 s);\n/dev/sdb failed: verify: byte 123\x1b[31m is 0x5a\r\n"}
	require.Equal(t, 202, e.provision("fail2", "provide", nil).status)
	n := e.drive(a, "fail2", "clean failed", nil)

	want := "BlockDeviceEraseError: 1 of 2 devices were not erased; step result: " +
		"/dev/sda erased by overwrite, verified (64 MB, 1.2 s); /dev/sdb failed: verify: byte 123 [31m is 0x5a"
	lastErr, _ := n["last_error"].(string)
	assert.True(t, strings.HasPrefix(lastErr, "Clean step deploy.erase_devices failed on node "), "Ironic's format: %s", lastErr)
	assert.True(t, strings.HasSuffix(lastErr, ": "+want), "error, then the agent's summary: %s", lastErr)
	assert.NotContains(t, n["maintenance_reason"], "\n")
	assert.Contains(t, n["maintenance_reason"], want)

	var event string
	for _, ev := range e.do("GET", "/v1/nodes/fail2/history", latest, nil).json(t)["history"].([]any) {
		if ev := ev.(map[string]any); ev["severity"] == "ERROR" {
			event = ev["event"].(string)
		}
	}
	assert.Equal(t, lastErr, event, "the history's failure event says the same")
	for _, text := range []string{lastErr, event} {
		assert.False(t, strings.ContainsFunc(text, unicode.IsControl), "one line, no control characters: %q", text)
	}
}

func TestAgentProgressIsVisible(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	e.agentNode("prog", nil)
	release := make(chan struct{})
	a := simagent.New(e.srv.URL, mac1)
	a.Outcomes["deploy.erase_devices_metadata"] = simagent.Outcome{Release: release}
	require.Equal(t, 202, e.provision("prog", "provide", nil).status)
	var seen float64
	e.drive(a, "prog", "available", func(n map[string]any) {
		st, _ := n["driver_internal_info"].(map[string]any)["agent_command_status"].(map[string]any)
		if p, ok := st["progress"].(map[string]any); ok && st["state"] == "RUNNING" {
			if pc := p["percent"].(float64); pc > seen {
				seen = pc
			}
			if seen >= 30 {
				select {
				case <-release:
				default:
					close(release)
				}
			}
		}
	})
	assert.GreaterOrEqual(t, seen, 30.0, "running progress shows in the node")
}

// stepRunning says whether the agent reported the node's command running.
func stepRunning(n map[string]any) bool {
	st, _ := n["driver_internal_info"].(map[string]any)["agent_command_status"].(map[string]any)
	return st["state"] == "RUNNING"
}

func TestAgentAbort(t *testing.T) {
	t.Run("abortable, the agent stops", func(t *testing.T) {
		e := newEnvWith(t, agentConfig(), ":memory:")
		e.agentNode("ab0", nil)
		a := simagent.New(e.srv.URL, mac1)
		a.Outcomes["deploy.erase_devices_metadata"] = simagent.Outcome{Release: make(chan struct{}),
			Summary: "/dev/sda failed: aborted after 1048576 bytes",
			Result:  map[string]any{"devices": []any{map[string]any{"plan": map[string]any{"device": "/dev/sda"}, "status": "failed", "bytes": 1048576}}}}
		require.Equal(t, 202, e.provision("ab0", "provide", nil).status)
		aborted := false
		n := e.drive(a, "ab0", "clean failed", func(n map[string]any) {
			if !aborted && n["provision_state"] == "clean wait" && stepRunning(n) {
				require.Equal(t, 202, e.provision("ab0", "abort", nil).status)
				got := e.do("GET", "/v1/nodes/ab0", latest, nil).json(t)
				assert.Equal(t, "clean wait", got["provision_state"], "the node waits for the agent to stop")
				aborted = true
			}
		})
		require.Len(t, a.Aborts(), 1, "the heartbeat reply carried the abort once; the agent then stopped")
		assert.Contains(t, n["last_error"], "Clean step deploy.erase_devices_metadata aborted by operator: the agent stopped it; partial result: /dev/sda failed: aborted after 1048576 bytes")
		assert.Equal(t, false, n["maintenance"])
		assert.Equal(t, "power on", n["power_state"], "the controller did not power the node off")
		assert.Empty(t, n["clean_step"])
		_, err := a.Heartbeat(context.Background())
		assert.NoError(t, err, "the agent answers the next heartbeat")
		res, _ := resultsOf(t, e, "/v1/nodes/ab0/steps/results")
		require.NotEmpty(t, res)
		assert.Equal(t, "aborted", res[0]["outcome"])
		assert.EqualValues(t, 1048576, res[0]["result"].(map[string]any)["devices"].([]any)[0].(map[string]any)["bytes"], "the partial result is kept")
		assert.Equal(t, []string{"deploy.erase_devices_metadata"}, a.Steps(), "the next step never started")
	})
	t.Run("abortable, the agent ignores the abort", func(t *testing.T) {
		cc := agentConfig()
		cc.Agent.AbortTimeout = 200 * time.Millisecond
		e := newEnvWith(t, cc, ":memory:")
		e.agentNode("ab1", nil)
		a := simagent.New(e.srv.URL, mac1)
		a.IgnoreAbort = true
		a.Outcomes["deploy.erase_devices_metadata"] = simagent.Outcome{Release: make(chan struct{})}
		require.Equal(t, 202, e.provision("ab1", "provide", nil).status)
		aborted := false
		n := e.drive(a, "ab1", "clean failed", func(n map[string]any) {
			if !aborted && n["provision_state"] == "clean wait" && stepRunning(n) {
				require.Equal(t, 202, e.provision("ab1", "abort", nil).status)
				aborted = true
			}
		})
		assert.NotEmpty(t, a.Aborts())
		assert.Contains(t, n["last_error"], `aborted during step "deploy.erase_devices_metadata": the agent did not stop it within 200ms, so the node is powered off`)
		assert.Equal(t, false, n["maintenance"])
		assert.Equal(t, "power off", n["power_state"], "the fallback: the node is powered off")
		assert.NotContains(t, n["driver_internal_info"], "agent_secret_token", "and the agent's token is gone")
		_, err := a.Heartbeat(context.Background())
		assert.Error(t, err, "the aborted agent can no longer act")
		res, _ := resultsOf(t, e, "/v1/nodes/ab1/steps/results")
		require.NotEmpty(t, res)
		assert.Equal(t, "aborted", res[0]["outcome"])
	})
	t.Run("before the agent runs the step", func(t *testing.T) {
		e := newEnvWith(t, agentConfig(), ":memory:")
		e.agentNode("ab3", nil)
		require.Equal(t, 202, e.provision("ab3", "provide", nil).status)
		e.waitState("ab3", "clean wait")
		require.Equal(t, 202, e.provision("ab3", "abort", nil).status)
		n := e.waitState("ab3", "clean failed")
		assert.Contains(t, n["last_error"], "By request, the clean operation was aborted")
	})
	t.Run("not abortable", func(t *testing.T) {
		e := newEnvWith(t, agentConfig(), ":memory:")
		e.agentNode("ab2", nil)
		a := simagent.New(e.srv.URL, mac1)
		a.Clean[0].Abortable = false
		release := make(chan struct{})
		a.Outcomes["deploy.erase_devices_metadata"] = simagent.Outcome{Release: release}
		require.Equal(t, 202, e.provision("ab2", "provide", nil).status)
		aborted := false
		n := e.drive(a, "ab2", "clean failed", func(n map[string]any) {
			if !aborted && len(a.Steps()) > 0 && n["provision_state"] == "clean wait" {
				require.Equal(t, 202, e.provision("ab2", "abort", nil).status)
				got := e.do("GET", "/v1/nodes/ab2", latest, nil).json(t)
				assert.Equal(t, "clean wait", got["provision_state"], "a non-abortable step keeps running")
				assert.Equal(t, true, got["clean_step"].(map[string]any)["abort_after"])
				aborted = true
				close(release)
			}
		})
		assert.Contains(t, n["last_error"], "aborted during or after the completion of step")
		assert.Equal(t, []string{"deploy.erase_devices_metadata"}, a.Steps(), "the next step never started")
	})
}

func TestAgentManualCleanArgs(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	e.agentNode("man", nil)
	a := simagent.New(e.srv.URL, mac1)
	bad := map[string]any{"clean_steps": []map[string]any{
		{"interface": "raid", "step": "delete_configuration"},
		{"interface": "raid", "step": "create_configuration", "args": map[string]any{"bogus": 1}}}}

	// not cached yet: accepted, then failed once the agent reported its steps
	require.Equal(t, 202, e.provision("man", "clean", bad).status)
	n := e.drive(a, "man", "clean failed", nil)
	assert.Contains(t, n["last_error"], "step raid.create_configuration is missing required arguments: target_raid_config, and has unexpected arguments: bogus")
	assert.Equal(t, false, n["maintenance"], "no step was running")
	assert.Empty(t, a.Ran(), "nothing ran")
	assert.Equal(t, "manageable", n["target_provision_state"])

	require.Equal(t, 202, e.provision("man", "manage", nil).status)
	e.waitState("man", "manageable")
	// cached now: refused with 400 before anything is powered on
	r := e.provision("man", "clean", bad)
	require.Equal(t, 400, r.status)
	assert.Contains(t, r.fault(t), "unexpected arguments: bogus")

	good := map[string]any{"clean_steps": []map[string]any{{"interface": "raid", "step": "delete_configuration"},
		{"interface": "bios", "step": "factory_reset"}}}
	require.Equal(t, 202, e.provision("man", "clean", good).status)
	a.Boot()
	e.drive(a, "man", "manageable", nil)
	assert.Equal(t, []string{"raid.delete_configuration"}, a.Ran(), "in the user's order; the bios step ran out of band")
}

func TestAgentDeploy(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	e.agentNode("dep", map[string]any{"instance_info": map[string]any{"image_source": "http://127.0.0.1:8080/img.raw",
		"image_checksum": "sha256:" + strings.Repeat("ab", 32)}, "properties": map[string]any{"root_device": map[string]any{"serial": "SIM-0001"}}})
	a := simagent.New(e.srv.URL, mac1)
	a.Deploy = append(a.Deploy, simagentStep("deploy", "install_extras"))
	require.Equal(t, 202, e.provision("dep", "provide", nil).status)
	e.drive(a, "dep", "available", nil)

	a.Boot()
	r := e.provision("dep", "active", map[string]any{"deploy_steps": []map[string]any{
		{"interface": "deploy", "step": "install_extras", "args": map[string]any{}, "priority": 70}}})
	require.Equal(t, 202, r.status, string(r.body))
	n := e.drive(a, "dep", "active", nil)
	assert.Equal(t, "power on", n["power_state"])
	ran := a.Ran()
	assert.Equal(t, []string{"deploy.write_image", "deploy.install_extras"}, ran[len(ran)-2:])
	cmds := a.Commands()
	write := cmds[len(cmds)-2]
	assert.Equal(t, "execute_deploy_step", write.Name)
	assert.Equal(t, "http://127.0.0.1:8080/img.raw", write.Step.Args["image_url"])
	assert.Equal(t, map[string]any{"serial": "SIM-0001"}, write.Step.Args["root_device"])
	hist := historyText(e, "dep")
	for _, s := range []string{"deploy.deploy", "deploy.write_image", "deploy.install_extras", "deploy.prepare_instance_boot", "deploy.tear_down_agent", "deploy.boot_instance"} {
		assert.Contains(t, hist, "deploy step "+s+" finished")
	}
	assert.Less(t, strings.Index(hist, "deploy.install_extras started"), strings.Index(hist, "deploy.prepare_instance_boot started"), "user step at priority 70 runs between 80 and 60")

	// without an image the deploy fails with a clear message
	require.Equal(t, 202, e.provision("dep", "deleted", nil).status)
	a.Boot()
	e.drive(a, "dep", "available", nil)
	assert.Equal(t, map[string]any{}, e.do("GET", "/v1/nodes/dep", latest, nil).json(t)["instance_info"], "undeploy forgets the instance")
	require.Equal(t, 202, e.provision("dep", "active", nil).status)
	a.Boot()
	n = e.drive(a, "dep", "deploy failed", nil)
	assert.Contains(t, n["last_error"], "instance_info.image_source is not set")
}

func simagentStep(iface, name string) protocol.Step {
	return protocol.Step{Interface: iface, Step: name}
}

func TestAgentInspection(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	e.agentNode("insp", nil)
	a := simagent.New(e.srv.URL, mac1, mac2)
	require.Equal(t, 202, e.provision("insp", "inspect", nil).status)
	n := e.drive(a, "insp", "manageable", nil)
	props := n["properties"].(map[string]any)
	assert.Equal(t, float64(4), props["cpus"])
	assert.Equal(t, float64(8192), props["memory_mb"])
	assert.Equal(t, float64(63), props["local_gb"])
	assert.Equal(t, "x86_64", props["cpu_arch"])
	assert.NotNil(t, n["inspection_finished_at"])
	ports := e.do("GET", "/v1/nodes/insp/ports", latest, nil).json(t)["ports"].([]any)
	assert.Len(t, ports, 2, "a port was created for the second NIC")
	inv := e.do("GET", "/v1/nodes/insp/inventory", latest, nil)
	require.Equal(t, 200, inv.status)
	var body struct {
		Inventory struct {
			Disks []struct{ Serial string } `json:"disks"`
		} `json:"inventory"`
	}
	require.NoError(t, json.Unmarshal(inv.body, &body))
	assert.Equal(t, "SIM-0001", body.Inventory.Disks[0].Serial)
	assert.Equal(t, 404, e.do("GET", "/v1/nodes/insp/inventory", "1.80", nil).status, "below 1.81 there is no inventory, as in Ironic")
}

func TestAgentRebootRequestedStep(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	e.agentNode("rb", nil)
	a := simagent.New(e.srv.URL, mac1)
	a.Clean[0].RebootRequested = true
	require.Equal(t, 202, e.provision("rb", "provide", nil).status)
	firstBoot := ""
	rebooted := false
	e.drive(a, "rb", "available", func(n map[string]any) {
		// The first boot's token is taken while the agent holds it: the
		// controller revokes it when it starts the reboot, a moment before
		// the await shows, and a heartbeat in that moment (refused) has
		// already made the agent a new boot with no token. drive restarts
		// the agent as the reboot does (a refused token, or the await
		// naming its boot).
		if t := a.Token(); t != "" && firstBoot == "" {
			firstBoot = t
		}
		aw, _ := n["driver_internal_info"].(map[string]any)["agent_await"].(map[string]any)
		if aw["reason"] == "reboot" {
			rebooted = true
		}
	})
	assert.True(t, rebooted, "the controller rebooted the node after the step")
	assert.NotEmpty(t, firstBoot)
	assert.NotEqual(t, firstBoot, a.Token(), "the boot after the reboot has a token of its own")
	assert.Equal(t, []string{"deploy.erase_devices_metadata", "deploy.erase_devices"}, a.Steps(), "cleaning went on after the reboot")
	assert.Contains(t, historyText(e, "rb"), "requested a reboot")
}

func TestAgentTimeouts(t *testing.T) {
	t.Run("ramdisk never calls back", func(t *testing.T) {
		cc := agentConfig()
		cc.Agent.BootTimeout = 100 * time.Millisecond
		e := newEnvWith(t, cc, ":memory:")
		e.agentNode("boot", nil)
		require.Equal(t, 202, e.provision("boot", "provide", nil).status)
		n := e.waitState("boot", "clean failed")
		assert.Contains(t, n["last_error"], "the agent ramdisk never called back")
	})
	t.Run("agent goes silent", func(t *testing.T) {
		cc := agentConfig()
		cc.Agent.SilenceTimeout = 150 * time.Millisecond
		e := newEnvWith(t, cc, ":memory:")
		e.agentNode("quiet", nil)
		a := simagent.New(e.srv.URL, mac1)
		a.Outcomes["deploy.erase_devices_metadata"] = simagent.Outcome{Release: make(chan struct{})}
		require.Equal(t, 202, e.provision("quiet", "provide", nil).status)
		e.drive(a, "quiet", "clean wait", func(map[string]any) {
			if len(a.Steps()) > 0 {
				// the agent got its command; from now on it never heartbeats
				n := e.waitState("quiet", "clean failed")
				assert.Contains(t, n["last_error"], "the agent went silent during step deploy.erase_devices_metadata")
				assert.Equal(t, true, n["maintenance"])
				t.SkipNow()
			}
		})
	})
}

func TestAgentStepTimeLimit(t *testing.T) {
	cc := agentConfig()
	cc.Agent.StepTimeout = time.Hour
	e := newEnvWith(t, cc, ":memory:")
	e.agentNode("slow", nil)
	a := simagent.New(e.srv.URL, mac1)
	a.Clean[0].MaxSeconds = 1 // the step declares its own limit, shorter than the default
	a.Outcomes["deploy.erase_devices_metadata"] = simagent.Outcome{Release: make(chan struct{})}
	require.Equal(t, 202, e.provision("slow", "provide", nil).status)
	n := e.drive(a, "slow", "clean failed", nil) // the agent keeps heartbeating: it is not silent
	assert.Contains(t, n["last_error"], "step deploy.erase_devices_metadata exceeded its limit of 1s")
	assert.Equal(t, true, n["maintenance"], "a step was running")
}

func TestAgentEndpointsRefuseBadInput(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	id := e.agentNode("bad", nil)
	tests := map[string]struct {
		method, path string
		body         any
		status       int
		fault        string
	}{
		"lookup without args":  {"GET", "/v1/lookup", nil, 400, "At least one of 'addresses' and 'node_uuid'"},
		"lookup unknown mac":   {"GET", "/v1/lookup?addresses=52:54:00:ff:ff:ff", nil, 404, "No node expects an agent"},
		"lookup wrong state":   {"GET", "/v1/lookup?addresses=" + mac1, nil, 404, "No node expects an agent"},
		"lookup unknown param": {"GET", "/v1/lookup?addresses=" + mac1 + "&x=1", nil, 400, "Unknown argument"},
		"ipa heartbeat":        {"POST", "/v1/heartbeat/" + id, map[string]any{"callback_url": "http://x:9999", "agent_version": "9.4"}, 400, "ironic-python-agent"},
		"malformed heartbeat":  {"POST", "/v1/heartbeat/" + id, `{"agent_token":`, 400, "malformed message"},
		"no token issued":      {"POST", "/v1/heartbeat/" + id, map[string]any{"agent_token": "x", "agent_version": "1", "boot_id": "b", "fingerprint": "f"}, 401, "Invalid or missing agent token"},
		"unknown node":         {"POST", "/v1/heartbeat/nope", map[string]any{"agent_token": "x", "agent_version": "1", "boot_id": "b", "fingerprint": "f"}, 404, "could not be found"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			r := e.do(tc.method, tc.path, latest, tc.body)
			require.Equal(t, tc.status, r.status, string(r.body))
			assert.Contains(t, r.fault(t), tc.fault)
		})
	}
	// a wrong token is refused even while the node expects the agent
	require.Equal(t, 202, e.provision("bad", "provide", nil).status)
	e.waitState("bad", "clean wait")
	a := simagent.New(e.srv.URL, mac1)
	require.NoError(t, a.Lookup(context.Background()))
	r := e.do("POST", "/v1/heartbeat/"+id, latest, map[string]any{"agent_token": "forged", "agent_version": "1", "boot_id": "b", "fingerprint": "f"})
	assert.Equal(t, 401, r.status)
	// the token is issued once: once it is used, the same boot looking up
	// again gets none
	tok := a.Token()
	_, err := a.Heartbeat(context.Background())
	require.NoError(t, err)
	require.Error(t, a.Lookup(context.Background()))
	assert.Equal(t, tok, a.Token())
	r = e.do("GET", "/v1/lookup?addresses="+mac1, latest, nil)
	assert.Equal(t, 403, r.status, "another claimant")
}

// TestAgentCleaningSurvivesControllerRestart stops the controller while the
// agent runs a step, starts a new one on the same database, and checks that
// cleaning completes without running the interrupted step twice.
func TestAgentCleaningSurvivesControllerRestart(t *testing.T) {
	db := t.TempDir() + "/anvil.db"
	e := newEnvWith(t, agentConfig(), db)
	e.agentNode("rs", nil)
	release := make(chan struct{})
	a := simagent.New(e.srv.URL, mac1)
	a.Outcomes["deploy.erase_devices_metadata"] = simagent.Outcome{Release: release}
	require.Equal(t, 202, e.provision("rs", "provide", nil).status)
	ctx := context.Background()
	require.Eventually(t, func() bool {
		if a.Token() == "" {
			_ = a.Lookup(ctx)
		} else if _, err := a.Heartbeat(ctx); errors.Is(err, simagent.ErrUnauthorized) {
			a.Boot() // looked up before the controller rebooted the node: the new boot looks up again
		}
		return len(a.Steps()) == 1
	}, 10*time.Second, 5*time.Millisecond, "the agent never got its first step")
	e.stop() // the controller dies mid-step

	e2 := newEnvWith(t, agentConfig(), db)
	a.API = e2.srv.URL
	close(release)
	n := e2.drive(a, "rs", "available", nil)
	assert.Equal(t, "power off", n["power_state"])
	assert.Equal(t, []string{"deploy.erase_devices_metadata", "deploy.erase_devices"}, a.Steps(), "no step ran twice")

	// each step's result is kept once, also across another restart
	before, _ := resultsOf(t, e2, "/v1/nodes/rs/steps/results")
	require.Len(t, before, 2)
	assert.Equal(t, "deploy.erase_devices", before[0]["step"])
	assert.Equal(t, "deploy.erase_devices_metadata", before[1]["step"])
	e2.stop()
	e3 := newEnvWith(t, agentConfig(), db)
	after, _ := resultsOf(t, e3, "/v1/nodes/rs/steps/results")
	assert.Equal(t, before, after)
}
