package boot

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/boot/dhcp"
	"github.com/anvil-metal/anvil/controller/boot/tftp"
	"github.com/anvil-metal/anvil/controller/limits"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/storetest"
)

func TestBootTarget(t *testing.T) {
	ctx := context.Background()
	st, cleaning, active := fleet(t)
	nodes := storeNodes{st: st}

	tgt, err := nodes.BootTarget(ctx, macClean)
	require.NoError(t, err)
	assert.Equal(t, dhcp.Target{NodeUUID: cleaning.UUID, MAC: macClean, State: "clean wait", Booting: true}, tgt)
	tgt, err = nodes.BootTarget(ctx, macActive)
	require.NoError(t, err)
	assert.Equal(t, dhcp.Target{NodeUUID: active.UUID, MAC: macActive, State: "active"}, tgt)
	_, err = nodes.BootTarget(ctx, macUnknown)
	assert.ErrorIs(t, err, dhcp.ErrUnknownMAC)

	// With discovery on, an unknown MAC is a machine to discover; known
	// ones are answered as without it.
	disc := storeNodes{st: st, discovery: true}
	tgt, err = disc.BootTarget(ctx, macUnknown)
	require.NoError(t, err)
	assert.Equal(t, dhcp.Target{MAC: macUnknown, Discovery: true, Booting: true, State: "unknown (discovery)"}, tgt)
	tgt, err = disc.BootTarget(ctx, macActive)
	require.NoError(t, err)
	assert.False(t, tgt.Booting)
	assert.False(t, tgt.Discovery)

	// A port with pxe_enabled false is not booted, and the history will say why.
	n := storetest.NewNode("")
	n.ProvisionState = "deploying"
	n.InstanceInfo = map[string]any{"capabilities": map[string]any{"secure_boot": "true", "boot_mode": "uefi"}}
	require.NoError(t, st.CreateNode(ctx, n))
	require.NoError(t, st.CreatePort(ctx, &store.Port{UUID: "p3", Address: "52:54:00:77:00:03", NodeUUID: n.UUID, CreatedAt: time.Now()}))
	tgt, err = nodes.BootTarget(ctx, "52:54:00:77:00:03")
	require.NoError(t, err)
	assert.False(t, tgt.Booting)
	assert.True(t, tgt.SecureBoot)
	assert.Contains(t, tgt.State, "pxe_enabled false")
}

func TestSecureBootRequested(t *testing.T) {
	cases := []struct {
		name string
		node store.Node
		want bool
	}{
		{"nothing", store.Node{}, false},
		{"instance_info string", store.Node{InstanceInfo: map[string]any{"capabilities": "boot_mode:uefi,secure_boot:true"}}, true},
		{"instance_info object", store.Node{InstanceInfo: map[string]any{"capabilities": map[string]any{"secure_boot": true}}}, true},
		{"properties", store.Node{Properties: map[string]any{"capabilities": "secure_boot:True"}}, true},
		{"bios mode wins", store.Node{Properties: map[string]any{"capabilities": "boot_mode:bios,secure_boot:true"}}, false},
		{"false", store.Node{Properties: map[string]any{"capabilities": "secure_boot:false"}}, false},
		{"driver_info", store.Node{DriverInfo: map[string]any{"secure_boot": "true"}}, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) { assert.Equal(t, tc.want, SecureBootRequested(&tc.node)) })
	}
}

func TestConfigRefusals(t *testing.T) {
	st, _, _ := fleet(t)
	for _, tc := range []struct {
		cfg  Config
		want string
	}{
		{Config{DHCP: "maybe"}, "use off, proxy or full"},
		{Config{DHCP: "proxy"}, "--boot-interface"},
		{Config{DHCP: "proxy", Interface: "nosuch0"}, "nosuch0"},
		{Config{Range: "10.0.0.1-10.0.0.2"}, "need --boot-dhcp"},
		{Config{TFTPListen: "127.0.0.1:0"}, "--boot-dir"},
		{Config{DHCP: "full", Interface: "lo", BootDir: "/"}, "--boot-dhcp-range"},
		{Config{DHCP: "full", Interface: "lo", BootDir: "/", Range: "10.0.0.1-10.0.0.9"}, "not inside lo's network"},
	} {
		_, err := New(tc.cfg, st)
		require.Error(t, err, "%+v", tc.cfg)
		assert.Contains(t, err.Error(), tc.want)
	}
}

func TestGrubRelay(t *testing.T) {
	var asked []string
	g := grubRelay{base: "http://192.0.2.10:6385", config: func(_ context.Context, mac, client, base string) ([]byte, error) {
		asked = append(asked, mac+" "+client+" "+base)
		if mac != "52:54:00:77:00:01" {
			return nil, errors.New("Node 52:54:00:77:00:09 could not be found")
		}
		return []byte("linux /vmlinuz anvil.token=x\n"), nil
	}}
	ctx := context.Background()
	client := netip.MustParseAddr("192.0.2.57")
	b, ok, err := g.file(ctx, "grub/nodes/52-54-00-77-00-01.cfg", client)
	require.NoError(t, err)
	assert.True(t, ok)
	assert.Equal(t, "linux /vmlinuz anvil.token=x\n", string(b))
	assert.Equal(t, []string{"52:54:00:77:00:01 192.0.2.57 http://192.0.2.10:6385"}, asked,
		"the API learns the TFTP client's address (the nonce is bound to it) and the node-facing URL")

	_, ok, err = g.file(ctx, "undionly.kpxe", client)
	assert.NoError(t, err)
	assert.False(t, ok, "other names are the boot directory's")
	_, _, err = g.file(ctx, "grub/nodes/52:54:00:77:00:09.cfg", client)
	assert.ErrorContains(t, err, "could not be found")
	_, _, err = g.file(ctx, "grub/nodes/notamac.cfg", client)
	assert.Error(t, err)

	// Forged TFTP requests cannot drive the database: a bounded number of
	// configurations is rendered a second, over all clients.
	dropped := 0
	g.rate, g.dropped = limits.NewKeyed(limits.Rate{PerSecond: 1e-9, Burst: 3}, 1, nil), func(string) { dropped++ }
	asked = nil
	for i := range 10 {
		_, _, _ = g.file(ctx, "grub/nodes/52:54:00:77:00:01.cfg", netip.AddrFrom4([4]byte{10, 0, 0, byte(i)}))
	}
	assert.Len(t, asked, 3, "the burst, then nothing")
	assert.Equal(t, 7, dropped)
	assert.Contains(t, string(grubFiles()["grub/grub.cfg"]), "configfile $prefix/nodes/$net_default_mac.cfg\n")
}

func TestHostBookRecordsTransfers(t *testing.T) {
	var lines []string
	h := &hostBook{nodes: map[netip.Addr]string{}, record: func(_ context.Context, node, sev, msg string) {
		lines = append(lines, node+" "+sev+" "+msg)
	}}
	h.learn(netip.MustParseAddr("10.0.0.5"), "node-1")
	assert.True(t, h.known(netip.MustParseAddr("10.0.0.5")))
	assert.False(t, h.known(netip.MustParseAddr("10.0.0.6")))
	h.transfer(tftp.Transfer{Remote: netip.MustParseAddrPort("10.0.0.5:2070"), File: "snponly.efi", Bytes: 173792, Duration: 1500 * time.Millisecond})
	h.transfer(tftp.Transfer{Remote: netip.MustParseAddrPort("10.0.0.5:2071"), File: "undionly.kpxe", Err: errors.New("tftp error 1: file not found")})
	h.transfer(tftp.Transfer{Remote: netip.MustParseAddrPort("10.0.0.6:2070"), File: "snponly.efi"})
	h.transfer(tftp.Transfer{Remote: netip.MustParseAddrPort("10.0.0.5:2072"), File: "snponly.efi", Err: tftp.ErrSizeProbe})
	assert.Equal(t, []string{
		"node-1 INFO boot service: TFTP sent snponly.efi (173792 bytes, 1.5s) to 10.0.0.5",
		"node-1 WARNING boot service: TFTP of undionly.kpxe to 10.0.0.5 failed: tftp error 1: file not found",
	}, lines, "a client DHCP did not address is not in any node's history")
}

// The TFTP server knows the addresses the service's DHCP handed out (so
// they keep their reserved share of slots) and reports what it drops
// through Config.Dropped as service "tftp".
func TestTFTPConfig(t *testing.T) {
	hosts := &hostBook{nodes: map[netip.Addr]string{}}
	hosts.learn(netip.MustParseAddr("10.0.0.5"), "node-1")
	var dropped []string
	cfg := Config{BootDir: "/srv/boot", TFTPMaxLifetime: time.Minute, Dropped: func(service, reason string) { dropped = append(dropped, service+" "+reason) }}
	log := slog.New(slog.DiscardHandler)

	tc := tftpConfig(cfg, true, "", hosts, log)
	require.NotNil(t, tc.Known)
	assert.True(t, tc.Known(netip.MustParseAddr("10.0.0.5")))
	assert.False(t, tc.Known(netip.MustParseAddr("10.0.0.6")))
	assert.Equal(t, time.Minute, tc.MaxLifetime)
	tc.Dropped(tftp.DropBusy)
	assert.Equal(t, []string{"tftp busy"}, dropped)

	assert.Nil(t, tftpConfig(cfg, false, "", hosts, log).Known, "without DHCP nobody is known: all share every slot")
	assert.Nil(t, tftpConfig(Config{BootDir: "/srv/boot"}, true, "", hosts, log).Dropped)
}

// A FIFO in --boot-dir: the read is refused at once, counted, and the
// service still stops promptly.
func TestServiceTFTPNotRegular(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "undionly.kpxe")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	t.Cleanup(func() { // lets a reader stuck in open() go, should one be
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	var mu sync.Mutex
	var dropped []string
	st, _, _ := fleet(t)
	svc, err := New(Config{TFTPListen: "127.0.0.1:0", BootDir: dir, Logger: slog.New(slog.DiscardHandler),
		Dropped: func(service, reason string) { mu.Lock(); dropped = append(dropped, service+" "+reason); mu.Unlock() }}, st)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()

	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	defer c.Close()
	_, err = c.WriteTo(append([]byte{0, 1}, "undionly.kpxe\x00octet\x00"...), svc.tconn.LocalAddr())
	require.NoError(t, err)
	buf := make([]byte, 600)
	c.SetReadDeadline(time.Now().Add(time.Second))
	n, _, err := c.ReadFrom(buf)
	require.NoError(t, err, "answered at once")
	assert.Equal(t, append([]byte{0, 5, 0, 1}, "file not found\x00"...), buf[:n])
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return slices.Equal(dropped, []string{"tftp not_regular"})
	}, time.Second, 10*time.Millisecond)

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(2 * time.Second):
		t.Fatal("the service did not stop within 2 s")
	}
}
