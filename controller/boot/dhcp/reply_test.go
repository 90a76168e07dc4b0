package dhcp

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store/sqlite"
)

// fakeNodes is a Nodes of fixed targets.
type fakeNodes map[string]Target

func (f fakeNodes) BootTarget(_ context.Context, mac string) (Target, error) {
	t, ok := f[mac]
	if !ok {
		return Target{}, ErrUnknownMAC
	}
	return t, nil
}

// history collects what the responder records.
type history struct {
	mu    sync.Mutex
	lines []string
}

func (h *history) record(_ context.Context, node, sev, msg string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.lines = append(h.lines, node+" "+sev+" "+msg)
}

func (h *history) all() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.lines...)
}

const (
	macBooting = "52:54:00:00:00:01"
	macSecure  = "52:54:00:00:00:02"
	macActive  = "52:54:00:00:00:03"
	macOther   = "52:54:00:00:00:04"
	macUnknown = "52:54:00:00:00:99"
	httpBase   = "http://10.9.0.1:6385"
)

var nodes = fakeNodes{
	macBooting: {NodeUUID: "node-1", State: "clean wait", Booting: true},
	macSecure:  {NodeUUID: "node-2", State: "deploying", Booting: true, SecureBoot: true},
	macActive:  {NodeUUID: "node-3", State: "active"},
	macOther:   {NodeUUID: "node-4", State: "inspect wait", Booting: true},
}

// client builds requests as each firmware kind sends them.
func request(t testing.TB, mt dhcpv4.MessageType, mac string, kind Kind, mods ...dhcpv4.Modifier) *dhcpv4.DHCPv4 {
	hw, err := net.ParseMAC(mac)
	require.NoError(t, err)
	m := []dhcpv4.Modifier{dhcpv4.WithMessageType(mt)}
	switch kind {
	case KindBIOS:
		m = append(m, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001")),
			dhcpv4.WithGeneric(dhcpv4.OptionClientSystemArchitectureType, []byte{0, 0}),
			dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, append([]byte{0}, make([]byte, 16)...)))
	case KindUEFI:
		m = append(m, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00007:UNDI:003001")),
			dhcpv4.WithGeneric(dhcpv4.OptionClientSystemArchitectureType, []byte{0, 7}))
	case KindUEFIHTTP:
		m = append(m, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("HTTPClient:Arch:00016:UNDI:003001")),
			dhcpv4.WithGeneric(dhcpv4.OptionClientSystemArchitectureType, []byte{0, 16}))
	case KindIPXE:
		m = append(m, dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00000:UNDI:002001")),
			dhcpv4.WithGeneric(dhcpv4.OptionUserClassInformation, []byte("iPXE")))
	}
	d, err := dhcpv4.NewDiscovery(hw, append(m, mods...)...)
	require.NoError(t, err)
	return d
}

func TestClassify(t *testing.T) {
	for _, k := range []Kind{KindOther, KindBIOS, KindUEFI, KindUEFIHTTP, KindIPXE} {
		assert.Equal(t, k, classify(request(t, dhcpv4.MessageTypeDiscover, macBooting, k)), k.String())
	}
	arm := request(t, dhcpv4.MessageTypeDiscover, macBooting, KindOther,
		dhcpv4.WithOption(dhcpv4.OptClassIdentifier("PXEClient:Arch:00011:UNDI:003000")),
		dhcpv4.WithGeneric(dhcpv4.OptionClientSystemArchitectureType, []byte{0, 11}))
	assert.Equal(t, KindOther, classify(arm), "no ARM binaries: not answered with x86 ones")
}

func newResponder(t testing.TB, mode Mode, h *history, mods ...func(*Config)) *Responder {
	t.Helper()
	cfg := Config{Mode: mode, ServerIP: netip.MustParseAddr("10.9.0.1"), Netmask: net.CIDRMask(24, 32),
		HTTPBase: httpBase, Nodes: nodes, Record: h.record, Logger: slog.New(slog.DiscardHandler)}
	for _, m := range mods {
		m(&cfg)
	}
	r, err := NewResponder(cfg)
	require.NoError(t, err)
	return r
}

// Proxy mode: boot information per firmware kind, never an address.
func TestProxyReplies(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		kind   Kind
		mac    string
		file   string
		vendor string
	}{
		{KindBIOS, macBooting, "undionly.kpxe", "PXEClient"},
		{KindUEFI, macBooting, "snponly.efi", "PXEClient"},
		{KindUEFIHTTP, macBooting, httpBase + "/v1/boot/files/ipxe.efi", "HTTPClient"},
		{KindIPXE, macBooting, httpBase + "/v1/boot/node-1/ipxe", "PXEClient"},
		{KindUEFI, macSecure, "shimx64.efi", "PXEClient"},
	}
	for _, tc := range cases {
		t.Run(tc.kind.String()+" "+tc.mac, func(t *testing.T) {
			h := &history{}
			r := newResponder(t, ModeProxy, h)
			req := request(t, dhcpv4.MessageTypeDiscover, tc.mac, tc.kind)
			resp, err := r.Respond(ctx, req, false)
			require.NoError(t, err)
			require.NotNil(t, resp)
			assert.Equal(t, dhcpv4.MessageTypeOffer, resp.MessageType())
			assert.Equal(t, req.TransactionID, resp.TransactionID)
			assert.True(t, resp.YourIPAddr.IsUnspecified(), "proxyDHCP gives no address")
			assert.Nil(t, resp.Options.Get(dhcpv4.OptionIPAddressLeaseTime))
			assert.Equal(t, "10.9.0.1", resp.ServerIPAddr.String())
			assert.Equal(t, "10.9.0.1", resp.ServerIdentifier().String())
			assert.Equal(t, tc.file, resp.BootFileName)
			assert.Equal(t, tc.vendor, resp.ClassIdentifier())
			if tc.vendor == "PXEClient" {
				assert.Equal(t, []byte{6, 1, 8, 255}, resp.Options.Get(dhcpv4.OptionVendorSpecificInformation))
			}
			if tc.kind == KindBIOS {
				assert.Len(t, resp.Options.Get(dhcpv4.OptionClientMachineIdentifier), 17, "GUID echoed")
			}
			// The PXE client's REQUEST to port 4011 gets the same boot file in an ACK.
			req4011 := request(t, dhcpv4.MessageTypeRequest, tc.mac, tc.kind)
			ack, err := r.Respond(ctx, req4011, true)
			require.NoError(t, err)
			require.NotNil(t, ack)
			assert.Equal(t, dhcpv4.MessageTypeAck, ack.MessageType())
			assert.Equal(t, tc.file, ack.BootFileName)
			// A REQUEST on port 67 is for the site's DHCP server.
			resp, err = r.Respond(ctx, request(t, dhcpv4.MessageTypeRequest, tc.mac, tc.kind), false)
			require.NoError(t, err)
			assert.Nil(t, resp)
			lines := h.all()
			require.Len(t, lines, 2)
			assert.Contains(t, lines[0], "proxyDHCP OFFER to "+tc.kind.String())
			assert.Contains(t, lines[0], tc.file)
		})
	}
}

// Strangers and nodes the controller is not booting get nothing; the
// latter have it said in their history, once per minute of retries.
func TestSecureBootOverHTTPNotAnswered(t *testing.T) {
	h := &history{}
	r := newResponder(t, ModeProxy, h)
	resp, err := r.Respond(context.Background(), request(t, dhcpv4.MessageTypeDiscover, macSecure, KindUEFIHTTP), false)
	require.NoError(t, err)
	assert.Nil(t, resp)
	require.Len(t, h.all(), 1)
	assert.Contains(t, h.all()[0], "node-2 WARNING boot service: UEFI HTTP boot firmware of port "+macSecure+" asked to boot; Secure Boot over UEFI HTTP boot is not supported")
}

func TestIgnored(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []Mode{ModeProxy, ModeFull} {
		h := &history{}
		r := newResponder(t, mode, h, withSQLite(t, filepath.Join(t.TempDir(), "a.db")))
		for range 3 {
			for _, mac := range []string{macUnknown, macActive} {
				for _, k := range []Kind{KindBIOS, KindUEFI, KindIPXE, KindOther} {
					resp, err := r.Respond(ctx, request(t, dhcpv4.MessageTypeDiscover, mac, k), false)
					require.NoError(t, err)
					assert.Nil(t, resp, "%s %s", mac, k)
				}
			}
		}
		lines := h.all()
		require.Len(t, lines, 3, "one line per firmware kind of the active node: %v", lines)
		for _, l := range lines {
			assert.Contains(t, l, "node-3 WARNING")
			assert.Contains(t, l, "not answered: the node is active")
		}
		// Proxy mode leaves non-PXE clients of booting nodes to the site's server.
		if mode == ModeProxy {
			resp, err := r.Respond(ctx, request(t, dhcpv4.MessageTypeDiscover, macOther, KindOther), false)
			require.NoError(t, err)
			assert.Nil(t, resp)
		}
	}
}

func withSQLite(t testing.TB, path string) func(*Config) { return withStore(openSQLite(t, path)) }

func openSQLite(t testing.TB, path string) *sqlite.Store {
	st, err := sqlite.Open(context.Background(), path)
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

func withStore(st LeaseStore) func(*Config) {
	return func(c *Config) {
		c.Leases = st
		c.Range = Range{netip.MustParseAddr("10.9.0.1"), netip.MustParseAddr("10.9.0.4")}
	}
}

// unlimited lifts the rate limits, for tests of what lies behind them.
func unlimited(c *Config) {
	c.Limits = Limits{PerMAC: 1e9, PerMACBurst: 1 << 30, Discovery: 1e9, DiscoveryBurst: 1 << 30}
}

// exchange runs DISCOVER → OFFER → REQUEST → ACK and returns the ACK.
func exchange(t *testing.T, r *Responder, mac string, kind Kind) *dhcpv4.DHCPv4 {
	t.Helper()
	ctx := context.Background()
	offer, err := r.Respond(ctx, request(t, dhcpv4.MessageTypeDiscover, mac, kind), false)
	require.NoError(t, err)
	require.NotNil(t, offer, "no offer for %s", mac)
	require.Equal(t, dhcpv4.MessageTypeOffer, offer.MessageType())
	req := request(t, dhcpv4.MessageTypeRequest, mac, kind,
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(offer.YourIPAddr)),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(offer.ServerIdentifier())))
	ack, err := r.Respond(ctx, req, false)
	require.NoError(t, err)
	require.NotNil(t, ack)
	require.Equal(t, dhcpv4.MessageTypeAck, ack.MessageType())
	require.Equal(t, offer.YourIPAddr.String(), ack.YourIPAddr.String())
	return ack
}

func TestFullMode(t *testing.T) {
	ctx := context.Background()
	db := filepath.Join(t.TempDir(), "anvil.db")
	h := &history{}
	now := time.Unix(1_800_000_000, 0)
	clock := func(c *Config) { c.Now = func() time.Time { return now } }
	st, err := sqlite.Open(ctx, db)
	require.NoError(t, err)
	addressed := map[string]string{}
	r := newResponder(t, ModeFull, h, withStore(st), clock, func(c *Config) {
		c.Addressed = func(a netip.Addr, node string) { addressed[a.String()] = node }
	})

	ack := exchange(t, r, macBooting, KindBIOS)
	assert.Equal(t, "10.9.0.2", ack.YourIPAddr.String(), "the first address after the server's own")
	assert.Equal(t, "undionly.kpxe", ack.BootFileName)
	assert.Equal(t, "PXEClient", ack.ClassIdentifier())
	assert.Equal(t, net.CIDRMask(24, 32), ack.SubnetMask())
	assert.Equal(t, time.Hour, ack.IPAddressLeaseTime(0))
	assert.Contains(t, h.all()[0], "node-1 INFO boot service: DHCP ACK to BIOS PXE of port "+macBooting+": address 10.9.0.2; boot file undionly.kpxe over TFTP from 10.9.0.1")
	assert.Equal(t, map[string]string{"10.9.0.2": "node-1"}, addressed, "the TFTP side learns who is at the address")

	// iPXE from the same port keeps the address and is sent to its script.
	ack = exchange(t, r, macBooting, KindIPXE)
	assert.Equal(t, "10.9.0.2", ack.YourIPAddr.String())
	assert.Equal(t, httpBase+"/v1/boot/node-1/ipxe", ack.BootFileName)
	// The agent's own DHCP client gets the address and no boot file.
	ack = exchange(t, r, macBooting, KindOther)
	assert.Equal(t, "10.9.0.2", ack.YourIPAddr.String())
	assert.Empty(t, ack.BootFileName)
	assert.Empty(t, ack.ClassIdentifier())

	// Another node gets another address.
	ack = exchange(t, r, macOther, KindUEFI)
	assert.Equal(t, "10.9.0.3", ack.YourIPAddr.String())
	assert.Equal(t, "snponly.efi", ack.BootFileName)

	// Asking for another node's address is refused.
	steal := request(t, dhcpv4.MessageTypeRequest, macSecure, KindUEFI,
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP("10.9.0.2"))))
	nak, err := r.Respond(ctx, steal, false)
	require.NoError(t, err)
	require.NotNil(t, nak)
	assert.Equal(t, dhcpv4.MessageTypeNak, nak.MessageType())
	// A REQUEST naming another server is not ours to answer.
	other := request(t, dhcpv4.MessageTypeRequest, macSecure, KindUEFI,
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP("10.9.0.4"))),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.ParseIP("10.9.0.254"))))
	resp, err := r.Respond(ctx, other, false)
	require.NoError(t, err)
	assert.Nil(t, resp)

	// A restarted controller on the same database: the leases hold.
	require.NoError(t, st.Close())
	r2 := newResponder(t, ModeFull, h, withSQLite(t, db), clock)
	ack = exchange(t, r2, macOther, KindIPXE)
	assert.Equal(t, "10.9.0.3", ack.YourIPAddr.String())
	ack = exchange(t, r2, macSecure, KindUEFI)
	assert.Equal(t, "10.9.0.4", ack.YourIPAddr.String())
	assert.Equal(t, "shimx64.efi", ack.BootFileName)

	// Range exhausted (3 usable addresses): a fourth node gets nothing, and is told why.
	fourth := fakeNodes{"52:54:00:00:00:05": {NodeUUID: "node-5", State: "cleaning", Booting: true}}
	for k, v := range nodes {
		fourth[k] = v
	}
	r3 := newResponder(t, ModeFull, h, withStore(r2.cfg.Leases), clock, func(c *Config) { c.Nodes = fourth })
	resp, err = r3.Respond(ctx, request(t, dhcpv4.MessageTypeDiscover, "52:54:00:00:00:05", KindBIOS), false)
	require.NoError(t, err)
	assert.Nil(t, resp)
	assert.Contains(t, h.all()[len(h.all())-1], "node-5 WARNING boot service: DHCP DISCOVER from BIOS PXE firmware of port 52:54:00:00:00:05 not answered: no free address")

	// Once a lease has run out, its address may go to someone else.
	now = now.Add(2 * time.Hour)
	ack = exchange(t, r3, "52:54:00:00:00:05", KindBIOS)
	assert.Equal(t, "10.9.0.2", ack.YourIPAddr.String(), "the longest-expired lease is reused first")
}

func TestParseRange(t *testing.T) {
	r, err := ParseRange("10.0.0.100-10.0.0.199")
	require.NoError(t, err)
	assert.True(t, r.Contains(netip.MustParseAddr("10.0.0.150")))
	assert.False(t, r.Contains(netip.MustParseAddr("10.0.0.200")))
	for _, bad := range []string{"", "10.0.0.1", "10.0.0.9-10.0.0.1", "x-y", "::1-::2", "10.0.0.0-10.2.0.0"} {
		_, err := ParseRange(bad)
		assert.Error(t, err, bad)
	}
}

func TestDestination(t *testing.T) {
	peer := &net.UDPAddr{IP: net.ParseIP("10.9.0.50"), Port: 68}
	req := request(t, dhcpv4.MessageTypeDiscover, macBooting, KindBIOS)
	offer, _ := dhcpv4.NewReplyFromRequest(req, dhcpv4.WithMessageType(dhcpv4.MessageTypeOffer))
	assert.Equal(t, "255.255.255.255:68", destination(req, offer, peer, false).String())
	assert.Equal(t, peer, destination(req, offer, peer, true))
	renew := request(t, dhcpv4.MessageTypeRequest, macBooting, KindOther, dhcpv4.WithClientIP(net.ParseIP("10.9.0.2")))
	ack, _ := dhcpv4.NewReplyFromRequest(renew, dhcpv4.WithMessageType(dhcpv4.MessageTypeAck))
	assert.Equal(t, "10.9.0.2:68", destination(renew, ack, peer, false).String())
	relayed := request(t, dhcpv4.MessageTypeDiscover, macBooting, KindBIOS, dhcpv4.WithGatewayIP(net.ParseIP("10.1.0.1")))
	assert.Equal(t, "10.1.0.1:67", destination(relayed, offer, peer, false).String())
}

func ExampleParseRange() {
	r, _ := ParseRange("192.168.50.100-192.168.50.199")
	fmt.Println(r.First, r.Last)
	// Output: 192.168.50.100 192.168.50.199
}

// BenchmarkRespondFull: DISCOVER+REQUEST handling of one client (no
// network), full mode on a SQLite file: the server's own cost per client.
func BenchmarkRespondFull(b *testing.B) {
	ctx := context.Background()
	many := fakeNodes{}
	for i := range 250 {
		many[fmt.Sprintf("52:54:00:00:01:%02x", i)] = Target{NodeUUID: fmt.Sprint("n", i), State: "clean wait", Booting: true}
	}
	r := newResponder(b, ModeFull, &history{}, withSQLite(b, filepath.Join(b.TempDir(), "a.db")), func(c *Config) {
		c.Nodes = many
		c.Range = Range{netip.MustParseAddr("10.9.0.2"), netip.MustParseAddr("10.9.0.251")}
	}, unlimited) // each MAC asks far more often than a PXE ROM: measure the server's cost
	b.ResetTimer()
	for i := range b.N {
		mac := fmt.Sprintf("52:54:00:00:01:%02x", i%250)
		offer, err := r.Respond(ctx, request(b, dhcpv4.MessageTypeDiscover, mac, KindBIOS), false)
		if err != nil || offer == nil {
			b.Fatal(err)
		}
		req := request(b, dhcpv4.MessageTypeRequest, mac, KindBIOS, dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(offer.YourIPAddr)))
		if ack, err := r.Respond(ctx, req, false); err != nil || ack == nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(2*b.N)/b.Elapsed().Seconds(), "replies/s")
}
