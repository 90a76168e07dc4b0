package agent

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// TestNetworkRealServerInNamespace runs the agent's network bring-up
// against veth pairs in fresh network and mount namespaces (a child
// process; the host's interfaces and resolv.conf are never touched):
//   - four ports, only the second cabled (the others' peers are down, so
//     they have no carrier): DHCP must come up without waiting for the
//     uncabled ones, and the lookup gets all four MACs;
//   - a static address (anvil.ip=) with a default route;
//   - DHCP on a VLAN (anvil.vlan=), served only on the tagged network.
func TestNetworkRealServerInNamespace(t *testing.T) {
	if os.Getenv(netnsChild) == "1" {
		realServerNetwork(t)
		return
	}
	runInNamespace(t, "TestNetworkRealServerInNamespace")
}

func vethPair(t *testing.T, name, peer string, peerUp bool) (netlink.Link, netlink.Link) {
	t.Helper()
	require.NoError(t, netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: name}, PeerName: peer}))
	l, err := netlink.LinkByName(name)
	require.NoError(t, err)
	p, err := netlink.LinkByName(peer)
	require.NoError(t, err)
	if peerUp {
		require.NoError(t, netlink.LinkSetUp(p))
	}
	return l, p
}

func addAddr(t *testing.T, l netlink.Link, cidr string) {
	t.Helper()
	a, err := netlink.ParseAddr(cidr)
	require.NoError(t, err)
	require.NoError(t, netlink.AddrAdd(l, a))
}

func ipv4Of(t *testing.T, name string) []string {
	t.Helper()
	l, err := netlink.LinkByName(name)
	require.NoError(t, err)
	addrs, err := netlink.AddrList(l, netlink.FAMILY_V4)
	require.NoError(t, err)
	var out []string
	for _, a := range addrs {
		out = append(out, a.IPNet.String())
	}
	return out
}

func realServerNetwork(t *testing.T) {
	require.NoError(t, unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""))
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	require.NoError(t, os.WriteFile(resolv, nil, 0o644))
	require.NoError(t, unix.Mount(resolv, "/etc/resolv.conf", "", unix.MS_BIND, ""))
	// Never unmounted: the lease's renewal goroutine may still write
	// resolv.conf after this function returns (its context ends, but it
	// does not wait), and without the bind mount it would write the
	// host's file, which this namespace shares. The mount goes with the
	// namespace when this child process exits.
	require.NoError(t, unix.Mount("sysfs", "/sys", "sysfs", 0, ""))
	defer unix.Unmount("/sys", unix.MNT_DETACH)

	// Four ports; only port 2's peer is up, with a DHCP server on it.
	var macs []string
	for i, name := range []string{"port1", "port2", "port3", "port4"} {
		l, _ := vethPair(t, name, "peer"+name[4:], i == 1)
		macs = append(macs, l.Attrs().HardwareAddr.String())
	}
	peer2, err := netlink.LinkByName("peer2")
	require.NoError(t, err)
	addAddr(t, peer2, "192.168.77.1/24")
	serveDHCP(t, "peer2", net.IPv4(192, 168, 77, 1).To4(), net.IPv4(192, 168, 77, 10).To4(), 3600)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const linkUp = 6 * time.Second
	client := &DHCPv4Client{LinkUpTimeout: linkUp, Timeout: 2 * time.Second, Retries: 3}
	ports := []string{"port1", "port2", "port3", "port4"}
	start := time.Now()
	got, err := (&Interfaces{Links: SysfsLinks{Root: "/"}, DHCP: client, Hints: ports}).Up(ctx)
	took := time.Since(start)
	require.NoError(t, err)
	assert.Equal(t, macs, got, "the lookup gets every port's MAC, cabled or not")
	assert.Equal(t, []string{"192.168.77.10/24"}, ipv4Of(t, "port2"))
	assert.Less(t, took, linkUp/2, "the uncabled ports' link timeout (%v) is not waited for", linkUp)
	t.Logf("4 ports, port 2 cabled: DHCP lease after %v", took.Round(time.Millisecond))

	// Static address with a gateway, no DHCP server anywhere.
	stat, statPeer := vethPair(t, "stat0", "statpeer", true)
	addAddr(t, statPeer, "10.9.0.1/24")
	static := ParseCmdline("anvil.ip=10.9.0.5/24,10.9.0.1,stat0").Static
	require.NotNil(t, static)
	setup := NetlinkSetup{LinkUpTimeout: linkUp, ResolvConf: resolv}
	_, err = (&Interfaces{Links: SysfsLinks{Root: "/"}, Setup: setup, Static: static, Hints: []string{"stat0"}}).Up(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{"10.9.0.5/24"}, ipv4Of(t, "stat0"))
	routes, err := netlink.RouteList(stat, netlink.FAMILY_V4)
	require.NoError(t, err)
	var gw []string
	for _, r := range routes {
		if r.Gw != nil {
			gw = append(gw, r.Gw.String())
		}
	}
	assert.Equal(t, []string{"10.9.0.1"}, gw, "default route through the static gateway")

	// DHCP on VLAN 42: the server answers only on the tagged network.
	// A subtest: kernels without 802.1Q (some CI containers) skip it.
	t.Run("vlan", func(t *testing.T) {
		_, trunkPeer := vethPair(t, "trunk0", "trunkpeer", true)
		if err := netlink.LinkAdd(&netlink.Vlan{LinkAttrs: netlink.LinkAttrs{Name: "trunkpeer.42", ParentIndex: trunkPeer.Attrs().Index}, VlanId: 42}); err != nil {
			t.Skipf("no 802.1Q in this kernel: %v", err)
		}
		tagged, err := netlink.LinkByName("trunkpeer.42")
		require.NoError(t, err)
		require.NoError(t, netlink.LinkSetUp(tagged))
		addAddr(t, tagged, "192.168.42.1/24")
		serveDHCP(t, "trunkpeer.42", net.IPv4(192, 168, 42, 1).To4(), net.IPv4(192, 168, 42, 10).To4(), 3600)
		vlan := ParseCmdline("anvil.vlan=42").VLAN
		require.NotNil(t, vlan)
		_, err = (&Interfaces{Links: SysfsLinks{Root: "/"}, DHCP: client, Setup: setup, VLAN: vlan, Hints: []string{"trunk0"}}).Up(ctx)
		require.NoError(t, err)
		assert.Equal(t, []string{"192.168.42.10/24"}, ipv4Of(t, "trunk0.42"))
		assert.Empty(t, ipv4Of(t, "trunk0"), "the untagged interface stays unaddressed")
	})
}
