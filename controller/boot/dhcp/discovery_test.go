package dhcp

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// discoveryNodes is nodes with discovery on: a MAC no port has is a
// machine to discover (as the boot service's storeNodes answers).
type discoveryNodes struct{ fakeNodes }

func (d discoveryNodes) BootTarget(ctx context.Context, mac string) (Target, error) {
	if t, ok := d.fakeNodes[mac]; ok {
		return t, nil
	}
	return Target{MAC: mac, Discovery: true, Booting: true, State: "unknown (discovery)"}, nil
}

func TestDiscoveryReplies(t *testing.T) {
	ctx := context.Background()
	withDiscovery := func(c *Config) { c.Nodes = discoveryNodes{nodes} }

	t.Run("proxy", func(t *testing.T) {
		h := &history{}
		r := newResponder(t, ModeProxy, h, withDiscovery)
		for kind, file := range map[Kind]string{KindBIOS: FileIPXEBIOS, KindUEFI: FileIPXEUEFI,
			KindUEFIHTTP: httpBase + "/v1/boot/files/ipxe.efi", KindIPXE: httpBase + "/v1/boot/" + macUnknown + "/ipxe"} {
			resp, err := r.Respond(ctx, request(t, dhcpv4.MessageTypeDiscover, macUnknown, kind), false)
			require.NoError(t, err)
			require.NotNil(t, resp, kind.String())
			assert.Equal(t, file, resp.BootFileName, "iPXE chains to the discovery script by MAC")
		}
		// An enrolled node the controller is not booting stays unanswered:
		// discovery never boots a known machine.
		resp, err := r.Respond(ctx, request(t, dhcpv4.MessageTypeDiscover, macActive, KindBIOS), false)
		require.NoError(t, err)
		assert.Nil(t, resp)
		for _, l := range h.all() {
			assert.Contains(t, l, "node-3", "no history line without a node: %s", l)
		}
	})

	t.Run("full", func(t *testing.T) {
		now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
		h := &history{}
		r := newResponder(t, ModeFull, h, withDiscovery, withSQLite(t, filepath.Join(t.TempDir(), "a.db")),
			func(c *Config) { c.Now = func() time.Time { return now } })
		// A laptop on the network (non-PXE, never booted from us) gets nothing.
		resp, err := r.Respond(ctx, request(t, dhcpv4.MessageTypeDiscover, "52:54:00:00:00:77", KindOther), false)
		require.NoError(t, err)
		assert.Nil(t, resp)
		// The unknown machine's firmware is answered with an address and
		// iPXE; then its ramdisk's own DHCP client gets an address too.
		ack := exchange(t, r, macUnknown, KindBIOS)
		assert.Equal(t, FileIPXEBIOS, ack.BootFileName)
		ack = exchange(t, r, macUnknown, KindOther)
		assert.Empty(t, ack.BootFileName)
		// Long after, its non-PXE client is a stranger again.
		now = now.Add(discoveryWindow + time.Minute)
		resp, err = r.Respond(ctx, request(t, dhcpv4.MessageTypeDiscover, macUnknown, KindOther), false)
		require.NoError(t, err)
		assert.Nil(t, resp)
	})
}

// Without discovery (the default) unknown MACs get nothing: TestIgnored.
