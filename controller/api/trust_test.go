package api

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/anvil-metal/anvil/controller/simagent"
)

// The takeover of issue #15, replayed: a node in clean wait whose agent
// holds its token, on a controller with http_basic auth. An
// unauthenticated lookup with the node's MAC and another boot id gets no
// token: it is refused, written to the history with both claimants,
// counted in /metrics and shown on the node. The real agent finishes.
func TestTakeoverLookupIsRefusedAndRecorded(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	require.NoError(t, err)
	h, err := ParseHTPasswd(strings.NewReader("admin:" + string(hash) + "\n"))
	require.NoError(t, err)
	e := newEnvWith(t, agentConfig(), ":memory:", func(c *Config) { c.Auth = h })
	e.user, e.pass = "admin", "s3cret"
	e.agentNode("victim", nil)
	release := make(chan struct{})
	a := simagent.New(e.srv.URL, mac1)
	a.Outcomes["deploy.erase_devices"] = simagent.Outcome{Release: release}
	require.Equal(t, 202, e.provision("victim", "provide", nil).status)
	runAgentUntil(t, a, func() bool { return len(a.Steps()) == 2 })
	e.replayTakeover(t) // while erase_devices runs
	close(release)

	n := e.drive(a, "victim", "available", nil)
	assert.Equal(t, []string{"deploy.erase_devices_metadata", "deploy.erase_devices"}, a.Steps(), "the real agent did the cleaning")
	assert.Contains(t, historyText(e, "victim"), "second agent claimant refused: lookup from 127.0.0.1 (boot stranger-boot) while this boot's agent token is held by 127.0.0.1 (boot ")
	claims := n["driver_internal_info"].(map[string]any)["agent_claims"].([]any)
	require.Len(t, claims, 1, "shown on the node")
	assert.Equal(t, "stranger-boot", claims[0].(map[string]any)["boot_id"])
	assert.Contains(t, metricsText(e), `anvil_agent_second_claimants_total{via="lookup"} 1`)
}

// replayTakeover is the stranger's request.
func (e *testEnv) replayTakeover(t *testing.T) {
	user := e.user
	e.user = "" // unauthenticated
	defer func() { e.user = user }()
	r := e.do("GET", "/v1/lookup?addresses="+mac1+"&boot_id=stranger-boot", latest, nil)
	assert.Equal(t, http.StatusForbidden, r.status, string(r.body))
	assert.NotContains(t, string(r.body), "agent_token")
	assert.Contains(t, r.fault(t), "already issued")
}

// A token an attacker copied stops working when the operator resets it
// (or the controller reboots the node): its heartbeats are refused.
func TestStolenThenRotatedTokenIsRefused(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	id := e.agentNode("rot", nil)
	release := make(chan struct{})
	defer close(release)
	a := simagent.New(e.srv.URL, mac1)
	a.Outcomes["deploy.erase_devices_metadata"] = simagent.Outcome{Release: release}
	require.Equal(t, 202, e.provision("rot", "provide", nil).status)
	runAgentUntil(t, a, func() bool { return len(a.Steps()) == 1 })
	stolen := a.Token()

	require.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/nodes/rot/agent_token", latest, nil).status)
	assert.Contains(t, historyText(e, "rot"), "agent token reset through the API (held by 127.0.0.1")
	hb := map[string]any{"agent_token": stolen, "agent_version": "1", "boot_id": "any", "fingerprint": "f"}
	r := e.do("POST", "/v1/heartbeat/"+id, latest, hb)
	assert.Equal(t, http.StatusUnauthorized, r.status, string(r.body))
	_, err := a.Heartbeat(context.Background())
	assert.ErrorIs(t, err, simagent.ErrUnauthorized, "the holder's copy is dead too")
}

func metricsText(e *testEnv) string {
	req, err := http.NewRequest("GET", e.srv.URL+"/metrics", nil)
	require.NoError(e.t, err)
	if e.user != "" { // /metrics is behind the API's auth
		req.SetBasicAuth(e.user, e.pass)
	}
	res, err := e.srv.Client().Do(req)
	require.NoError(e.t, err)
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	require.NoError(e.t, err)
	return string(b)
}

// runAgentUntil lets the agent look up (again after a 401, as after a
// reboot) and heartbeat until done.
func runAgentUntil(t *testing.T, a *simagent.Agent, done func() bool) {
	ctx := context.Background()
	require.Eventually(t, func() bool {
		if a.Token() == "" {
			_ = a.Lookup(ctx)
		} else if _, err := a.Heartbeat(ctx); errors.Is(err, simagent.ErrUnauthorized) {
			a.Boot()
		}
		return done()
	}, 10*time.Second, 5*time.Millisecond)
}
