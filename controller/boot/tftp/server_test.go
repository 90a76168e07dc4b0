package tftp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestReadSizesAndOptions(t *testing.T) {
	dir := t.TempDir()
	sizes := []int{0, 1, 511, 512, 513, 1024, 100_000}
	for _, n := range sizes {
		writeFile(t, dir, fmt.Sprintf("f%d", n), pattern(n))
	}
	_, addr := startServer(t, Config{Root: dir, Timeout: 200 * time.Millisecond})
	cases := []struct {
		name     string
		opts     []string
		window   int
		wantOACK map[string]string
	}{
		{name: "plain RFC 1350"},
		{name: "blksize", opts: []string{"blksize", "1432"}, wantOACK: map[string]string{"blksize": "1432"}},
		{name: "blksize tsize", opts: []string{"tsize", "0", "blksize", "1468"}, wantOACK: map[string]string{"blksize": "1468", "tsize": "SIZE"}},
		{name: "windowsize", opts: []string{"blksize", "1024", "windowsize", "8"}, window: 8, wantOACK: map[string]string{"blksize": "1024", "windowsize": "8"}},
		{name: "timeout", opts: []string{"timeout", "3"}, wantOACK: map[string]string{"timeout": "3"}},
		{name: "unknown and bad options ignored", opts: []string{"multicast", "", "blksize", "7", "windowsize", "0", "timeout", "256"}},
		{name: "blksize capped", opts: []string{"blksize", "70000"}, wantOACK: map[string]string{"blksize": "65464"}},
	}
	for _, tc := range cases {
		for _, n := range sizes {
			t.Run(fmt.Sprintf("%s/%d", tc.name, n), func(t *testing.T) {
				c := newNode(t, addr) // 49 reads: more than one address may make at once
				if tc.window > 0 {
					c.window = tc.window
				}
				res := c.get(fmt.Sprintf("/f%d", n), "octet", tc.opts...)
				require.NoError(t, res.err)
				assert.Equal(t, pattern(n), res.data)
				var want map[string]string
				for k, v := range tc.wantOACK {
					if want == nil {
						want = map[string]string{}
					}
					if v == "SIZE" {
						v = fmt.Sprint(n)
					}
					want[k] = v
				}
				assert.Equal(t, want, res.oack)
			})
		}
	}
}

func TestInMemoryFiles(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "grub/grub.cfg", []byte("on disk"))
	_, addr := startServer(t, Config{Root: dir, Files: map[string][]byte{"grub/grub.cfg": []byte("generated\n")},
		Dynamic: func(_ context.Context, name string, client netip.Addr) ([]byte, bool, error) {
			switch name {
			case "nodes/a.cfg":
				return []byte("node a for " + client.String()), true, nil
			case "nodes/broken.cfg":
				return nil, false, errors.New("no such node")
			}
			return nil, false, nil
		}})
	res := newClient(t, addr).get("/grub/grub.cfg", "octet")
	require.NoError(t, res.err)
	assert.Equal(t, "generated\n", string(res.data), "memory before disk")
	res = newClient(t, addr).get("grub/grub.cfg", "netascii")
	require.NoError(t, res.err)
	assert.Equal(t, "generated\r\n", string(res.data))
	res = newClient(t, addr).get("nodes/a.cfg", "octet")
	require.NoError(t, res.err)
	assert.Equal(t, "node a for 127.0.0.1", string(res.data), "Dynamic knows who asks")
	res = newClient(t, addr).get("nodes/broken.cfg", "octet")
	assert.Equal(t, int(errNotFound), tftpCode(res.err))
	res = newClient(t, addr).get("nodes/../../x", "octet")
	assert.Equal(t, int(errAccess), tftpCode(res.err), "names are cleaned before Dynamic sees them")
}

func TestNetascii(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "boot.txt", []byte("a\nb\rc"))
	_, addr := startServer(t, Config{Root: dir})
	res := newClient(t, addr).get("boot.txt", "NetASCII", "tsize", "0")
	require.NoError(t, res.err)
	assert.Equal(t, []byte("a\r\nb\r\x00c"), res.data)
	assert.Equal(t, "7", res.oack["tsize"])
}

func TestRefusals(t *testing.T) {
	base := t.TempDir()
	dir := filepath.Join(base, "boot")
	writeFile(t, dir, "ok", []byte("ok"))
	writeFile(t, base, "secret", []byte("secret"))
	require.NoError(t, os.Symlink("../secret", filepath.Join(dir, "link")))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "sub"), 0o755))
	_, addr := startServer(t, Config{Root: dir})
	cases := []struct {
		name, file, mode string
		code             uint16
	}{
		{"dotdot", "../secret", "octet", errAccess},
		{"dotdot inside", "sub/../../secret", "octet", errAccess},
		{"backslash dotdot", `..\secret`, "octet", errAccess},
		{"absolute outside", "/etc/passwd", "octet", errNotFound},
		{"symlink out", "link", "octet", errAccess},
		{"missing", "nope", "octet", errNotFound},
		{"directory", "sub", "octet", errNotFound},
		{"mail mode", "ok", "mail", errIllegalOp},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			res := newClient(t, addr).get(tc.file, tc.mode)
			require.Error(t, res.err)
			assert.Equal(t, int(tc.code), tftpCode(res.err), res.err.Error())
			assert.Empty(t, res.data)
		})
	}
	t.Run("write refused", func(t *testing.T) {
		c := newClient(t, addr)
		c.conn.WriteToUDPAddrPort((&packet{op: opWRQ, filename: "x", mode: "octet"}).marshal(), addr)
		p := readPacket(t, c.conn)
		assert.Equal(t, opERROR, p.op)
		assert.Equal(t, errAccess, p.code)
		_, err := os.Stat(filepath.Join(dir, "x"))
		assert.True(t, os.IsNotExist(err))
	})
	t.Run("garbage", func(t *testing.T) {
		c := newClient(t, addr)
		c.conn.WriteToUDPAddrPort([]byte{0, 1, 'x'}, addr)
		p := readPacket(t, c.conn)
		assert.Equal(t, errIllegalOp, p.code)
	})
}

func readPacket(t *testing.T, c *net.UDPConn) *packet {
	t.Helper()
	buf := make([]byte, maxPacket)
	c.SetReadDeadline(time.Now().Add(3 * time.Second))
	n, _, err := c.ReadFromUDPAddrPort(buf)
	require.NoError(t, err)
	p, err := parsePacket(buf[:n])
	require.NoError(t, err)
	return p
}

// Lost ACKs make the server resend from the first unacknowledged block,
// with and without a window.
func TestRetransmit(t *testing.T) {
	dir := t.TempDir()
	data := pattern(20_000)
	writeFile(t, dir, "f", data)
	_, addr := startServer(t, Config{Root: dir, Timeout: 100 * time.Millisecond})
	for _, window := range []int{1, 4} {
		t.Run(fmt.Sprint("window ", window), func(t *testing.T) {
			c := newClient(t, addr)
			c.window = window
			lost := map[uint16]bool{}
			c.skipAck = func(b uint16) bool {
				// lose the first ACK of every third window, and the last block's
				if (b%3 == 0 || len(data)/512+1 == int(b)) && !lost[b] {
					lost[b] = true
					return true
				}
				return false
			}
			opts := []string{"windowsize", fmt.Sprint(window)}
			res := c.get("f", "octet", opts...)
			require.NoError(t, res.err)
			assert.Equal(t, data, res.data)
			assert.NotEmpty(t, lost)
		})
	}
}

// UEFI PXE reads the OACK's tsize and aborts (code 8) before the real
// read: reported as a size probe, not a failure.
func TestSizeProbe(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "snponly.efi", pattern(3000))
	got := make(chan Transfer, 1)
	_, addr := startServer(t, Config{Root: dir, OnTransfer: func(tr Transfer) { got <- tr }})
	c := newClient(t, addr)
	c.conn.WriteToUDPAddrPort((&packet{op: opRRQ, filename: "snponly.efi", mode: "octet", order: []string{"tsize"}, options: map[string]string{"tsize": "0"}}).marshal(), addr)
	buf := make([]byte, 600)
	c.conn.SetReadDeadline(time.Now().Add(3 * time.Second))
	n, tid, err := c.conn.ReadFromUDPAddrPort(buf)
	require.NoError(t, err)
	oack, err := parsePacket(buf[:n])
	require.NoError(t, err)
	assert.Equal(t, "3000", oack.options["tsize"])
	c.conn.WriteToUDPAddrPort(errorPacket(errOptionRefuse, "User aborted the transfer"), tid)
	tr := <-got
	assert.ErrorIs(t, tr.Err, ErrSizeProbe)
}

// A client that goes away is given up on after the retries, and reported.
func TestClientVanishes(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "f", pattern(5000))
	got := make(chan Transfer, 1)
	_, addr := startServer(t, Config{Root: dir, Timeout: 50 * time.Millisecond, Retries: 2, OnTransfer: func(tr Transfer) { got <- tr }})
	c := newClient(t, addr)
	c.conn.WriteToUDPAddrPort((&packet{op: opRRQ, filename: "f", mode: "octet"}).marshal(), addr)
	// Count the copies of block 1: first send plus two retries.
	copies := 0
	buf := make([]byte, 600)
	for {
		c.conn.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
		if _, _, err := c.conn.ReadFromUDPAddrPort(buf); err != nil {
			break
		}
		copies++
	}
	assert.Equal(t, 3, copies)
	select {
	case tr := <-got:
		assert.ErrorIs(t, tr.Err, errGaveUp)
		assert.Equal(t, "f", tr.File)
	case <-time.After(2 * time.Second):
		t.Fatal("no transfer report")
	}
}

// Packets from a stranger to a transfer's port get "unknown transfer ID"
// and do not disturb the transfer.
func TestUnknownTID(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "f", pattern(2000))
	_, addr := startServer(t, Config{Root: dir, Timeout: time.Second})
	c := newClient(t, addr)
	c.conn.WriteToUDPAddrPort((&packet{op: opRRQ, filename: "f", mode: "octet"}).marshal(), addr)
	buf := make([]byte, 600)
	c.conn.SetReadDeadline(time.Now().Add(2 * time.Second))
	_, tid, err := c.conn.ReadFromUDPAddrPort(buf)
	require.NoError(t, err)
	stranger := newClient(t, addr)
	stranger.conn.WriteToUDPAddrPort((&packet{op: opACK, block: 1}).marshal(), tid)
	p := readPacket(t, stranger.conn)
	assert.Equal(t, errUnknownTID, p.code)
	// The real client carries on from block 1.
	var out []byte
	out = append(out, buf[4:516]...)
	for blk := uint16(1); ; blk++ {
		c.conn.WriteToUDPAddrPort((&packet{op: opACK, block: blk}).marshal(), tid)
		n, _, err := c.conn.ReadFromUDPAddrPort(buf)
		require.NoError(t, err)
		out = append(out, buf[4:n]...)
		if n < 516 {
			c.conn.WriteToUDPAddrPort((&packet{op: opACK, block: blk + 1}).marshal(), tid)
			break
		}
	}
	assert.Equal(t, pattern(2000), out)
}

// More clients than MaxTransfers: the excess is refused with "busy", the
// rest complete; a retransmitted RRQ does not start a second transfer.
func TestBoundedTransfers(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, dir, "f", pattern(3000))
	_, addr := startServer(t, Config{Root: dir, MaxTransfers: 2, Timeout: 300 * time.Millisecond})
	// Two clients that request and then stall hold both slots.
	var stalled []*testClient
	for range 2 {
		c := newClient(t, addr)
		rrq := (&packet{op: opRRQ, filename: "f", mode: "octet"}).marshal()
		c.conn.WriteToUDPAddrPort(rrq, addr)
		c.conn.WriteToUDPAddrPort(rrq, addr) // retransmit: must not take a second slot
		p := readPacket(t, c.conn)
		require.Equal(t, opDATA, p.op)
		stalled = append(stalled, c)
	}
	res := newClient(t, addr).get("f", "octet")
	require.Error(t, res.err)
	assert.Equal(t, int(errUndefined), tftpCode(res.err))
	assert.Contains(t, res.err.Error(), "busy")
	// Once the stalled ones give up (or finish), slots free up.
	for _, c := range stalled {
		c.conn.Close()
	}
	require.Eventually(t, func() bool { return newClient(t, addr).get("f", "octet").err == nil }, 20*time.Second, 500*time.Millisecond)
}

// Block numbers wrap from 65535 to 0 (tftp-hpa and PXE clients expect it).
func TestBlockWrap(t *testing.T) {
	dir := t.TempDir()
	data := pattern(70_000 * 8)
	writeFile(t, dir, "big", data)
	_, addr := startServer(t, Config{Root: dir, Timeout: time.Second})
	c := newClient(t, addr)
	c.window = 64
	res := c.get("big", "octet", "blksize", "8", "windowsize", "64")
	require.NoError(t, res.err)
	assert.Equal(t, len(data), len(res.data))
	assert.Equal(t, data, res.data)
}

func TestManyParallel(t *testing.T) {
	dir := t.TempDir()
	data := pattern(80_000)
	writeFile(t, dir, "ipxe", data)
	_, addr := startServer(t, Config{Root: dir})
	var wg sync.WaitGroup
	for range 20 { // 20 nodes: one address may hold MaxPerSource transfers only
		wg.Go(func() {
			res := newNode(t, addr).get("ipxe", "octet", "blksize", "1400")
			assert.NoError(t, res.err)
			assert.Equal(t, data, res.data)
		})
	}
	wg.Wait()
}

func TestIsNotFound(t *testing.T) {
	assert.True(t, IsNotFound(&tftpError{errNotFound, "file not found"}))
	assert.True(t, IsNotFound(fmt.Errorf("open: %w", &tftpError{errNotFound, "file not found"})))
	assert.False(t, IsNotFound(&tftpError{errUndefined, "transfer took too long"}))
	assert.False(t, IsNotFound(ErrSizeProbe))
	assert.False(t, IsNotFound(nil))
}
