package api

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/simagent"
)

// timelineStages reads the node's boot timeline through the API, after
// what was recorded is written: each boot's stages as "stage detail
// (outcome)" lines, newest boot first.
func (e *testEnv) timelineStages(node string) [][]map[string]any {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(e.t, e.tl.Flush(ctx))
	r := e.do("GET", "/v1/nodes/"+node+"/boot-timeline", latest, nil)
	require.Equal(e.t, 200, r.status, string(r.body))
	var out [][]map[string]any
	for _, b := range r.json(e.t)["boots"].([]any) {
		var stages []map[string]any
		for _, s := range b.(map[string]any)["stages"].([]any) {
			stages = append(stages, s.(map[string]any))
		}
		out = append(out, stages)
	}
	return out
}

func stageList(stages []map[string]any) []string {
	out := make([]string, len(stages))
	for i, s := range stages {
		out[i] = s["stage"].(string)
	}
	return out
}

// An agent's boot: the controller's reboot, the BMC's boot device and
// power, the agent's lookup and its first heartbeat only, the step handed
// over; the boot carries the agent's boot id.
func TestBootTimelineOfAnAgentBoot(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	id := e.agentNode("tl", nil)
	a := simagent.New(e.srv.URL, mac1)
	a.Outcomes["deploy.erase_devices_metadata"] = simagent.Outcome{Release: make(chan struct{})} // stays running
	require.Equal(t, 202, e.provision("tl", "provide", nil).status)
	e.waitState("tl", "clean wait")
	ctx := context.Background()
	require.Eventually(t, func() bool { return a.Lookup(ctx) == nil }, 5*time.Second, 10*time.Millisecond)
	for range 5 {
		_, err := a.Heartbeat(ctx)
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		boots := e.timelineStages("tl")
		return len(boots) == 1 && len(stageList(boots[0])) >= 6
	}, 5*time.Second, 20*time.Millisecond, "the step was never handed over")
	boots := e.timelineStages(id)
	require.Len(t, boots, 1)
	assert.Equal(t, []string{"boot", "bmc.boot_device", "bmc.power", "lookup", "heartbeat", "step.start"}, stageList(boots[0])[:6])
	assert.Contains(t, boots[0][0]["detail"], "into the agent ramdisk for cleaning")
	assert.Equal(t, "ok", boots[0][2]["outcome"])
	assert.Contains(t, boots[0][5]["detail"], "clean deploy.erase_devices_metadata")
	_, err := time.Parse(time.RFC3339Nano, boots[0][0]["at"].(string))
	assert.NoError(t, err)
	r := e.do("GET", "/v1/nodes/tl/boot-timeline", latest, nil).json(t)
	assert.NotEmpty(t, r["boots"].([]any)[0].(map[string]any)["boot_id"], "the agent's lookup names the boot")
}

// The downloads a node makes over HTTP go into its timeline once its boot
// script told the controller its address; a missing file says so.
func TestBootTimelineDownloads(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "vmlinuz"), []byte("kernel-bytes"), 0o644))
	e := newEnvWith(t, agentConfig(), ":memory:", func(c *Config) { c.BootDir = dir })
	id := e.agentNode("dl", nil)
	assert.Equal(t, 200, e.do("GET", "/v1/boot/files/vmlinuz", "", nil).status)
	require.Equal(t, 202, e.provision("dl", "provide", nil).status)
	e.waitState("dl", "clean wait")
	before := e.timelineStages("dl")
	require.Len(t, before, 1)
	assert.NotContains(t, stageList(before[0]), "http", "a download from an address no node booted from is nobody's")

	script := e.do("GET", "/v1/boot/"+id+"/ipxe", "", nil)
	require.Equal(t, 200, script.status)
	require.Regexp(t, regexp.MustCompile(`anvil\.token=`), string(script.body))
	assert.Equal(t, 200, e.do("GET", "/v1/boot/files/vmlinuz", "", nil).status)
	assert.Equal(t, 404, e.do("GET", "/v1/boot/files/initramfs", "", nil).status)
	stages := e.timelineStages("dl")[0]
	names := stageList(stages)
	require.Equal(t, []string{"boot", "bmc.boot_device", "bmc.power", "http.script", "http", "http"}, names)
	assert.Contains(t, stages[3]["detail"], "iPXE script to 127.0.0.1")
	assert.Regexp(t, `^vmlinuz to 127\.0\.0\.1 \(12 bytes, `, stages[4]["detail"])
	assert.Equal(t, "ok", stages[4]["outcome"])
	assert.Equal(t, "initramfs to 127.0.0.1", stages[5]["detail"])
	assert.Equal(t, "not found", stages[5]["outcome"])
}

// A node whose agent never calls back says in last_error where its boot
// stopped, after Ironic's words; the timeline ends with the timeout.
func TestBootTimeoutSaysWhereTheBootStopped(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "vmlinuz"), []byte("kernel-bytes"), 0o644))
	cc := agentConfig()
	cc.Agent.BootTimeout = 1500 * time.Millisecond
	e := newEnvWith(t, cc, ":memory:", func(c *Config) { c.BootDir = dir })
	id := e.agentNode("stuck", nil)
	require.Equal(t, 202, e.provision("stuck", "provide", nil).status)
	// the boot begins when the worker reboots the node, after the 202:
	// fetches before it belong to no boot of this operation
	e.waitState("stuck", "clean wait")
	require.Equal(t, 200, e.do("GET", "/v1/boot/"+id+"/ipxe", "", nil).status)
	require.Equal(t, 200, e.do("GET", "/v1/boot/files/vmlinuz", "", nil).status)
	require.NoError(t, e.tl.Flush(context.Background()))
	n := e.waitState("stuck", "clean failed")
	msg := n["last_error"].(string)
	assert.Regexp(t, `^Timeout in clean wait: the agent ramdisk never called back within 1.5s`, msg)
	assert.Regexp(t, `Where the boot stopped: the kernel was downloaded at \d\d:\d\d:\d\d UTC \(vmlinuz to 127\.0\.0\.1 \(12 bytes, [^)]*\)\); the ramdisk was never fetched\.$`, msg)
	stages := e.timelineStages("stuck")[0]
	assert.Equal(t, "timeout", stages[len(stages)-1]["stage"])
}

func TestBootTimelineErrors(t *testing.T) {
	e := newEnv(t)
	r := e.do("GET", "/v1/nodes/nope/boot-timeline", latest, nil)
	assert.Equal(t, 404, r.status)
	assert.Contains(t, r.fault(t), "Node nope could not be found")
	e.createNode("n", nil)
	r = e.do("GET", "/v1/nodes/n/boot-timeline?limit=x", latest, nil)
	assert.Equal(t, 400, r.status)
	assert.Contains(t, r.fault(t), "Limit must be a non-negative integer")
	r = e.do("GET", "/v1/nodes/n/boot-timeline?bogus=1", latest, nil)
	assert.Equal(t, 400, r.status)
	r = e.do("GET", "/v1/nodes/n/boot-timeline", latest, nil)
	require.Equal(t, 200, r.status)
	assert.Equal(t, []any{}, r.json(t)["boots"])
}
