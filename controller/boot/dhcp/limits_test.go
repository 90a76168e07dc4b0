package dhcp

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store/sqlite"
)

// tryExchange is DISCOVER, then REQUEST of what was offered: the ACK, or
// nil where either went unanswered (or was refused).
func tryExchange(t *testing.T, r *Responder, mac string, kind Kind) *dhcpv4.DHCPv4 {
	t.Helper()
	ctx := context.Background()
	offer, err := r.Respond(ctx, request(t, dhcpv4.MessageTypeDiscover, mac, kind), false)
	require.NoError(t, err)
	if offer == nil {
		return nil
	}
	ack, err := r.Respond(ctx, request(t, dhcpv4.MessageTypeRequest, mac, kind,
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(offer.YourIPAddr)),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(offer.ServerIdentifier()))), false)
	require.NoError(t, err)
	if ack == nil || ack.MessageType() != dhcpv4.MessageTypeAck {
		return nil
	}
	return ack
}

func madeUpMAC(i int) string { return fmt.Sprintf("02:00:00:00:%02x:%02x", i>>8&0xff, i&0xff) }

// drops counts what a responder's Dropped hook is told.
type drops struct {
	mu sync.Mutex
	n  map[string]int
}

func (d *drops) hook(c *Config) {
	c.Dropped = func(reason string) {
		d.mu.Lock()
		defer d.mu.Unlock()
		if d.n == nil {
			d.n = map[string]int{}
		}
		d.n[reason]++
	}
}

func (d *drops) of(reason string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[reason]
}

// clock is a settable Config.Now.
type clock struct{ now time.Time }

func (c *clock) set(cfg *Config) { cfg.Now = func() time.Time { return c.now } }

var (
	tenAddresses = Range{netip.MustParseAddr("10.9.0.10"), netip.MustParseAddr("10.9.0.19")}
	topTwo       = Range{netip.MustParseAddr("10.9.0.18"), netip.MustParseAddr("10.9.0.19")}
)

// discoveryFull is a full-mode responder with discovery on over the ten
// addresses 10.9.0.10-19, leases in st.
func discoveryFull(t *testing.T, st LeaseStore, mods ...func(*Config)) *Responder {
	return newResponder(t, ModeFull, &history{}, append([]func(*Config){withStore(st), func(c *Config) {
		c.Nodes = discoveryNodes{nodes}
		c.Range = tenAddresses
	}}, mods...)...)
}

func openStore(t *testing.T) *sqlite.Store { return openSQLite(t, filepath.Join(t.TempDir(), "a.db")) }

// TestDiscoveryFloodReplay replays issue #30 finding 3: in full mode with
// discovery on, made-up MACs each sending a PXE DISCOVER then a REQUEST
// took every address of a ten-address range for an hour, and an enrolled
// node being cleaned then got none. Now they get addresses only from the
// discovery share (25 %: the top two) with short leases, and the node
// still gets one.
func TestDiscoveryFloodReplay(t *testing.T) {
	clk := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	d := &drops{}
	r := discoveryFull(t, openStore(t), clk.set, d.hook)
	var got []string
	for i := range 12 {
		ack := tryExchange(t, r, madeUpMAC(i), KindBIOS)
		if ack == nil {
			continue
		}
		a, _ := netip.AddrFromSlice(ack.YourIPAddr.To4())
		got = append(got, a.String())
		assert.True(t, topTwo.Contains(a), "made-up MAC %s got %s, outside the discovery share", madeUpMAC(i), a)
		assert.Equal(t, 5*time.Minute, ack.IPAddressLeaseTime(0), "a short lease until the machine reports")
	}
	assert.Len(t, got, 2, "only the share's two addresses go to unknown MACs: %v", got)
	assert.Equal(t, 10, d.of("discovery_share_full"), "each unanswered DISCOVER is counted")

	ack := tryExchange(t, r, macBooting, KindBIOS)
	require.NotNil(t, ack, "the enrolled node being cleaned still gets an address")
	assert.Equal(t, "10.9.0.10", ack.YourIPAddr.String(), "from the part of the range discovery cannot take")
	assert.Equal(t, time.Hour, ack.IPAddressLeaseTime(0))

	// A made-up MAC asking straight for an address outside the share
	// (no DISCOVER) is refused too.
	nak, err := r.Respond(context.Background(), request(t, dhcpv4.MessageTypeRequest, madeUpMAC(99), KindBIOS,
		dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(net.ParseIP("10.9.0.11")))), false)
	require.NoError(t, err)
	require.NotNil(t, nak)
	assert.Equal(t, dhcpv4.MessageTypeNak, nak.MessageType())

	// The short leases run out: the share serves new machines again.
	clk.now = clk.now.Add(6 * time.Minute)
	ack = tryExchange(t, r, madeUpMAC(200), KindBIOS)
	require.NotNil(t, ack)
	assert.Contains(t, []string{"10.9.0.18", "10.9.0.19"}, ack.YourIPAddr.String())
}

// TestDiscoveryShareAcrossControllers: two controllers on one lease table
// (as on PostgreSQL) derive the same share from the range, so together
// they still give made-up MACs no more than it.
func TestDiscoveryShareAcrossControllers(t *testing.T) {
	clk := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	st := openStore(t)
	both := []*Responder{discoveryFull(t, st, clk.set), discoveryFull(t, st, clk.set)}
	given := map[string]bool{}
	for i := range 20 {
		if ack := tryExchange(t, both[i%2], madeUpMAC(i), KindUEFI); ack != nil {
			given[ack.YourIPAddr.String()] = true
		}
	}
	assert.Equal(t, map[string]bool{"10.9.0.18": true, "10.9.0.19": true}, given)
	leases, err := st.ListDHCPLeases(context.Background())
	require.NoError(t, err)
	require.Len(t, leases, 2)
	for _, l := range leases {
		assert.Equal(t, clk.now.Add(5*time.Minute), l.ExpiresAt.UTC(), "stored with the short lease")
	}
	for i, mac := range []string{macBooting, macOther} {
		ack := tryExchange(t, both[i], mac, KindBIOS)
		require.NotNil(t, ack, mac)
		assert.Equal(t, fmt.Sprintf("10.9.0.1%d", i), ack.YourIPAddr.String())
	}
}

// TestEnrolledNodesUseTheWholeRange: enrolled nodes take the part before
// the share first, then the share itself.
func TestEnrolledNodesUseTheWholeRange(t *testing.T) {
	many := fakeNodes{}
	for i := range 10 {
		many[madeUpMAC(i)] = Target{NodeUUID: fmt.Sprint("n", i), State: "clean wait", Booting: true}
	}
	r := discoveryFull(t, openStore(t), func(c *Config) { c.Nodes = discoveryNodes{many} })
	for i := range 10 {
		ack := tryExchange(t, r, madeUpMAC(i), KindBIOS)
		require.NotNil(t, ack, "node %d", i)
		assert.Equal(t, fmt.Sprintf("10.9.0.1%d", i), ack.YourIPAddr.String())
		assert.Equal(t, time.Hour, ack.IPAddressLeaseTime(0))
	}
}

// TestRateLimits: a burst from one MAC gets at most the bucket's burst
// answered, more once it refills; new unknown MACs are answered at the
// discovery rate over all of them.
func TestRateLimits(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name     string
		mode     Mode
		macs     func(i int) string // the i-th DISCOVER's MAC
		limits   Limits
		answered int
		reason   string
	}{
		{"one MAC, proxy", ModeProxy, func(int) string { return macBooting }, Limits{}, 20, "rate"},
		{"one MAC, full", ModeFull, func(int) string { return macBooting }, Limits{}, 20, "rate"},
		{"one MAC, own burst", ModeProxy, func(int) string { return macBooting }, Limits{PerMACBurst: 3}, 3, "rate"},
		{"unknown MACs, proxy", ModeProxy, madeUpMAC, Limits{}, 20, "discovery_rate"},
		{"unknown MACs, own rate", ModeProxy, madeUpMAC, Limits{DiscoveryBurst: 5}, 5, "discovery_rate"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			clk := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
			d := &drops{}
			h := &history{}
			r := newResponder(t, tc.mode, h, withSQLite(t, filepath.Join(t.TempDir(), "a.db")), clk.set, d.hook,
				func(c *Config) { c.Nodes, c.Limits = discoveryNodes{nodes}, tc.limits })
			answered := 0
			for i := range 100 {
				resp, err := r.Respond(ctx, request(t, dhcpv4.MessageTypeDiscover, tc.macs(i), KindBIOS), false)
				require.NoError(t, err)
				if resp != nil {
					answered++
				}
			}
			assert.Equal(t, tc.answered, answered, "a burst of 100: the first %d answered", tc.answered)
			assert.Equal(t, 100-tc.answered, d.of(tc.reason))
			if tc.reason == "rate" {
				notes := 0
				for _, l := range h.all() {
					if strings.Contains(l, "DHCP packets of port "+macBooting+" are ignored") {
						notes++
					}
				}
				assert.Equal(t, 1, notes, "the node's history says once that its port's packets are ignored")
			}
			// Those answered are not charged again for being new.
			resp, err := r.Respond(ctx, request(t, dhcpv4.MessageTypeRequest, tc.macs(0), KindBIOS), true)
			require.NoError(t, err)
			if tc.reason == "discovery_rate" {
				assert.NotNil(t, resp, "an unknown MAC already answered goes on")
			}
			clk.now = clk.now.Add(time.Second)
			resp, err = r.Respond(ctx, request(t, dhcpv4.MessageTypeDiscover, tc.macs(100), KindBIOS), false)
			require.NoError(t, err)
			assert.NotNil(t, resp, "a second later the bucket has refilled a little")
			resp, err = r.Respond(ctx, request(t, dhcpv4.MessageTypeDiscover, macOther, KindBIOS), false)
			require.NoError(t, err)
			assert.NotNil(t, resp, "an enrolled node is not held back by either")
		})
	}
}

// TestLimitTablesBounded: a flood of made-up MACs leaves every table of
// the responder bounded.
func TestLimitTablesBounded(t *testing.T) {
	clk := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	r := newResponder(t, ModeProxy, &history{}, clk.set, unlimited, func(c *Config) { c.Nodes = discoveryNodes{nodes} })
	for i := range maxClients + maxDiscovering + 100 {
		mac := net.HardwareAddr{2, 1, 0, byte(i >> 16), byte(i >> 8), byte(i)}.String()
		_, err := r.Respond(context.Background(), request(t, dhcpv4.MessageTypeDiscover, mac, KindUEFI), false)
		require.NoError(t, err)
	}
	assert.LessOrEqual(t, r.perMAC.Len(), maxClients)
	assert.LessOrEqual(t, len(r.discovering), maxDiscovering)
	assert.LessOrEqual(t, r.recorded.Len(), maxRecorded)
}

func TestSplitRange(t *testing.T) {
	a := netip.MustParseAddr
	cases := []struct {
		name        string
		r           Range
		pct         float64
		server      netip.Addr
		main, share Range
	}{
		{"ten at 25 %", tenAddresses, 25, a("10.9.0.1"), Range{a("10.9.0.10"), a("10.9.0.17")}, topTwo},
		{"at least one", tenAddresses, 1, a("10.9.0.1"), Range{a("10.9.0.10"), a("10.9.0.18")}, Range{a("10.9.0.19"), a("10.9.0.19")}},
		{"the server's address does not count", tenAddresses, 25, a("10.9.0.19"), Range{a("10.9.0.10"), a("10.9.0.16")}, Range{a("10.9.0.17"), a("10.9.0.19")}},
		{"all of it", tenAddresses, 100, a("10.9.0.1"), Range{}, tenAddresses},
		{"one address", Range{a("10.9.0.5"), a("10.9.0.5")}, 25, a("10.9.0.1"), Range{}, Range{a("10.9.0.5"), a("10.9.0.5")}},
		{"a /24 at 25 %", Range{a("10.9.0.1"), a("10.9.0.254")}, 25, a("10.9.0.1"), Range{a("10.9.0.1"), a("10.9.0.191")}, Range{a("10.9.0.192"), a("10.9.0.254")}},
		{"up to the top", Range{a("255.255.255.250"), a("255.255.255.255")}, 50, a("10.9.0.1"), Range{a("255.255.255.250"), a("255.255.255.252")}, Range{a("255.255.255.253"), a("255.255.255.255")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			main, share := splitRange(tc.r, tc.pct, tc.server)
			assert.Equal(t, tc.main, main)
			assert.Equal(t, tc.share, share)
		})
	}
}

func TestDiscoveryConfig(t *testing.T) {
	cases := []struct {
		name  string
		share float64
		lease time.Duration
		err   string
	}{
		{"defaults", 0, 0, ""},
		{"all", 100, time.Minute, ""},
		{"negative share", -1, 0, "discovery share"},
		{"over 100", 101, 0, "discovery share"},
		{"negative lease", 0, -time.Second, "discovery lease"},
		{"longer than the lease", 0, 2 * time.Hour, "discovery lease"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewResponder(Config{Mode: ModeProxy, ServerIP: netip.MustParseAddr("10.9.0.1"), Nodes: nodes,
				DiscoveryShare: tc.share, DiscoveryLease: tc.lease})
			if tc.err == "" {
				assert.NoError(t, err)
			} else {
				assert.ErrorContains(t, err, tc.err)
			}
		})
	}
}
