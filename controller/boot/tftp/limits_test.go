package tftp

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/regularfile"
)

// silentRRQ sends a read request from a fresh socket on ip and never
// answers what comes back: what a request with a forged source is.
func silentRRQ(t *testing.T, srv netip.AddrPort, ip netip.Addr, file string, opts ...string) {
	t.Helper()
	c := newClientAt(t, srv, ip)
	_, err := c.conn.WriteToUDPAddrPort(rrq(file, "octet", opts...), srv)
	require.NoError(t, err)
}

// Finding: 128 never-acknowledged requests asking timeout=255 held every
// slot for ~25 minutes. From one address they now hold MaxPerSource slots
// for the few seconds of the silent-request patience, and a node on
// another address is served at once.
func TestSilentFloodFromOneAddress(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "ipxe", pattern(5000))
	drops := &dropCount{}
	s, addr := startServer(t, Config{Root: dir, Dropped: drops.add})
	flooder := netip.MustParseAddr("127.0.0.1")
	start := time.Now()
	for range 128 {
		silentRRQ(t, addr, flooder, "ipxe", "timeout", "255")
	}
	// The node's request is queued behind the flood: once it is answered,
	// the server has seen every request of the flood.
	res := newClientAt(t, addr, netip.MustParseAddr("127.0.0.2")).get("ipxe", "octet")
	require.NoError(t, res.err, "a node's read while one address floods the server")
	assert.Equal(t, pattern(5000), res.data)
	assert.Less(t, time.Since(start), 2*time.Second, "served at once")
	assert.LessOrEqual(t, inUse(s), 8+1, "the flood holds MaxPerSource slots (the node's may not be released yet)")
	require.Eventually(t, func() bool { return inUse(s) == 0 }, 8*time.Second, 20*time.Millisecond, "silent requests released")
	assert.Less(t, time.Since(start), 5*time.Second, "3 tries at the default 1 s timeout")
	// Each request was dropped unanswered (beyond the burst of 20),
	// refused for its address, or served until it proved silent.
	assert.Equal(t, 8, drops.get(DropSilent))
	assert.Positive(t, drops.get(DropPerSource))
	assert.GreaterOrEqual(t, drops.get(DropRate), 100)
	assert.Equal(t, 128-8, drops.get(DropRate)+drops.get(DropPerSource))
}

// The same flood from 128 addresses fills every slot, but only for the
// silent-request patience: the timeout=255 each asked for is declined.
func TestSilentFloodFromManyAddresses(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "ipxe", pattern(5000))
	drops := &dropCount{}
	s, addr := startServer(t, Config{Root: dir, Dropped: drops.add})
	start := time.Now()
	for i := range 128 {
		silentRRQ(t, addr, netip.AddrFrom4([4]byte{127, 0, 1, byte(1 + i)}), "ipxe", "timeout", "255", "blksize", "1468")
	}
	require.Eventually(t, func() bool { return inUse(s) == 128 }, 2*time.Second, 10*time.Millisecond)
	res := newClientAt(t, addr, netip.MustParseAddr("127.0.0.2")).get("ipxe", "octet")
	assert.Contains(t, res.err.Error(), "busy", "all slots held for now")
	require.Eventually(t, func() bool { return inUse(s) == 0 }, 8*time.Second, 20*time.Millisecond, "silent requests released")
	assert.Less(t, time.Since(start), 5*time.Second, "3 tries at the default 1 s timeout")
	res = newClientAt(t, addr, netip.MustParseAddr("127.0.0.2")).get("ipxe", "octet")
	require.NoError(t, res.err)
	assert.Equal(t, 128, drops.get(DropSilent))
	assert.Equal(t, 1, drops.get(DropBusy))
}

// The timeout option is accepted up to MaxTimeout (default 5 s) and
// declined above: left out of the OACK, so the server's default applies.
func TestTimeoutOptionCap(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "f", pattern(100))
	_, byDefault := startServer(t, Config{Root: dir})
	_, upTo30 := startServer(t, Config{Root: dir, MaxTimeout: 30 * time.Second})
	cases := []struct {
		srv  netip.AddrPort
		ask  string
		want map[string]string
	}{
		{byDefault, "1", map[string]string{"timeout": "1"}},
		{byDefault, "5", map[string]string{"timeout": "5"}},
		{byDefault, "6", nil},
		{byDefault, "255", nil},
		{upTo30, "30", map[string]string{"timeout": "30"}},
		{upTo30, "31", nil},
	}
	for _, tc := range cases {
		t.Run(tc.ask, func(t *testing.T) {
			res := newClient(t, tc.srv).get("f", "octet", "blksize", "1024", "timeout", tc.ask)
			require.NoError(t, res.err)
			assert.Equal(t, pattern(100), res.data)
			want := map[string]string{"blksize": "1024"}
			for k, v := range tc.want {
				want[k] = v
			}
			assert.Equal(t, want, res.oack)
		})
	}
}

// Finding: a FIFO in the boot directory blocked its reader in open() and
// with it the server's shutdown. Nothing but a regular file is served,
// and none of the others is waited on.
func TestNotRegularFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "ok", []byte("ok"))
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	// Were the server to block on it, this lets it go when the test ends.
	t.Cleanup(func() { unblockFIFO(fifo) })
	require.NoError(t, os.Symlink("fifo", filepath.Join(dir, "link-to-fifo")))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "dir"), 0o755))
	sock, err := net.Listen("unix", filepath.Join(dir, "socket"))
	require.NoError(t, err)
	defer sock.Close()
	names := []string{"fifo", "link-to-fifo", "dir", "socket"}
	// A character device like /dev/null (1, 3), where mknod is allowed.
	if syscall.Mknod(filepath.Join(dir, "null"), syscall.S_IFCHR|0o666, 1<<8|3) == nil {
		names = append(names, "null")
	}

	drops := &dropCount{}
	failed := make(chan Transfer, 10)
	s, err := New(Config{Root: dir, Logger: slog.New(slog.DiscardHandler), Dropped: drops.add, OnTransfer: func(tr Transfer) { failed <- tr }})
	require.NoError(t, err)
	defer s.Close()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	addr := conn.LocalAddr().(*net.UDPAddr).AddrPort()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, conn) }()

	for _, name := range names {
		t.Run(name, func(t *testing.T) {
			start := time.Now()
			res := newClient(t, addr).get(name, "octet")
			require.Error(t, res.err)
			assert.Equal(t, int(errNotFound), tftpCode(res.err), res.err.Error())
			assert.Less(t, time.Since(start), time.Second)
		})
	}
	for range names {
		tr := <-failed
		assert.ErrorIs(t, tr.Err, regularfile.ErrNotRegular, "the reason is logged and goes into the node's history")
	}
	assert.Equal(t, len(names), drops.get(DropNotRegular))
	res := newClient(t, addr).get("ok", "octet")
	require.NoError(t, res.err)
	assert.Equal(t, "ok", string(res.data))

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(2 * time.Second):
		t.Fatal("Serve did not return within 2 s of its context's end")
	}
}

// unblockFIFO opens fifo for writing without blocking: a reader stuck in
// open() then gets it.
func unblockFIFO(fifo string) {
	if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
		f.Close()
	}
}

type dropCount struct {
	mu sync.Mutex
	n  map[string]int
}

func (d *dropCount) add(reason string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.n == nil {
		d.n = map[string]int{}
	}
	d.n[reason]++
}

func (d *dropCount) get(reason string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[reason]
}

// One address holds at most MaxPerSource transfers; beyond, it is told so.
func TestPerSourceCap(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "f", pattern(2000))
	drops := &dropCount{}
	s, addr := startServer(t, Config{Root: dir, MaxPerSource: 2, Dropped: drops.add})
	ip := netip.MustParseAddr("127.0.0.9")
	silentRRQ(t, addr, ip, "f")
	silentRRQ(t, addr, ip, "f")
	require.Eventually(t, func() bool { return inUse(s) == 2 }, 2*time.Second, 10*time.Millisecond)
	res := newClientAt(t, addr, ip).get("f", "octet")
	require.Error(t, res.err)
	assert.Equal(t, "tftp error 0: too many transfers from your address", res.err.Error())
	res = newClientAt(t, addr, netip.MustParseAddr("127.0.0.10")).get("f", "octet")
	require.NoError(t, res.err, "another address is served")
	assert.Equal(t, 1, drops.get(DropPerSource))
}

// Finding: forged sources could fill every slot. With Known (the boot
// service's addresses of nodes being booted), sources it does not know
// share 3/4 of the slots, and a booting node is served whatever they do.
func TestKnownSourcesHaveReservedSlots(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "snponly.efi", pattern(3000))
	node := netip.MustParseAddr("127.0.0.2")
	drops := &dropCount{}
	s, addr := startServer(t, Config{Root: dir, MaxTransfers: 8, Known: func(a netip.Addr) bool { return a == node }, Dropped: drops.add})
	for i := range 10 {
		silentRRQ(t, addr, netip.AddrFrom4([4]byte{127, 0, 2, byte(1 + i)}), "snponly.efi", "timeout", "255")
	}
	require.Eventually(t, func() bool { _, unknown := s.inUse(); return unknown == 6 }, 2*time.Second, 10*time.Millisecond)
	res := newClientAt(t, addr, netip.MustParseAddr("127.0.3.1")).get("snponly.efi", "octet")
	require.Error(t, res.err, "the unknown share is full")
	assert.Contains(t, res.err.Error(), "busy")
	// The size probe and the read, at once, as UEFI does them.
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			res := newClientAt(t, addr, node).get("snponly.efi", "octet", "tsize", "0")
			assert.NoError(t, res.err, "a node being booted")
			assert.Equal(t, pattern(3000), res.data)
		})
	}
	wg.Wait()
	total, unknown := s.inUse()
	assert.LessOrEqual(t, total, 8)
	assert.Equal(t, 6, unknown)
	assert.Equal(t, 5, drops.get(DropUnknownShare))
}

// Before its first ACK a client gets SilentTries sends of the first
// packet at the server's timeout; after it, the negotiated timeout and
// all Retries.
func TestSilentPatience(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "f", pattern(3000))
	got := make(chan Transfer, 2)
	_, addr := startServer(t, Config{Root: dir, Timeout: 50 * time.Millisecond, OnTransfer: func(tr Transfer) { got <- tr }})
	count := func(c *testClient, want uint16) int {
		n := 0
		for {
			p := tryReadPacket(c.conn, 600*time.Millisecond)
			if p == nil {
				return n
			}
			if p.op == opDATA && p.block == want {
				n++
			}
		}
	}
	t.Run("never answered", func(t *testing.T) {
		c := newClient(t, addr)
		c.conn.WriteToUDPAddrPort(rrq("f", "octet"), addr)
		assert.Equal(t, 3, count(c, 1))
		tr := <-got
		assert.ErrorIs(t, tr.Err, errSilent)
		assert.ErrorIs(t, tr.Err, errGaveUp)
	})
	t.Run("answered once", func(t *testing.T) {
		c := newClient(t, addr)
		c.conn.WriteToUDPAddrPort(rrq("f", "octet"), addr)
		buf := make([]byte, 600)
		c.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, tid, err := c.conn.ReadFromUDPAddrPort(buf)
		require.NoError(t, err)
		c.conn.WriteToUDPAddrPort((&packet{op: opACK, block: 1}).marshal(), tid)
		assert.Equal(t, 6, count(c, 2), "first send and 5 retries")
		tr := <-got
		assert.ErrorIs(t, tr.Err, errGaveUp)
		assert.NotErrorIs(t, tr.Err, errSilent)
	})
}

func tryReadPacket(c *net.UDPConn, wait time.Duration) *packet {
	buf := make([]byte, maxPacket)
	c.SetReadDeadline(time.Now().Add(wait))
	n, _, err := c.ReadFromUDPAddrPort(buf)
	if err != nil {
		return nil
	}
	p, err := parsePacket(buf[:n])
	if err != nil {
		return nil
	}
	return p
}

// A transfer ends after MaxLifetime however well the client keeps it
// going, with an error to the client.
func TestMaxLifetime(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "big", pattern(100_000))
	got := make(chan Transfer, 1)
	drops := &dropCount{}
	_, addr := startServer(t, Config{Root: dir, MaxLifetime: 300 * time.Millisecond, Dropped: drops.add,
		OnTransfer: func(tr Transfer) { got <- tr }})
	c := newClient(t, addr)
	start := time.Now()
	c.conn.WriteToUDPAddrPort(rrq("big", "octet"), addr)
	buf := make([]byte, 600)
	var last *packet
	for {
		c.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
		n, tid, err := c.conn.ReadFromUDPAddrPort(buf)
		require.NoError(t, err)
		p, err := parsePacket(buf[:n])
		require.NoError(t, err)
		if p.op != opDATA {
			last = p
			break
		}
		// A slow client, well within the timeout: 200 blocks take 4 s.
		time.Sleep(20 * time.Millisecond)
		c.conn.WriteToUDPAddrPort((&packet{op: opACK, block: p.block}).marshal(), tid)
	}
	assert.Equal(t, opERROR, last.op)
	assert.Equal(t, "transfer took too long", last.msg)
	assert.Less(t, time.Since(start), 2*time.Second)
	tr := <-got
	assert.ErrorIs(t, tr.Err, errLifetime)
	assert.Positive(t, tr.Bytes)
	assert.Equal(t, 1, drops.get(DropLifetime))
}

// A source sending more than RequestRate requests a second (after a burst
// of RequestBurst) is not answered.
func TestRequestRate(t *testing.T) {
	dir := t.TempDir()
	drops := &dropCount{}
	_, addr := startServer(t, Config{Root: dir, RequestRate: 1, RequestBurst: 5, Dropped: drops.add})
	ip := netip.MustParseAddr("127.0.0.7")
	var clients []*testClient
	for range 12 {
		c := newClientAt(t, addr, ip)
		c.conn.WriteToUDPAddrPort(rrq("missing", "octet"), addr)
		clients = append(clients, c)
	}
	answered := 0
	for _, c := range clients {
		if p := tryReadPacket(c.conn, 300*time.Millisecond); p != nil {
			assert.Equal(t, errNotFound, p.code)
			answered++
		}
	}
	assert.GreaterOrEqual(t, answered, 5)
	assert.LessOrEqual(t, answered, 6, "the burst, and what 1/s refilled meanwhile")
	assert.Equal(t, 12, answered+drops.get(DropRate))
	res := newClientAt(t, addr, netip.MustParseAddr("127.0.0.8")).get("missing", "octet")
	assert.Equal(t, int(errNotFound), tftpCode(res.err), "another address is answered")
}

// Refusals are logged once per reason and interval, with the count of
// those left out.
func TestRefusalLogThrottle(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	start := time.Unix(1000, 0)
	now := start
	th := newThrottle(10*time.Second, func() time.Time { return now })
	for i := range 5 {
		now = start.Add(time.Duration(i) * time.Second)
		th.warn(log, DropBusy, "refusing")
	}
	now = start
	th.warn(log, DropPerSource, "refusing")
	now = start.Add(11 * time.Second)
	th.warn(log, DropBusy, "refusing")
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	require.Len(t, lines, 3)
	assert.Contains(t, lines[0], "reason=busy similar_not_logged=0")
	assert.Contains(t, lines[1], "reason=per_source similar_not_logged=0")
	assert.Contains(t, lines[2], "reason=busy similar_not_logged=4")
}

// inUse is the number of running transfers.
func inUse(s *Server) int {
	total, _ := s.inUse()
	return total
}
