package agent

import (
	"context"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// netnsChild marks the re-executed test process that runs inside fresh
// network and mount namespaces.
const netnsChild = "ANVIL_AGENT_TEST_NETNS_CHILD"

// TestDHCPv4ClientInNetworkNamespace runs the real DHCP path (u-root's
// dhclient: link up, DHCPv4, address, route and resolv.conf) against a
// DHCP server on the other end of a veth pair. Everything happens in a
// child process with its own network and mount namespaces, so the host's
// interfaces and /etc/resolv.conf are never touched; it needs root.
func TestDHCPv4ClientInNetworkNamespace(t *testing.T) {
	if os.Getenv(netnsChild) == "1" {
		dhcpInNamespace(t)
		return
	}
	before, err := os.ReadFile("/etc/resolv.conf")
	if err != nil {
		t.Skipf("no /etc/resolv.conf to shadow: %v", err)
	}
	runInNamespace(t, "TestDHCPv4ClientInNetworkNamespace")
	after, err := os.ReadFile("/etc/resolv.conf")
	require.NoError(t, err)
	assert.Equal(t, string(before), string(after), "the host's resolv.conf is untouched")
}

// runInNamespace re-executes the test binary for test name alone in fresh
// network and mount namespaces (netnsChild set) and requires that it passed,
// so the host's interfaces and files are never touched. It needs root.
func runInNamespace(t *testing.T, name string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create namespaces")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), netnsChild+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET | syscall.CLONE_NEWNS}
	out, err := cmd.CombinedOutput()
	if errors.Is(err, syscall.EPERM) {
		t.Skipf("cannot create namespaces here: %v", err)
	}
	require.NoError(t, err, string(out))
	t.Logf("namespace child:\n%s", out)
	assert.Contains(t, string(out), "--- PASS: "+name)
}

// serveDHCP answers DHCPv4 on iface (inside the test's namespace) with
// one fixed lease, the server as router and 192.168.77.53 as DNS, and
// counts the requests it acknowledged.
func serveDHCP(t *testing.T, iface string, serverIP, leased net.IP, leaseSeconds uint32) *atomic.Int32 {
	t.Helper()
	var requests atomic.Int32
	handler := func(conn net.PacketConn, _ net.Addr, m *dhcpv4.DHCPv4) {
		var typ dhcpv4.MessageType
		switch m.MessageType() {
		case dhcpv4.MessageTypeDiscover:
			typ = dhcpv4.MessageTypeOffer
		case dhcpv4.MessageTypeRequest:
			typ = dhcpv4.MessageTypeAck
			requests.Add(1)
		default:
			return
		}
		reply, err := dhcpv4.NewReplyFromRequest(m,
			dhcpv4.WithMessageType(typ),
			dhcpv4.WithYourIP(leased),
			dhcpv4.WithServerIP(serverIP),
			dhcpv4.WithNetmask(net.CIDRMask(24, 32)),
			dhcpv4.WithRouter(serverIP),
			dhcpv4.WithDNS(net.IPv4(192, 168, 77, 53)),
			dhcpv4.WithLeaseTime(leaseSeconds),
			dhcpv4.WithOption(dhcpv4.OptServerIdentifier(serverIP)),
		)
		if err != nil {
			t.Errorf("build reply: %v", err)
			return
		}
		if _, err := conn.WriteTo(reply.ToBytes(), &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ClientPort}); err != nil {
			t.Errorf("send reply: %v", err)
		}
	}
	server, err := server4.NewServer(iface, &net.UDPAddr{IP: net.IPv4zero, Port: dhcpv4.ServerPort}, handler)
	require.NoError(t, err)
	go func() { _ = server.Serve() }()
	t.Cleanup(func() { server.Close() })
	return &requests
}

func dhcpInNamespace(t *testing.T) {
	// Private mounts first, so the bind mount below stays in this
	// namespace; only then may anything write /etc/resolv.conf.
	require.NoError(t, unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""))
	resolv := filepath.Join(t.TempDir(), "resolv.conf")
	require.NoError(t, os.WriteFile(resolv, nil, 0o644))
	require.NoError(t, unix.Mount(resolv, "/etc/resolv.conf", "", unix.MS_BIND, ""))
	// Never unmounted: the lease's renewal goroutine may still write
	// resolv.conf after this function returns (its context ends, but it
	// does not wait), and without the bind mount it would write the
	// host's file, which this namespace shares. The mount goes with the
	// namespace when this child process exits.

	require.NoError(t, netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "srv0"}, PeerName: "cli0"}))
	srv, err := netlink.LinkByName("srv0")
	require.NoError(t, err)
	serverIP := net.IPv4(192, 168, 77, 1).To4()
	require.NoError(t, netlink.AddrAdd(srv, &netlink.Addr{IPNet: &net.IPNet{IP: serverIP, Mask: net.CIDRMask(24, 32)}}))
	require.NoError(t, netlink.LinkSetUp(srv))

	leased := net.IPv4(192, 168, 77, 10).To4()
	requests := serveDHCP(t, "srv0", serverIP, leased, 4) // short lease: the client must renew within the test

	// A sysfs of this network namespace, so SysfsLinks sees srv0 and cli0.
	require.NoError(t, unix.Mount("sysfs", "/sys", "sysfs", 0, ""))
	defer unix.Unmount("/sys", unix.MNT_DETACH)

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := &DHCPv4Client{LinkUpTimeout: 5 * time.Second, Timeout: 2 * time.Second, Retries: 3, MinRenew: time.Second}
	_, err = client.Configure(ctx, []string{"nolink0"})
	require.Error(t, err, "an interface that does not exist yields no lease")

	cli, err := netlink.LinkByName("cli0")
	require.NoError(t, err)
	// The agent's network bring-up as in the ramdisk: list, DHCP on the
	// hinted interface without an address, MACs for the lookup.
	netw := &Interfaces{Links: SysfsLinks{Root: "/"}, DHCP: client, Hints: []string{"cli0"}}
	macs, err := netw.Up(ctx)
	require.NoError(t, err)
	assert.Equal(t, []string{cli.Attrs().HardwareAddr.String()}, macs)

	addrs, err := netlink.AddrList(cli, netlink.FAMILY_V4)
	require.NoError(t, err)
	require.Len(t, addrs, 1)
	assert.Equal(t, "192.168.77.10/24", addrs[0].IPNet.String())
	routes, err := netlink.RouteList(cli, netlink.FAMILY_V4)
	require.NoError(t, err)
	var gw []string
	for _, r := range routes {
		if r.Gw != nil {
			gw = append(gw, r.Gw.String())
		}
	}
	assert.Equal(t, []string{"192.168.77.1"}, gw, "default route through the DHCP router")
	rc, err := os.ReadFile(resolv)
	require.NoError(t, err)
	assert.Contains(t, string(rc), "nameserver 192.168.77.53")

	// A second bring-up sees the address and does not ask DHCP again.
	again := &fakeDHCP{}
	macs, err = (&Interfaces{Links: SysfsLinks{Root: "/"}, DHCP: again, Hints: []string{"cli0"}}).Up(ctx)
	require.NoError(t, err)
	assert.Len(t, macs, 1)
	assert.Empty(t, again.asked)

	// The 4 s lease is renewed at half its time, and again after that,
	// while the address stays.
	first := requests.Load()
	require.Eventually(t, func() bool { return requests.Load() >= first+2 }, 8*time.Second, 100*time.Millisecond,
		"the lease was not renewed (%d requests)", requests.Load())
	addrs, err = netlink.AddrList(cli, netlink.FAMILY_V4)
	require.NoError(t, err)
	require.Len(t, addrs, 1)
	assert.Equal(t, "192.168.77.10/24", addrs[0].IPNet.String())
}
