package api

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/simagent"
)

// Abort in wait call-back is an anvil extension (Ironic 21.4 has none):
// it stops the agent's running deploy step as abort in clean wait does.
func TestAgentDeployAbort(t *testing.T) {
	imageNode := func(e *testEnv, name string) *simagent.Agent {
		e.agentNode(name, map[string]any{"automated_clean": false, "instance_info": map[string]any{"image_source": "http://127.0.0.1:8080/img.raw",
			"image_checksum": "sha256:" + strings.Repeat("ab", 32)}})
		return simagent.New(e.srv.URL, mac1)
	}
	writeRunning := func(n map[string]any) bool {
		step, _ := n["deploy_step"].(map[string]any)
		return n["provision_state"] == "wait call-back" && step["step"] == "write_image" && stepRunning(n)
	}
	t.Run("the agent stops the image write", func(t *testing.T) {
		e := newEnvWith(t, agentConfig(), ":memory:")
		a := imageNode(e, "da0")
		a.Outcomes["deploy.write_image"] = simagent.Outcome{Release: make(chan struct{}),
			Summary: "raw image http://127.0.0.1:8080/img.raw not written to /dev/sda: stopped after 8.4 MB downloaded and 4.2 MB written",
			Result:  map[string]any{"image": map[string]any{"device": "/dev/sda", "bytes_written": 4194304}}}
		require.Equal(t, 202, e.provision("da0", "provide", nil).status)
		e.waitState("da0", "available")
		require.Equal(t, 202, e.provision("da0", "active", nil).status)
		aborted := false
		n := e.drive(a, "da0", "deploy failed", func(n map[string]any) {
			if !aborted && writeRunning(n) {
				require.Equal(t, 202, e.provision("da0", "abort", nil).status)
				got := e.do("GET", "/v1/nodes/da0", latest, nil).json(t)
				assert.Equal(t, "wait call-back", got["provision_state"], "the node waits for the agent to stop")
				aborted = true
			}
		})
		require.True(t, aborted)
		require.Len(t, a.Aborts(), 1, "the heartbeat reply carried the abort; the agent then stopped")
		assert.Contains(t, n["last_error"], "Deploy step deploy.write_image aborted by operator: the agent stopped it; partial result: raw image http://127.0.0.1:8080/img.raw not written to /dev/sda: stopped after 8.4 MB downloaded and 4.2 MB written")
		assert.Equal(t, "power on", n["power_state"], "the controller did not power the node off")
		assert.Equal(t, "active", n["target_provision_state"])
		assert.Empty(t, n["deploy_step"])
		_, err := a.Heartbeat(context.Background())
		assert.NoError(t, err, "the agent answers the next heartbeat")
		res, _ := resultsOf(t, e, "/v1/nodes/da0/steps/results")
		require.NotEmpty(t, res)
		assert.Equal(t, "deploy.write_image", res[0]["step"])
		assert.Equal(t, "aborted", res[0]["outcome"])
		assert.EqualValues(t, 4194304, res[0]["result"].(map[string]any)["image"].(map[string]any)["bytes_written"], "the partial result is kept")
		assert.Contains(t, historyText(e, "da0"), "Deploy step deploy.write_image aborted by operator")
	})
	t.Run("the agent ignores the abort: powered off", func(t *testing.T) {
		cc := agentConfig()
		cc.Agent.AbortTimeout = 200 * time.Millisecond
		e := newEnvWith(t, cc, ":memory:")
		a := imageNode(e, "da1")
		a.IgnoreAbort = true
		a.Outcomes["deploy.write_image"] = simagent.Outcome{Release: make(chan struct{})}
		require.Equal(t, 202, e.provision("da1", "provide", nil).status)
		e.waitState("da1", "available")
		require.Equal(t, 202, e.provision("da1", "active", nil).status)
		aborted := false
		n := e.drive(a, "da1", "deploy failed", func(n map[string]any) {
			if !aborted && writeRunning(n) {
				require.Equal(t, 202, e.provision("da1", "abort", nil).status)
				aborted = true
			}
		})
		assert.NotEmpty(t, a.Aborts())
		assert.Contains(t, n["last_error"], `the deploy operation was aborted during step "deploy.write_image": the agent did not stop it within 200ms, so the node is powered off`)
		assert.Equal(t, "power off", n["power_state"])
		_, err := a.Heartbeat(context.Background())
		assert.Error(t, err, "the aborted agent can no longer act")
		res, _ := resultsOf(t, e, "/v1/nodes/da1/steps/results")
		require.NotEmpty(t, res)
		assert.Equal(t, "aborted", res[0]["outcome"])
	})
	t.Run("while the ramdisk boots: at once", func(t *testing.T) {
		e := newEnvWith(t, agentConfig(), ":memory:")
		imageNode(e, "da2")
		require.Equal(t, 202, e.provision("da2", "provide", nil).status)
		e.waitState("da2", "available")
		require.Equal(t, 202, e.provision("da2", "active", nil).status)
		e.waitState("da2", "wait call-back")
		require.Equal(t, 202, e.provision("da2", "abort", nil).status)
		n := e.waitState("da2", "deploy failed")
		assert.Equal(t, `By request, the deploy operation was aborted during or after the completion of step "deploy.deploy": no agent step was running; the node is powered off`, n["last_error"])
		assert.Eventually(t, func() bool {
			return e.do("GET", "/v1/nodes/da2", latest, nil).json(t)["power_state"] == "power off"
		}, 5*time.Second, 20*time.Millisecond)
	})
	t.Run("while the ramdisk boots, disable_power_off: rebooted, not powered off", func(t *testing.T) {
		e := newEnvWith(t, agentConfig(), ":memory:")
		imageNode(e, "da3")
		r := e.do("PATCH", "/v1/nodes/da3", latest, []map[string]any{{"op": "replace", "path": "/disable_power_off", "value": true}})
		require.Equal(t, 200, r.status, "%s", r.body)
		require.Equal(t, 202, e.provision("da3", "provide", nil).status)
		e.waitState("da3", "available")
		require.Equal(t, 202, e.provision("da3", "active", nil).status)
		e.waitState("da3", "wait call-back")
		require.Equal(t, 202, e.provision("da3", "abort", nil).status)
		n := e.waitState("da3", "deploy failed")
		assert.Equal(t, `By request, the deploy operation was aborted during or after the completion of step "deploy.deploy": no agent step was running; the node is rebooted (disable_power_off)`, n["last_error"])
		assert.Eventually(t, func() bool {
			n := e.do("GET", "/v1/nodes/da3", latest, nil).json(t)
			return n["power_state"] == "power on" && n["target_power_state"] == nil
		}, 5*time.Second, 20*time.Millisecond)
	})
	t.Run("a step that is not abortable runs to its end first", func(t *testing.T) {
		e := newEnvWith(t, agentConfig(), ":memory:")
		a := imageNode(e, "da4")
		a.Deploy = append(a.Deploy, simagentStep("deploy", "install_extras"))
		release := make(chan struct{})
		a.Outcomes["deploy.install_extras"] = simagent.Outcome{Release: release}
		require.Equal(t, 202, e.provision("da4", "provide", nil).status)
		e.waitState("da4", "available")
		a.Boot()
		require.Equal(t, 202, e.provision("da4", "active", map[string]any{"deploy_steps": []map[string]any{
			{"interface": "deploy", "step": "install_extras", "args": map[string]any{}, "priority": 70}}}).status)
		aborted := false
		n := e.drive(a, "da4", "deploy failed", func(n map[string]any) {
			step, _ := n["deploy_step"].(map[string]any)
			if !aborted && step["step"] == "install_extras" && stepRunning(n) {
				require.Equal(t, 202, e.provision("da4", "abort", nil).status)
				got := e.do("GET", "/v1/nodes/da4", latest, nil).json(t)
				assert.Equal(t, "wait call-back", got["provision_state"], "it keeps running")
				assert.Equal(t, true, got["deploy_step"].(map[string]any)["abort_after"])
				aborted = true
				close(release)
			}
		})
		require.True(t, aborted)
		assert.Empty(t, a.Aborts(), "no abort was sent for a step that cannot stop")
		assert.Equal(t, `By request, the deploy operation was aborted during or after the completion of step "deploy.install_extras"`, n["last_error"])
		ran := a.Ran()
		assert.Equal(t, "deploy.install_extras", ran[len(ran)-1], "no step ran after it")
	})
	t.Run("refused outside a wait state", func(t *testing.T) {
		e := newEnvWith(t, agentConfig(), ":memory:")
		imageNode(e, "da3")
		assert.Equal(t, 400, e.provision("da3", "abort", nil).status)
	})
}
