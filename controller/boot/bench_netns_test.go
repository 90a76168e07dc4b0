package boot

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/storetest"
)

// benchInNamespace runs the named benchmark again in a child with its own
// network namespace and reports the child's metrics as its own.
func benchInNamespace(b *testing.B, name string) bool {
	if os.Getenv(netnsChild) == "1" {
		return true
	}
	if os.Geteuid() != 0 {
		b.Skip("needs root to create network namespaces")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$", "-test.bench=^"+name+"$", "-test.benchtime=1x", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), netnsChild+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	out, err := cmd.CombinedOutput()
	require.NoError(b, err, string(out))
	b.Logf("namespace child:\n%s", out)
	// "BenchmarkX  1  123 ns/op  45.6 replies/s ..." → report the units.
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 4 || !strings.HasPrefix(f[0], name) {
			continue
		}
		for i := 2; i+1 < len(f); i += 2 {
			if v, err := strconv.ParseFloat(f[i], 64); err == nil && f[i+1] != "ns/op" {
				b.ReportMetric(v, f[i+1])
			}
		}
	}
	return false
}

// clientNamespace makes the veth pair of veth and moves cli0 into a new named namespace (so traffic
// between the clients and the server really crosses the veth) and gives it
// addrs. It returns a function that runs fn inside that namespace on a
// locked thread: sockets made there stay there.
func clientNamespace(tb testing.TB, addrs int) (name string, inside func(fn func())) {
	veth(tb)
	// veth gave srv0 10.77.0.1/24; the clients live in 10.77.0.0/16.
	srv, err := netlink.LinkByName("srv0")
	require.NoError(tb, err)
	require.NoError(tb, netlink.AddrDel(srv, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 77, 0, 1), Mask: net.CIDRMask(24, 32)}}))
	require.NoError(tb, netlink.AddrAdd(srv, &netlink.Addr{IPNet: &net.IPNet{IP: net.IPv4(10, 77, 0, 1), Mask: net.CIDRMask(16, 32)}}))
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	orig, err := netns.Get()
	require.NoError(tb, err)
	defer orig.Close()
	name = fmt.Sprintf("anvil-bench-%d", os.Getpid())
	ns, err := netns.NewNamed(name) // switches this thread into it
	require.NoError(tb, err)
	tb.Cleanup(func() { ns.Close(); netns.DeleteNamed(name) })
	require.NoError(tb, netns.Set(orig))
	cli, err := netlink.LinkByName("cli0")
	require.NoError(tb, err)
	require.NoError(tb, netlink.LinkSetNsFd(cli, int(ns)))
	inside = func(fn func()) {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		require.NoError(tb, netns.Set(ns))
		defer netns.Set(orig)
		fn()
	}
	inside(func() {
		cli, err := netlink.LinkByName("cli0")
		require.NoError(tb, err)
		for i := range addrs {
			ip := net.IPv4(10, 77, 1+byte(i/250), 1+byte(i%250))
			require.NoError(tb, netlink.AddrAdd(cli, &netlink.Addr{IPNet: &net.IPNet{IP: ip, Mask: net.CIDRMask(16, 32)}}))
		}
		require.NoError(tb, netlink.LinkSetUp(cli))
	})
	return name, inside
}

// BenchmarkPXEClients: 100 simulated BIOS PXE clients at once, each
// DISCOVER → OFFER → REQUEST → ACK (full mode, leases in SQLite) and then
// a TFTP read of a 74 KB iPXE binary, over a veth pair between two network
// namespaces. Reports DHCP replies per second and the p99 of one client's
// DHCP exchange and of its whole DHCP+TFTP sequence.
func BenchmarkPXEClients(b *testing.B) {
	if !benchInNamespace(b, "BenchmarkPXEClients") {
		return
	}
	const clients = 100
	_, inside := clientNamespace(b, clients)

	ctx := context.Background()
	st, _, _ := fleet(b)
	var macs []net.HardwareAddr
	for i := range clients {
		mac := net.HardwareAddr{0x52, 0x54, 0x00, 0x99, byte(i >> 8), byte(i)}
		macs = append(macs, mac)
		n := storetest.NewNode("")
		n.ProvisionState = "clean wait"
		require.NoError(b, st.CreateNode(ctx, n))
		require.NoError(b, st.CreatePort(ctx, &store.Port{UUID: n.UUID + "-p", Address: mac.String(), NodeUUID: n.UUID, PXEEnabled: true, CreatedAt: time.Now()}))
	}
	dir := b.TempDir()
	ipxe := bytes.Repeat([]byte{0xa5}, 74_213)
	require.NoError(b, os.WriteFile(filepath.Join(dir, "undionly.kpxe"), ipxe, 0o644))
	startService(b, Config{DHCP: "full", Interface: "srv0", Range: "10.77.2.1-10.77.2.250", BootDir: dir, HTTPBase: "http://10.77.0.1:6385"}, st)

	// Sockets are made inside the clients' namespace, used from anywhere.
	var sim *dhcpSim
	tftpConns := make([]*net.UDPConn, clients)
	inside(func() {
		sim = newDHCPSim(b, "cli0")
		for i := range clients {
			conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(10, 77, 1+byte(i/250), 1+byte(i%250))})
			require.NoError(b, err)
			tftpConns[i] = conn
		}
	})
	defer func() {
		for i := range clients {
			tftpConns[i].Close()
		}
	}()

	dhcpTimes := make([]time.Duration, clients)
	dhcpDone := make([]time.Time, clients)
	allTimes := make([]time.Duration, clients)
	b.ResetTimer()
	start := time.Now()
	var wg sync.WaitGroup
	for i := range clients {
		wg.Go(func() {
			t0 := time.Now()
			ack, err := sim.exchange(macs[i])
			if err != nil {
				b.Errorf("client %d: %v", i, err)
				return
			}
			dhcpDone[i] = time.Now()
			dhcpTimes[i] = dhcpDone[i].Sub(t0)
			got, err := tftpGet(tftpConns[i], net.IPv4(10, 77, 0, 1), ack.BootFileName)
			if err != nil || !bytes.Equal(got, ipxe) {
				b.Errorf("client %d: TFTP %s: %v (%d bytes)", i, ack.BootFileName, err, len(got))
				return
			}
			allTimes[i] = time.Since(t0)
		})
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(dhcpTimes)
	slices.Sort(allTimes)
	p99 := func(d []time.Duration) float64 { return float64(d[len(d)*99/100-1].Microseconds()) / 1000 }
	// Two replies (OFFER, ACK) per client, over the time until the last ACK.
	last := slices.MaxFunc(dhcpDone, func(a, b time.Time) int { return a.Compare(b) })
	b.ReportMetric(float64(2*clients)/last.Sub(start).Seconds(), "replies/s")
	b.ReportMetric(p99(dhcpTimes), "ms-p99-dhcp")
	b.ReportMetric(p99(allTimes), "ms-p99-dhcp+tftp")
	b.ReportMetric(elapsed.Seconds()*1000, "ms-all-100")
}

// BenchmarkTFTPThroughput reads a 20 MiB file with Debian's tftp-hpa client
// over the veth, from our server and from Debian's tftpd-hpa (in.tftpd) on
// the same veth, and reports both throughputs.
func BenchmarkTFTPThroughput(b *testing.B) {
	if !benchInNamespace(b, "BenchmarkTFTPThroughput") {
		return
	}
	for _, bin := range []string{"tftp", "in.tftpd"} {
		if _, err := exec.LookPath(bin); err != nil {
			b.Skipf("%s not installed (Debian tftp-hpa, tftpd-hpa)", bin)
		}
	}
	ns, _ := clientNamespace(b, 1)
	dir := b.TempDir()
	data := bytes.Repeat([]byte("0123456789abcdef"), 20<<20/16)
	require.NoError(b, os.WriteFile(filepath.Join(dir, "big"), data, 0o644))
	st, _, _ := fleet(b)
	startService(b, Config{TFTPListen: "10.77.0.1:69", BootDir: dir}, st)
	hpa := exec.Command("in.tftpd", "--foreground", "--address", "10.77.0.1:6969", "--secure", dir)
	require.NoError(b, hpa.Start())
	defer func() { hpa.Process.Kill(); hpa.Wait() }()
	time.Sleep(200 * time.Millisecond)

	get := func(port string) float64 {
		out := filepath.Join(b.TempDir(), "got")
		t0 := time.Now()
		msg, err := exec.Command("ip", "netns", "exec", ns, "tftp", "-m", "binary", "10.77.0.1", port, "-c", "get", "big", out).CombinedOutput()
		d := time.Since(t0)
		require.NoError(b, err, "port %s: %s", port, msg)
		got, err := os.ReadFile(out)
		require.NoError(b, err)
		require.True(b, bytes.Equal(data, got), "content differs (%d bytes)", len(got))
		return float64(len(data)) / (1 << 20) / d.Seconds()
	}
	b.ResetTimer()
	ours := get("69")
	theirs := get("6969")
	b.ReportMetric(ours, "MiB/s-anvil")
	b.ReportMetric(theirs, "MiB/s-tftpd-hpa")
}

// dhcpSim stands in for many PXE clients on one interface: one UDP socket
// on port 68 sends their requests (broadcast) and hands each broadcast
// reply to the client whose transaction it answers. (A packet socket per
// client, as nclient4 has, makes every client see every frame: 100 of them
// measure the harness, not the server.)
type dhcpSim struct {
	conn    *net.UDPConn
	mu      sync.Mutex
	waiting map[dhcpv4.TransactionID]chan *dhcpv4.DHCPv4
}

func newDHCPSim(tb testing.TB, iface string) *dhcpSim {
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var serr error
		err := c.Control(func(fd uintptr) {
			serr = errors.Join(syscall.BindToDevice(int(fd), iface),
				syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_BROADCAST, 1))
		})
		return errors.Join(err, serr)
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp4", ":68")
	require.NoError(tb, err)
	pc.(*net.UDPConn).SetReadBuffer(4 << 20)
	d := &dhcpSim{conn: pc.(*net.UDPConn), waiting: map[dhcpv4.TransactionID]chan *dhcpv4.DHCPv4{}}
	tb.Cleanup(func() { d.conn.Close() })
	go func() {
		buf := make([]byte, 1500)
		for {
			n, err := d.conn.Read(buf)
			if err != nil {
				return
			}
			m, err := dhcpv4.FromBytes(buf[:n])
			if err != nil {
				continue
			}
			d.mu.Lock()
			ch := d.waiting[m.TransactionID]
			d.mu.Unlock()
			if ch != nil {
				select {
				case ch <- m:
				default:
				}
			}
		}
	}()
	return d
}

// send broadcasts m and waits for a reply of type want, resending every
// second up to three times.
func (d *dhcpSim) send(m *dhcpv4.DHCPv4, want dhcpv4.MessageType) (*dhcpv4.DHCPv4, error) {
	ch := make(chan *dhcpv4.DHCPv4, 4)
	d.mu.Lock()
	d.waiting[m.TransactionID] = ch
	d.mu.Unlock()
	defer func() {
		d.mu.Lock()
		delete(d.waiting, m.TransactionID)
		d.mu.Unlock()
	}()
	for range 3 {
		if _, err := d.conn.WriteToUDP(m.ToBytes(), &net.UDPAddr{IP: net.IPv4bcast, Port: 67}); err != nil {
			return nil, err
		}
		timeout := time.After(time.Second)
		for {
			select {
			case r := <-ch:
				if r.MessageType() != want {
					continue
				}
				return r, nil
			case <-timeout:
			}
			break
		}
	}
	return nil, fmt.Errorf("no %s for %s", want, m.ClientHWAddr)
}

// exchange is DISCOVER → OFFER → REQUEST → ACK for a BIOS PXE client.
func (d *dhcpSim) exchange(mac net.HardwareAddr) (*dhcpv4.DHCPv4, error) {
	disc, err := dhcpv4.NewDiscovery(mac, biosPXE)
	if err != nil {
		return nil, err
	}
	offer, err := d.send(disc, dhcpv4.MessageTypeOffer)
	if err != nil {
		return nil, err
	}
	req, err := dhcpv4.NewRequestFromOffer(offer, biosPXE)
	if err != nil {
		return nil, err
	}
	return d.send(req, dhcpv4.MessageTypeAck)
}

// tftpGet is a plain RFC 1350 read (512-byte blocks, as PXE ROMs without
// options do), enough for the benchmark's clients.
func tftpGet(conn *net.UDPConn, server net.IP, file string) ([]byte, error) {
	rrq := append(append([]byte{0, 1}, file...), 0)
	rrq = append(append(rrq, "octet"...), 0)
	var out []byte
	buf := make([]byte, 600)
	want := uint16(1)
	for tries := 0; ; {
		if want == 1 {
			// Until the first block arrives, resend the RRQ every second
			// (PXE ROMs do): a request can be lost like any datagram.
			if _, err := conn.WriteToUDP(rrq, &net.UDPAddr{IP: server, Port: 69}); err != nil {
				return nil, err
			}
			conn.SetReadDeadline(time.Now().Add(time.Second))
		} else {
			conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		}
		n, from, err := conn.ReadFromUDP(buf)
		if ne, ok := err.(net.Error); ok && ne.Timeout() && want == 1 && tries < 5 {
			tries++
			continue
		}
		if err != nil {
			return out, err
		}
		if n < 4 || buf[1] != 3 {
			return out, fmt.Errorf("unexpected packet %x", buf[:min(n, 16)])
		}
		blk := uint16(buf[2])<<8 | uint16(buf[3])
		if blk == want {
			out = append(out, buf[4:n]...)
			want++
		}
		if _, err := conn.WriteToUDP([]byte{0, 4, buf[2], buf[3]}, from); err != nil {
			return out, err
		}
		if blk == want-1 && n < 516 {
			return out, nil
		}
	}
}
