package dhcp

import (
	"context"
	"net/netip"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FuzzRespond feeds arbitrary datagrams through the DHCP parser and both
// modes of the responder: nothing panics, and nothing is ever answered
// except to an enrolled MAC whose node is booting.
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
	proxy := newResponder(f, ModeProxy, h)
	full := newResponder(f, ModeFull, h, withSQLite(f, ":memory:"))
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
	})
}
