package dhcp

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FuzzRespond feeds arbitrary datagrams through the DHCP parser and both
// modes of the responder: nothing panics, and nothing is ever answered
// except to an enrolled MAC whose node is booting. With discovery on, an
// unknown MAC is only ever given an address of the discovery share, with
// the short lease.
func FuzzRespond(f *testing.F) {
	for _, k := range []Kind{KindOther, KindBIOS, KindUEFI, KindUEFIHTTP, KindIPXE} {
		for _, mac := range []string{macBooting, macActive, macUnknown} {
			f.Add(request(f, dhcpv4.MessageTypeDiscover, mac, k).ToBytes(), false)
			f.Add(request(f, dhcpv4.MessageTypeRequest, mac, k,
				dhcpv4.WithOption(dhcpv4.OptRequestedIPAddress(netip.MustParseAddr("10.9.0.3").AsSlice()))).ToBytes(), true)
		}
	}
	f.Add([]byte{1, 1, 6, 0}, false)
	h := &history{}
	// Without rate limits: the same few MACs would soon be cut off, and
	// the answers behind the limits go unexplored.
	proxy := newResponder(f, ModeProxy, h, unlimited)
	full := newResponder(f, ModeFull, h, withSQLite(f, ":memory:"), unlimited)
	// Discovery over 10.9.0.1-4: the share is 10.9.0.4.
	disc := newResponder(f, ModeFull, h, withSQLite(f, ":memory:"), unlimited, func(c *Config) { c.Nodes = discoveryNodes{nodes} })
	ctx := context.Background()
	f.Fuzz(func(t *testing.T, b []byte, pxePort bool) {
		req, err := dhcpv4.FromBytes(b)
		if err != nil {
			return
		}
		for _, r := range []*Responder{proxy, full} {
			resp, err := r.Respond(ctx, req, pxePort)
			require.NoError(t, err)
			if resp == nil {
				continue
			}
			tgt, ok := nodes[req.ClientHWAddr.String()]
			assert.True(t, ok && tgt.Booting, "answered %s", req.ClientHWAddr)
			assert.Equal(t, req.TransactionID, resp.TransactionID)
			_, err = dhcpv4.FromBytes(resp.ToBytes())
			assert.NoError(t, err, "our reply must parse")
		}
		resp, err := disc.Respond(ctx, req, pxePort)
		require.NoError(t, err)
		if _, known := nodes[req.ClientHWAddr.String()]; resp == nil || known || resp.MessageType() == dhcpv4.MessageTypeNak {
			return
		}
		assert.Equal(t, "10.9.0.4", resp.YourIPAddr.String(), "an unknown MAC got an address outside the share")
		assert.Equal(t, 5*time.Minute, resp.IPAddressLeaseTime(0))
	})
}
