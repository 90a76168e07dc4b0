package api

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/anvil-metal/anvil/controller/simagent"
)

// The first-come race of issue #30 where no nonce exists (the controller
// serves no boot scripts; the ramdisk boots some other way): a stranger
// who looks up before the node's agent gets the token, but the real
// agent's lookup exposes it: the controller cannot tell which of the two
// is the machine, so the operation stops, loudly, for both. Nothing more
// reaches the stranger, and the node is not left to it.
func TestFirstComeStrangerIsExposedByTheRealAgent(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	require.NoError(t, err)
	h, err := ParseHTPasswd(strings.NewReader("admin:" + string(hash) + "\n"))
	require.NoError(t, err)
	e := newEnvWith(t, agentConfig(), ":memory:", func(c *Config) { c.Auth = h })
	e.user, e.pass = "admin", "s3cret"
	e.agentNode("victim", nil)
	stranger := simagent.New(e.srv.URL, mac1)
	stranger.HTTP = fromAddress("127.0.0.2")
	real := simagent.New(e.srv.URL, mac1)
	require.Equal(t, 202, e.provision("victim", "provide", nil).status)
	runAgentUntil(t, stranger, func() bool { return stranger.Token() != "" })

	require.Error(t, real.Lookup(context.Background()))
	n := e.waitState("victim", "clean failed")
	assert.Contains(t, n["last_error"], "SECURITY ALARM in clean wait: second agent claimant: lookup from 127.0.0.1")
	assert.Contains(t, n["last_error"], "after this boot's secret went to 127.0.0.2")
	assert.Equal(t, true, n["maintenance"], "nothing uses the node before an operator looked")
	assert.Equal(t, "power off", n["power_state"])
	_, err = stranger.Heartbeat(context.Background())
	assert.ErrorIs(t, err, simagent.ErrUnauthorized, "the first claimant's token died with the alarm")
	assert.Contains(t, historyText(e, "victim"), "SECURITY: second agent claimant: lookup from 127.0.0.1")
	claims := n["driver_internal_info"].(map[string]any)["agent_claims"].([]any)
	require.Len(t, claims, 1, "shown on the node")
	assert.Contains(t, metricsText(e), `anvil_agent_second_claimants_total{via="lookup"} 1`)
}

// fromAddress is an HTTP client whose connections come from addr (any
// 127.0.0.0/8 address works on Linux loopback): another machine, as the
// controller sees it.
func fromAddress(addr string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(addr)}, Timeout: 5 * time.Second}
	return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
}

// bootDirEnv is a controller serving boot scripts (--boot-dir), so every
// boot it starts carries a nonce.
func bootDirEnv(t *testing.T, opts ...func(*Config)) *testEnv {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "vmlinuz"), []byte("kernel"), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "initramfs.cpio.gz"), []byte("initramfs"), 0o644))
	return newEnvWith(t, agentConfig(), ":memory:", append([]func(*Config){func(c *Config) { c.BootDir = dir }}, opts...)...)
}

// Issue #30, finding 1, replayed: a stranger polls lookup for the node's
// MAC every 10 ms from before the deploy is requested. It never gets the
// token (the nonce is required from the moment the controller starts the
// boot), costs the node a bounded history, and the real agent — whose
// firmware fetched the script — deploys the node.
func TestStrangerPollingLookupNeverGetsTheToken(t *testing.T) {
	e := bootDirEnv(t)
	e.agentNode("polled", map[string]any{"automated_clean": false, "instance_info": map[string]any{"image_source": "http://127.0.0.1:8080/img.raw",
		"image_checksum": "sha256:" + strings.Repeat("ab", 32), "root_password": "tenant-secret"}})
	require.Equal(t, 202, e.provision("polled", "provide", nil).status)
	e.waitState("polled", "available")

	// The stranger's polls are counted, not timed: on a loaded machine
	// 300 ms of 10 ms polls could be five, too few to exceed the history
	// budget (a burst of 5) the test shows holds.
	stop := make(chan struct{})
	var got, polls atomic.Int64
	var wg sync.WaitGroup
	wg.Go(func() {
		stranger := simagent.New(e.srv.URL, mac1)
		stranger.HTTP = fromAddress("127.0.0.2")
		for {
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
			if stranger.Lookup(context.Background()) == nil {
				got.Add(1)
			}
			polls.Add(1)
		}
	})
	require.Eventually(t, func() bool { return polls.Load() >= 5 }, 30*time.Second, time.Millisecond)
	require.Equal(t, 202, e.provision("polled", "active", nil).status)
	e.waitState("polled", "wait call-back")
	// the stranger keeps trying while the firmware boots: more tries than
	// the history's budget
	inWait := polls.Load()
	require.Eventually(t, func() bool { return polls.Load() >= inWait+12 }, 30*time.Second, time.Millisecond)
	real := simagent.New(e.srv.URL, mac1)
	nonce, err := simagent.FirmwareBoot(context.Background(), http.DefaultClient, e.srv.URL, mac1)
	require.NoError(t, err)
	require.NotEmpty(t, nonce)
	real.Nonce = nonce
	e.drive(real, "polled", "active", nil)
	close(stop)
	wg.Wait()

	assert.Zero(t, got.Load(), "the stranger never got a token in %d lookups", polls.Load())
	hist := historyText(e, "polled")
	assert.LessOrEqual(t, strings.Count(hist, "refused: it carried no nonce"), 5, "a bounded history:\n%s", hist)
	assert.NotContains(t, hist, "SECURITY")
	assert.Regexp(t, `anvil_agent_requests_refused_total\{via="lookup"\} [1-9]`, metricsText(e))
	assert.Regexp(t, `anvil_history_events_suppressed_total\{source="agent"\} [1-9]`, metricsText(e))
	for _, c := range real.Commands() {
		b, _ := json.Marshal(c)
		assert.NotContains(t, string(b), "tenant-secret", "the agent never gets a password no step uses: %s", b)
		if c.Name == "inventory" {
			assert.NotContains(t, string(b), "img.raw", "the inventory command carries no instance_info")
		}
	}
}

// Issue #30, finding 1, second way in: a stranger fetches the node's boot
// script before the node does and gets the nonce. The real node's own
// fetch exposes it: the deploy stops (deploy failed, maintenance, powered
// off, the alarm in last_error and history and metrics), and the
// stranger's token dies. What the stranger saw: no inventory command with
// secrets, and never the tenant's password.
func TestStrangerFetchingTheScriptFirstStopsTheOperation(t *testing.T) {
	e := bootDirEnv(t)
	id := e.agentNode("raced", map[string]any{"automated_clean": false, "instance_info": map[string]any{"image_source": "http://127.0.0.1:8080/img.raw",
		"image_checksum": "sha256:" + strings.Repeat("ab", 32), "root_password": "tenant-secret", "configdrive": map[string]any{"user_data": "secret-drive"}}})
	require.Equal(t, 202, e.provision("raced", "provide", nil).status)
	e.waitState("raced", "available")
	require.Equal(t, 202, e.provision("raced", "active", nil).status)
	e.waitState("raced", "wait call-back")

	stranger := simagent.New(e.srv.URL, mac1)
	stranger.HTTP = fromAddress("127.0.0.2")
	nonce, err := simagent.FirmwareBoot(context.Background(), stranger.HTTP, e.srv.URL, mac1)
	require.NoError(t, err)
	require.NotEmpty(t, nonce, "first come: the script went to the stranger")
	stranger.Nonce = nonce
	runAgentUntil(t, stranger, func() bool { return len(stranger.Commands()) > 0 })
	for _, c := range stranger.Commands() {
		b, _ := json.Marshal(c)
		for _, secret := range []string{"tenant-secret", "secret-drive", "root_password"} {
			assert.NotContains(t, string(b), secret, "command %s", c.Name)
		}
	}

	_, err = simagent.FirmwareBoot(context.Background(), http.DefaultClient, e.srv.URL, mac1)
	require.Error(t, err, "the real node's firmware is refused")
	assert.Contains(t, err.Error(), "403")
	n := e.waitState("raced", "deploy failed")
	// The stranger's heartbeats may already have moved the deploy on from
	// wait call-back (its first command is issued in deploying): the
	// alarm names the state it stopped.
	assert.Regexp(t, `^SECURITY ALARM in (wait call-back|deploying): second agent claimant: boot ipxe from 127\.0\.0\.1 after this boot's secret went to 127\.0\.0\.2 \(boot `, n["last_error"])
	assert.Equal(t, true, n["maintenance"])
	assert.Equal(t, "power off", n["power_state"])
	_, err = stranger.Heartbeat(context.Background())
	assert.ErrorIs(t, err, simagent.ErrUnauthorized)
	assert.Contains(t, metricsText(e), `anvil_agent_second_claimants_total{via="boot_script"} 1`)
	assert.Contains(t, historyText(e, id), "SECURITY: second agent claimant: boot ipxe from 127.0.0.1")
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
