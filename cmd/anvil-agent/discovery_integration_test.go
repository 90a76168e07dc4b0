package main

import (
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestBinaryDiscovery runs the real controller with --boot-discovery and
// the real agent binary in discovery mode (outside the ramdisk, on the
// hardware snapshot nvme-sata): the machine is enrolled as a node in enroll
// with a port for its NIC and its inventory; the agent, without ramdisk
// powers, stays up instead of powering off. A second boot of the same
// machine is refused (it is a node now) and creates nothing.
func TestBinaryDiscovery(t *testing.T) {
	dir := t.TempDir()
	bins := t.TempDir()
	for _, pkg := range []string{"../anvil-controller", "."} {
		cmd := exec.Command("go", "build", "-o", bins+"/", pkg)
		cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "%s", out)
	}
	ctl := "http://" + startProc(t, "controller", regexp.MustCompile(`anvil-controller listening"? addr=(\S+)`),
		bins+"/anvil-controller", "--listen", "127.0.0.1:0", "--database", "sqlite://"+dir+"/anvil.db",
		"--boot-discovery", "--boot-discovery-driver", "fake-hardware")
	agentRun := func(log string) {
		startProc(t, "agent", nil, bins+"/anvil-agent", "--api", ctl, "--discovery",
			"--root", abs(t, "../../testdata/hardware/nvme-sata"),
			"--proc", abs(t, "../../testdata/hardware/procfs/installed-ext4"),
			"--cmdline", abs(t, "../../testdata/cmdline/none.txt"), "--log-file", log)
	}
	get := func(path string, out any) {
		t.Helper()
		req, err := http.NewRequest("GET", ctl+path, nil)
		require.NoError(t, err)
		req.Header.Set("X-OpenStack-Ironic-API-Version", "1.82")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, 200, resp.StatusCode, path)
		require.NoError(t, json.NewDecoder(resp.Body).Decode(out))
	}
	type nodeList struct {
		Nodes []struct {
			UUID           string         `json:"uuid"`
			ProvisionState string         `json:"provision_state"`
			Extra          map[string]any `json:"extra"`
		} `json:"nodes"`
	}

	log1 := filepath.Join(dir, "agent1.log")
	agentRun(log1)
	var nodes nodeList
	// The controller creates the node, then its ports and inventory, so
	// the node is listed before it is whole: wait for the agent to hear
	// that its report was taken.
	require.Eventually(t, func() bool { return strings.Contains(tail(log1), "discovery: enrolled") },
		60*time.Second, 100*time.Millisecond, "agent log:\n%s", tail(log1))
	get("/v1/nodes?detail=true", &nodes)
	require.Len(t, nodes.Nodes, 1)
	n := nodes.Nodes[0]
	assert.Equal(t, "enroll", n.ProvisionState)
	assert.Equal(t, true, n.Extra["auto_discovered"])
	var ports struct {
		Ports []struct {
			Address string `json:"address"`
		} `json:"ports"`
	}
	get("/v1/nodes/"+n.UUID+"/ports", &ports)
	require.Len(t, ports.Ports, 1)
	assert.Equal(t, "3c:ec:ef:12:34:56", ports.Ports[0].Address, "the snapshot's NIC")
	var inv struct {
		Inventory struct {
			Disks []struct {
				Name string `json:"name"`
			} `json:"disks"`
		} `json:"inventory"`
	}
	get("/v1/nodes/"+n.UUID+"/inventory", &inv)
	var disks []string
	for _, d := range inv.Inventory.Disks {
		disks = append(disks, d.Name)
	}
	assert.Contains(t, disks, "/dev/nvme0n1")
	require.Eventually(t, func() bool { return strings.Contains(tail(log1), "staying up") }, 20*time.Second, 50*time.Millisecond)
	assert.Contains(t, tail(log1), "discovery: enrolled")

	// The same machine boots discovery again: refused, no second node.
	log2 := filepath.Join(dir, "agent2.log")
	agentRun(log2)
	require.Eventually(t, func() bool { return strings.Contains(tail(log2), "already a node") }, 60*time.Second, 50*time.Millisecond, "agent log:\n%s", tail(log2))
	get("/v1/nodes?detail=true", &nodes)
	assert.Len(t, nodes.Nodes, 1)
}
