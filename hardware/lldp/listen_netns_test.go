package lldp

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/anvil-metal/anvil/protocol/lldp"
)

// netnsChild marks the re-executed test process that runs inside fresh
// network and mount namespaces.
const netnsChild = "ANVIL_LLDP_TEST_NETNS_CHILD"

// TestCollectFromLLDPD has Debian's lldpd play the switch on one end of a
// veth pair and Collect listen on the other, in a network namespace the
// test creates (a re-executed child), so no host interface is touched.
func TestCollectFromLLDPD(t *testing.T) {
	if os.Getenv(netnsChild) == "1" {
		collectInNamespace(t)
		return
	}
	if _, err := exec.LookPath("lldpd"); err != nil {
		if _, err := os.Stat("/usr/sbin/lldpd"); err != nil {
			t.Skip("lldpd is not installed")
		}
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create namespaces")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestCollectFromLLDPD$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), netnsChild+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if errors.Is(err, syscall.EPERM) {
		t.Skipf("cannot create namespaces here: %v", err)
	}
	require.NoError(t, err, string(out))
	t.Logf("namespace child:\n%s", out)
	assert.Contains(t, string(out), "--- PASS: TestCollectFromLLDPD")
}

func collectInNamespace(t *testing.T) {
	sw := &netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "swport7"}, PeerName: "eth0"}
	require.NoError(t, netlink.LinkAdd(sw))
	for _, n := range []string{"swport7", "eth0", "lo"} {
		l, err := netlink.LinkByName(n)
		require.NoError(t, err)
		require.NoError(t, netlink.LinkSetUp(l))
	}
	// A second NIC with carrier and no switch behind it: Collect must
	// not wait for it past the window, nor report it.
	require.NoError(t, netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "eth1"}, PeerName: "eth1peer"}))

	// lldpd's unprivileged half (user _lldpd) must reach its control
	// socket: a directory others may traverse, unlike t.TempDir's.
	dir, err := os.MkdirTemp("", "anvil-lldpd-")
	require.NoError(t, err)
	require.NoError(t, os.Chmod(dir, 0o755))
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	lldpd := "lldpd"
	if _, err := exec.LookPath(lldpd); err != nil {
		lldpd = "/usr/sbin/lldpd"
	}
	cmd := exec.Command(lldpd, "-d", "-u", filepath.Join(dir, "ctl"), "-I", "swport7", "-S", "anvil test switch")
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	// lldpd sends its first frame as it starts, then every 30 s: the
	// listener is up first.
	type result struct {
		got  map[string][]lldp.TLV
		took time.Duration
	}
	res := make(chan result, 1)
	start := time.Now()
	go func() {
		got := Collect(context.Background(), []string{"eth0", "eth1", "missing0"}, Options{Window: 8 * time.Second})
		res <- result{got, time.Since(start)}
	}()
	time.Sleep(100 * time.Millisecond)
	// The agent's network setup bounces the link while the listener is
	// up: the socket hears ENETDOWN, then frames again.
	eth0, err := netlink.LinkByName("eth0")
	require.NoError(t, err)
	require.NoError(t, netlink.LinkSetDown(eth0))
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, netlink.LinkSetUp(eth0))
	time.Sleep(100 * time.Millisecond)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	r := <-res
	got, took := r.got, r.took
	require.Contains(t, got, "eth0", "lldpd's frame reached the listener")
	assert.NotContains(t, got, "eth1")
	sw7, err := netlink.LinkByName("swport7")
	require.NoError(t, err)
	llc := lldp.LocalLinkConnection(got["eth0"])
	assert.Equal(t, sw7.Attrs().HardwareAddr.String(), llc["switch_id"], "lldpd's chassis ID is its interface's MAC")
	assert.Equal(t, sw7.Attrs().HardwareAddr.String(), llc["port_id"], "lldpd's default port ID subtype is the MAC")
	assert.Equal(t, "anvil test switch", lldp.Process(got["eth0"])["switch_system_description"])
	t.Logf("first frame after %s", took)
	assert.Less(t, took, 8*time.Second, "returns once every NIC with carrier has a frame (eth1 has none: its peer is down)")
}
