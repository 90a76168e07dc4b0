package boot

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/nclient4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/controller/store/storetest"
)

// netnsChild marks the re-executed test process that runs inside a fresh
// network namespace: DHCP is only ever spoken on a veth pair in there.
const netnsChild = "ANVIL_BOOT_TEST_NETNS_CHILD"

// inNamespace re-runs the named test in a child process with its own
// network namespace and reports whether this is that child.
func inNamespace(t *testing.T, name string) bool {
	if os.Getenv(netnsChild) == "1" {
		return true
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root to create a network namespace")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^"+name+"$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), netnsChild+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	out, err := cmd.CombinedOutput()
	if errors.Is(err, syscall.EPERM) {
		t.Skipf("cannot create a network namespace here: %v", err)
	}
	require.NoError(t, err, string(out))
	t.Logf("namespace child:\n%s", out)
	assert.Contains(t, string(out), "--- PASS: "+name)
	return false
}

// veth makes srv0 (10.77.0.1/24) and cli0 (no address) in this namespace.
func veth(t testing.TB) {
	require.NoError(t, netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "srv0"}, PeerName: "cli0"}))
	srv, err := netlink.LinkByName("srv0")
	require.NoError(t, err)
	require.NoError(t, netlink.AddrAdd(srv, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 77, 0, 1), Mask: net.CIDRMask(24, 32)}}))
	require.NoError(t, netlink.LinkSetUp(srv))
	cli, err := netlink.LinkByName("cli0")
	require.NoError(t, err)
	require.NoError(t, netlink.LinkSetUp(cli))
	lo, err := netlink.LinkByName("lo")
	require.NoError(t, err)
	require.NoError(t, netlink.LinkSetUp(lo))
}

type events struct {
	mu    sync.Mutex
	lines []string
}

func (e *events) record(_ context.Context, node, sev, msg string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.lines = append(e.lines, node+" "+sev+" "+msg)
}

func (e *events) text() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.lines, "\n")
}

// fleet enrols a node being cleaned (port macClean) and an active one
// (port macActive) in a fresh SQLite store.
func fleet(t testing.TB) (*sqlite.Store, *store.Node, *store.Node) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "anvil.db"))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	var out []*store.Node
	for _, n := range []struct{ state, mac string }{{"clean wait", macClean}, {"active", macActive}} {
		node := storetest.NewNode("")
		node.ProvisionState = n.state
		require.NoError(t, st.CreateNode(ctx, node))
		require.NoError(t, st.CreatePort(ctx, &store.Port{UUID: node.UUID + "-p", Address: n.mac, NodeUUID: node.UUID, PXEEnabled: true, CreatedAt: time.Now()}))
		out = append(out, node)
	}
	return st, out[0], out[1]
}

const (
	macClean   = "52:54:00:77:00:01"
	macActive  = "52:54:00:77:00:02"
	macUnknown = "52:54:00:77:00:99"
)

func biosPXE(m *dhcpv4.DHCPv4) {
	dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001"))(m)
	dhcpv4.WithGeneric(dhcpv4.OptionClientSystemArchitectureType, []byte{0, 0})(m)
}

func client(t *testing.T, mac string) *nclient4.Client {
	hw, err := net.ParseMAC(mac)
	require.NoError(t, err)
	c, err := nclient4.New("cli0", nclient4.WithHWAddr(hw), nclient4.WithTimeout(700*time.Millisecond), nclient4.WithRetry(2))
	require.NoError(t, err)
	t.Cleanup(func() { c.Close() })
	return c
}

func startService(t testing.TB, cfg Config, st Store) {
	cfg.Logger = slog.New(slog.DiscardHandler)
	s, err := New(cfg, st)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
}

// TestServiceInNamespace runs the boot service on one end of a veth pair
// and DHCP/TFTP clients on the other: full mode hands an enrolled, booting
// port an address and the BIOS iPXE binary, which tftp-hpa then fetches
// from the default TFTP address; the active node and a stranger get no
// offer. Then proxy mode: boot information without an address, on 67 and
// on 4011.
func TestServiceInNamespace(t *testing.T) {
	if !inNamespace(t, "TestServiceInNamespace") {
		return
	}
	veth(t)
	st, cleaning, active := fleet(t)
	dir := t.TempDir()
	ipxe := bytes.Repeat([]byte("undionly"), 9000)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "undionly.kpxe"), ipxe, 0o644))
	ev := &events{}
	ctx := context.Background()

	t.Run("full", func(t *testing.T) {
		startService(t, Config{DHCP: "full", Interface: "srv0", Range: "10.77.0.100-10.77.0.110", BootDir: dir,
			HTTPBase: "http://10.77.0.1:6385", Record: ev.record}, st)
		lease, err := client(t, macClean).Request(ctx, biosPXE)
		require.NoError(t, err)
		ack := lease.ACK
		assert.Equal(t, "10.77.0.100", ack.YourIPAddr.String())
		assert.Equal(t, "10.77.0.1", ack.ServerIPAddr.String())
		assert.Equal(t, "undionly.kpxe", ack.BootFileName)
		assert.Contains(t, ev.text(), cleaning.UUID+" INFO boot service: DHCP ACK to BIOS PXE of port "+macClean+": address 10.77.0.100")

		if _, err := exec.LookPath("tftp"); err == nil {
			cli, err := netlink.LinkByName("cli0")
			require.NoError(t, err)
			require.NoError(t, netlink.AddrAdd(cli, &netlink.Addr{IPNet: &net.IPNet{IP: ack.YourIPAddr, Mask: net.CIDRMask(24, 32)}}))
			out := filepath.Join(t.TempDir(), "got")
			msg, err := exec.Command("tftp", "-m", "binary", "10.77.0.1", "-c", "get", ack.BootFileName, out).CombinedOutput()
			require.NoError(t, err, string(msg))
			got, err := os.ReadFile(out)
			require.NoError(t, err)
			assert.True(t, bytes.Equal(ipxe, got), "TFTP content differs")
			// The GRUB hand-over for Secure Boot nodes is generated.
			msg, err = exec.Command("tftp", "-m", "binary", "10.77.0.1", "-c", "get", "grub/grub.cfg", out).CombinedOutput()
			require.NoError(t, err, string(msg))
			got, err = os.ReadFile(out)
			require.NoError(t, err)
			assert.Contains(t, string(got), "configfile $prefix/nodes/$net_default_mac.cfg\n")
			require.NoError(t, netlink.AddrDel(cli, &netlink.Addr{IPNet: &net.IPNet{IP: ack.YourIPAddr, Mask: net.CIDRMask(24, 32)}}))
		}

		for _, mac := range []string{macActive, macUnknown} {
			_, err := client(t, mac).DiscoverOffer(ctx, biosPXE)
			assert.Error(t, err, "%s must get no offer", mac)
		}
		assert.Contains(t, ev.text(), active.UUID+" WARNING boot service: BIOS PXE firmware of port "+macActive+" asked to network-boot (DHCP DISCOVER); not answered: the node is active")
		assert.NotContains(t, ev.text(), macUnknown)
	})

	t.Run("proxy", func(t *testing.T) {
		startService(t, Config{DHCP: "proxy", Interface: "srv0", BootDir: dir, HTTPBase: "http://10.77.0.1:6385", Record: ev.record}, st)
		offer, err := client(t, macClean).DiscoverOffer(ctx, biosPXE)
		require.NoError(t, err)
		assert.True(t, offer.YourIPAddr.IsUnspecified())
		assert.Equal(t, "undionly.kpxe", offer.BootFileName)
		assert.Equal(t, "PXEClient", offer.ClassIdentifier())

		// The PXE client, now with an address from the site's server,
		// asks port 4011 for its boot file.
		cli, err := netlink.LinkByName("cli0")
		require.NoError(t, err)
		require.NoError(t, netlink.AddrAdd(cli, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 77, 0, 50), Mask: net.CIDRMask(24, 32)}}))
		// Both ends are local addresses of this namespace: bind the client to
		// cli0 and accept local sources, so the request really crosses the
		// veth to the socket bound to srv0 and the answer comes back the same way.
		for _, k := range []string{"all", "srv0", "cli0"} {
			require.NoError(t, os.WriteFile("/proc/sys/net/ipv4/conf/"+k+"/accept_local", []byte("1"), 0o644))
			require.NoError(t, os.WriteFile("/proc/sys/net/ipv4/conf/"+k+"/rp_filter", []byte("0"), 0o644))
		}
		lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) { serr = syscall.BindToDevice(int(fd), "cli0") })
			return errors.Join(err, serr)
		}}
		pc, err := lc.ListenPacket(ctx, "udp4", "10.77.0.50:0")
		require.NoError(t, err)
		conn := pc.(*net.UDPConn)
		defer conn.Close()
		hw, _ := net.ParseMAC(macClean)
		req, err := dhcpv4.New(dhcpv4.WithHwAddr(hw), dhcpv4.WithMessageType(dhcpv4.MessageTypeRequest),
			dhcpv4.WithClientIP(net.IPv4(10, 77, 0, 50)), biosPXE)
		require.NoError(t, err)
		_, err = conn.WriteToUDP(req.ToBytes(), &net.UDPAddr{IP: net.IPv4(10, 77, 0, 1), Port: 4011})
		require.NoError(t, err)
		buf := make([]byte, 1500)
		conn.SetReadDeadline(time.Now().Add(3 * time.Second))
		n, err := conn.Read(buf)
		require.NoError(t, err)
		ack, err := dhcpv4.FromBytes(buf[:n])
		require.NoError(t, err)
		assert.Equal(t, dhcpv4.MessageTypeAck, ack.MessageType())
		assert.Equal(t, req.TransactionID, ack.TransactionID)
		assert.Equal(t, "undionly.kpxe", ack.BootFileName)

		_, err = client(t, macActive).DiscoverOffer(ctx, biosPXE)
		assert.Error(t, err)
		// A non-PXE client of a booting node is the site server's business.
		_, err = client(t, macClean).DiscoverOffer(ctx)
		assert.Error(t, err)
	})

	// Discovery (--boot-discovery): an unknown machine's firmware gets an
	// address and iPXE, then its ramdisk's DHCP client an address; a
	// stranger that never PXE-booted gets nothing, nor does the active node.
	t.Run("discovery", func(t *testing.T) {
		startService(t, Config{DHCP: "full", Interface: "srv0", Range: "10.77.0.120-10.77.0.130", BootDir: dir,
			HTTPBase: "http://10.77.0.1:6385", Record: ev.record, Discovery: true}, st)
		lease, err := client(t, macUnknown).Request(ctx, biosPXE)
		require.NoError(t, err)
		assert.Equal(t, "undionly.kpxe", lease.ACK.BootFileName)
		assert.Equal(t, "10.77.0.129", lease.ACK.YourIPAddr.String(), "from the discovery share, the top 25 %")
		assert.Equal(t, 5*time.Minute, lease.ACK.IPAddressLeaseTime(0))
		ramdisk, err := client(t, macUnknown).Request(ctx)
		require.NoError(t, err)
		assert.Equal(t, "10.77.0.129", ramdisk.ACK.YourIPAddr.String(), "the ramdisk keeps its firmware's address")
		_, err = client(t, "52:54:00:77:00:55").DiscoverOffer(ctx)
		assert.Error(t, err, "a non-PXE stranger gets no address")
		_, err = client(t, macActive).DiscoverOffer(ctx, biosPXE)
		assert.Error(t, err, "discovery never boots an enrolled node")
	})
}

// TestDiscoveryFloodInNamespace replays issue #30 finding 3 over a veth:
// made-up MACs flood PXE DISCOVERs and REQUEST what they are offered
// while the BIOS PXE client of an enrolled node being cleaned asks. The
// node gets an address outside the discovery share; the made-up MACs get
// the share's two addresses at most, with 5-minute leases, and what was
// refused is counted.
func TestDiscoveryFloodInNamespace(t *testing.T) {
	if !inNamespace(t, "TestDiscoveryFloodInNamespace") {
		return
	}
	veth(t)
	st, cleaning, _ := fleet(t)
	ev := &events{}
	var mu sync.Mutex
	dropped := map[string]int{}
	count := func(key string) int {
		mu.Lock()
		defer mu.Unlock()
		return dropped[key]
	}
	startService(t, Config{DHCP: "full", Interface: "srv0", Range: "10.77.0.140-10.77.0.149", BootDir: t.TempDir(),
		HTTPBase: "http://10.77.0.1:6385", Record: ev.record, Discovery: true, Dropped: func(service, reason string) {
			mu.Lock()
			defer mu.Unlock()
			dropped[service+" "+reason]++
		}}, st)
	f := startFlood(t, "cli0")
	require.Eventually(t, func() bool { return count("dhcp discovery_share_full") > 0 && f.count() >= 500 }, 10*time.Second, 20*time.Millisecond,
		"the flood fills the discovery share")

	lease, err := client(t, macClean).Request(context.Background(), biosPXE)
	acks, sent := f.stop()
	require.NoError(t, err, "the enrolled node gets an address during the flood")
	got := lease.ACK.YourIPAddr.String()
	assert.Contains(t, []string{"10.77.0.140", "10.77.0.141", "10.77.0.142", "10.77.0.143", "10.77.0.144", "10.77.0.145", "10.77.0.146", "10.77.0.147"}, got)
	assert.Equal(t, time.Hour, lease.ACK.IPAddressLeaseTime(0))
	assert.Contains(t, ev.text(), cleaning.UUID+" INFO boot service: DHCP ACK to BIOS PXE of port "+macClean+": address "+got)

	mu.Lock()
	t.Logf("flood: %d DISCOVERs sent, %d ACKs, dropped %v", sent, len(acks), dropped)
	mu.Unlock()
	assert.GreaterOrEqual(t, sent, 500)
	assert.LessOrEqual(t, len(acks), 2, "only the share's addresses: %v", acks)
	for mac, ip := range acks {
		assert.Contains(t, []string{"10.77.0.148", "10.77.0.149"}, ip, mac)
	}
	leases, err := st.ListDHCPLeases(context.Background())
	require.NoError(t, err)
	for _, l := range leases {
		if l.MAC == macClean {
			continue
		}
		assert.Contains(t, []string{"10.77.0.148", "10.77.0.149"}, l.IP, "made-up MAC %s", l.MAC)
		assert.WithinDuration(t, time.Now().Add(5*time.Minute), l.ExpiresAt, 30*time.Second, "a short lease")
	}
	assert.Positive(t, count("dhcp discovery_rate"), "new unknown MACs beyond 20/s are not even answered")
}

// flood sends PXE DISCOVERs from new made-up MACs on an interface, 20
// every 20 ms, through a raw socket as firmware does, and REQUESTs every
// address offered to them.
type flood struct {
	conn net.PacketConn
	done chan struct{}
	wg   sync.WaitGroup
	mu   sync.Mutex
	acks map[string]string // made-up MAC → address ACKed
	sent int
}

func startFlood(t *testing.T, iface string) *flood {
	conn, err := nclient4.NewRawUDPConn(iface, dhcpv4.ClientPort)
	require.NoError(t, err)
	f := &flood{conn: conn, done: make(chan struct{}), acks: map[string]string{}}
	server := &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ServerPort}
	f.wg.Go(func() {
		for i := 0; ; i++ {
			if i%20 == 0 {
				select {
				case <-f.done:
					return
				case <-time.After(20 * time.Millisecond):
				}
			}
			m, err := dhcpv4.NewDiscovery(net.HardwareAddr{0x02, 0xfe, 0, byte(i >> 16), byte(i >> 8), byte(i)}, biosPXE)
			if err == nil {
				if _, err := conn.WriteTo(m.ToBytes(), server); err == nil {
					f.mu.Lock()
					f.sent++
					f.mu.Unlock()
				}
			}
		}
	})
	f.wg.Go(func() {
		buf := make([]byte, 1500)
		for {
			n, _, err := conn.ReadFrom(buf)
			if err != nil {
				return // closed by stop
			}
			m, err := dhcpv4.FromBytes(buf[:n])
			if err != nil || m.ClientHWAddr[0] != 0x02 || m.ClientHWAddr[1] != 0xfe {
				continue // not the flood's
			}
			switch m.MessageType() {
			case dhcpv4.MessageTypeOffer:
				if req, err := dhcpv4.NewRequestFromOffer(m, biosPXE); err == nil {
					conn.WriteTo(req.ToBytes(), server)
				}
			case dhcpv4.MessageTypeAck:
				f.mu.Lock()
				f.acks[m.ClientHWAddr.String()] = m.YourIPAddr.String()
				f.mu.Unlock()
			}
		}
	})
	t.Cleanup(func() { f.stop() })
	return f
}

func (f *flood) count() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.sent
}

// stop ends the flood (once) and returns the ACKs and the DISCOVERs sent.
func (f *flood) stop() (map[string]string, int) {
	select {
	case <-f.done:
	default:
		close(f.done)
		f.conn.Close()
	}
	f.wg.Wait()
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.acks, f.sent
}
