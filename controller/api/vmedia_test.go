package api

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/simagent"
	"github.com/anvil-metal/anvil/controller/vmedia"
	"github.com/anvil-metal/anvil/protocol"
)

// recordingMedia remembers the URLs the conductor handed the BMC.
type recordingMedia struct {
	*vmedia.Builder
	mu   sync.Mutex
	urls []string
}

func (r *recordingMedia) Prepare(node, public string) (string, error) {
	u, err := r.Builder.Prepare(node, public)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.urls = append(r.urls, u)
	return u, err
}

func (r *recordingMedia) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.urls) == 0 {
		return ""
	}
	return r.urls[len(r.urls)-1]
}

// slotConfig reads the BootConfig out of a per-node ISO's slot.
func slotConfig(t *testing.T, iso []byte, offset int) protocol.BootConfig {
	t.Helper()
	slot := iso[offset : offset+protocol.BootSlotSize]
	i := bytes.Index(slot, []byte(`{"`))
	require.GreaterOrEqual(t, i, 0, "no JSON in the slot")
	var bc protocol.BootConfig
	require.NoError(t, json.NewDecoder(bytes.NewReader(slot[i:])).Decode(&bc))
	return bc
}

// TestVirtualMediaBoot: a redfish-virtual-media node's cleaning through
// the per-node ISO endpoint: only the boot's key opens it, its slot
// carries the controller URL, the nonce and network_data, BMC-style range
// reads get the same bytes, the nonce admits the lookup, and the media is
// ejected and the ISO removed when the agent called back and when the
// node left the ramdisk.
func TestVirtualMediaBoot(t *testing.T) {
	dir := t.TempDir()
	const offset = 256 << 10
	iso := make([]byte, 1<<20)
	_, _ = rand.Read(iso)
	placeholder, err := protocol.BootConfig{Placeholder: true}.Slot()
	require.NoError(t, err)
	copy(iso[offset:], placeholder)
	require.NoError(t, os.WriteFile(filepath.Join(dir, vmedia.ISOName), iso, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "manifest.json"),
		[]byte(fmt.Sprintf(`{"iso":{"node_slot":{"offset":%d,"bytes":%d}}}`, offset, len(placeholder))), 0o644))
	cache := t.TempDir()
	b, err := vmedia.New(vmedia.Config{BootDir: dir, CacheDir: cache, PublicURL: func() string { return "http://10.0.2.100:6385" }})
	require.NoError(t, err)
	rec := &recordingMedia{Builder: b}
	cc := agentConfig()
	cc.Media = rec
	e := newEnvWith(t, cc, ":memory:", func(c *Config) { c.BootDir = dir; c.Media = b; c.PublicURL = "http://10.0.2.100:6385" })
	nd := map[string]any{"links": []any{map[string]any{"id": "p0", "type": "phy", "ethernet_mac_address": mac1}},
		"networks": []any{map[string]any{"id": "n0", "type": "ipv4", "link": "p0", "ip_address": "10.0.2.15", "netmask": "255.255.255.0"}}}
	id := e.agentNode("vm", map[string]any{"boot_interface": "redfish-virtual-media", "network_data": nd})

	require.Equal(t, 202, e.provision("vm", "provide", nil).status)
	e.waitState("vm", "clean wait")
	url := rec.last()
	require.NotEmpty(t, url, "the conductor prepared an ISO and gave its URL to the BMC")
	path := strings.TrimPrefix(url, "http://10.0.2.100:6385")
	require.Regexp(t, "^/v1/boot/"+id+"/vmedia/[0-9a-f]{48}\\.iso$", path)

	for _, bad := range []string{"/v1/boot/" + id + "/vmedia/" + strings.Repeat("0", 48) + ".iso", "/v1/boot/vm/vmedia/00.iso",
		"/v1/boot/" + id + "/vmedia/" + strings.Repeat("z", 48) + ".iso"} {
		r := e.do("GET", bad, "", nil)
		assert.Equal(t, 404, r.status, bad)
		assert.NotContains(t, string(r.body), id, "a wrong key learns nothing")
	}
	r := e.do("GET", path, "", nil)
	require.Equal(t, 200, r.status, string(r.body))
	require.Len(t, r.body, len(iso))
	assert.Equal(t, iso[:offset], r.body[:offset], "the common ISO around the slot")
	assert.Equal(t, iso[offset+protocol.BootSlotSize:], r.body[offset+protocol.BootSlotSize:])
	bc := slotConfig(t, r.body, offset)
	assert.Contains(t, bc.Cmdline, "anvil.api=http://10.0.2.100:6385 anvil.node="+id+" anvil.token=")
	var gotND map[string]any
	require.NoError(t, json.Unmarshal(bc.NetworkData, &gotND))
	assert.Equal(t, nd["networks"], gotND["networks"], "network_data goes in for networks without DHCP")
	nonce := regexp.MustCompile(`anvil\.token=(\S+)`).FindStringSubmatch(bc.Cmdline)[1]

	// A BMC reads ranges, again and again: the same bytes, nonce included.
	req, err := http.NewRequest("GET", e.srv.URL+path, nil)
	require.NoError(t, err)
	req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", offset, offset+protocol.BootSlotSize-1))
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	part, _ := io.ReadAll(res.Body)
	res.Body.Close()
	assert.Equal(t, 206, res.StatusCode)
	assert.Equal(t, r.body[offset:offset+protocol.BootSlotSize], part)
	r = e.do("GET", "/v1/boot/"+id+"/ipxe", "", nil)
	assert.Equal(t, 403, r.status, "the node boots from its ISO: the iPXE script hands out nothing")
	assert.NotContains(t, string(r.body), nonce)

	a := simagent.New(e.srv.URL, mac1)
	require.Error(t, a.Lookup(context.Background()), "the nonce is required")
	a.Nonce = nonce
	e.drive(a, "vm", "available", nil)

	hist := historyText(e, "vm")
	assert.Contains(t, hist, "virtual media ejected (the agent called back)")
	assert.Contains(t, hist, "virtual media ejected (cleaning done, leaving the ramdisk)")
	assert.NoFileExists(t, filepath.Join(cache, id+".iso"), "the per-node ISO is removed when the node leaves")
	assert.Equal(t, 404, e.do("GET", path, "", nil).status, "and its URL is dead")
}

// TestVirtualMediaBootTimeoutEjects: an agent that never calls back ends
// the cleaning; the power-off that tears it down ejects the media.
func TestVirtualMediaBootTimeoutEjects(t *testing.T) {
	e, b := newShortBootMediaEnv(t)
	id := e.agentNode("vm", map[string]any{"boot_interface": "redfish-virtual-media"})
	require.Equal(t, 202, e.provision("vm", "provide", nil).status)
	e.waitState("vm", "clean failed")
	require.Eventually(t, func() bool { return !b.Active(id) }, 10*time.Second, 20*time.Millisecond)
	// the ISO is removed before the eject is recorded (ejectMedia)
	require.Eventually(t, func() bool {
		return strings.Contains(historyText(e, "vm"), "virtual media ejected (the agent operation ended)")
	}, 10*time.Second, 20*time.Millisecond, historyText(e, "vm"))
}

// TestVirtualMediaBootWithoutISO: a controller without the agent ISO fails
// a virtual-media node's cleaning with a message saying what is missing.
func TestVirtualMediaBootWithoutISO(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	e.agentNode("vm", map[string]any{"boot_interface": "redfish-virtual-media"})
	require.Equal(t, 202, e.provision("vm", "provide", nil).status)
	n := e.waitState("vm", "clean failed")
	assert.Contains(t, n["last_error"], "no agent ISO")
	assert.Equal(t, 404, e.do("GET", "/v1/boot/vm/vmedia/"+strings.Repeat("a", 48)+".iso", "", nil).status)
}

// TestVirtualMediaServiceTimeoutEjects: an active node serviced with an
// in-band step boots the agent from its ISO; an agent that never calls
// back fails the service, which keeps the node's power (it holds an
// instance) but ejects the media and removes the per-node ISO.
func TestVirtualMediaServiceTimeoutEjects(t *testing.T) {
	e, b := newShortBootMediaEnv(t)
	id := e.agentNode("svm", map[string]any{"boot_interface": "redfish-virtual-media"})
	e.makeActive(id)
	r := e.do("PUT", "/v1/nodes/svm/states/provision", "1.87", map[string]any{"target": "service",
		"service_steps": []map[string]any{{"interface": "deploy", "step": "burnin_cpu", "args": map[string]any{}}}})
	require.Equal(t, 202, r.status, string(r.body))
	n := e.waitState("svm", "service failed")
	assert.Contains(t, n["last_error"], "Timeout in service wait")
	require.Eventually(t, func() bool { return !b.Active(id) }, 10*time.Second, 20*time.Millisecond, "the agent's ISO is out")
	// the ISO is removed before the eject is recorded (ejectMedia)
	require.Eventually(t, func() bool {
		return strings.Contains(historyText(e, "svm"), "virtual media ejected (servicing failed, leaving the ramdisk's media)")
	}, 10*time.Second, 20*time.Millisecond, historyText(e, "svm"))
	dii := e.do("GET", "/v1/nodes/svm", latest, nil).json(t)["driver_internal_info"].(map[string]any)
	assert.NotContains(t, dii, "agent_secret_token", "the agent's token died with the service")
}

// newShortBootMediaEnv serves a minimal agent ISO (a placeholder node slot
// after 4 KiB) for virtual-media boots whose agent must call back within
// 300 ms, and returns the environment and the ISO builder.
func newShortBootMediaEnv(t *testing.T) (*testEnv, *vmedia.Builder) {
	t.Helper()
	dir := t.TempDir()
	placeholder, err := protocol.BootConfig{Placeholder: true}.Slot()
	require.NoError(t, err)
	iso := append(make([]byte, 4096), placeholder...)
	require.NoError(t, os.WriteFile(filepath.Join(dir, vmedia.ISOName), iso, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "manifest.json"),
		[]byte(fmt.Sprintf(`{"iso":{"node_slot":{"offset":4096,"bytes":%d}}}`, len(placeholder))), 0o644))
	b, err := vmedia.New(vmedia.Config{BootDir: dir, CacheDir: t.TempDir(), PublicURL: func() string { return "http://192.0.2.1:6385" }})
	require.NoError(t, err)
	cc := agentConfig()
	cc.Media, cc.Agent.BootTimeout = b, 300*time.Millisecond
	e := newEnvWith(t, cc, ":memory:", func(c *Config) { c.BootDir = dir; c.Media = b })
	return e, b
}
