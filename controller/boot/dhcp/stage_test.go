package dhcp

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store/sqlite"
)

// stages collects what the responder gives the boot timeline.
type stages []string

func (s *stages) stage(node, detail, outcome string) {
	*s = append(*s, node+" | "+detail+" | "+outcome)
}

// The boot timeline gets enrolled nodes' exchanges, what they asked
// (DISCOVER, REQUEST) as well as what was answered, with the file offered
// and the client's architecture (option 93), and why a node was not
// answered; a MAC no port has gets in nowhere.
func TestTimelineStages(t *testing.T) {
	ctx := context.Background()
	var got stages
	r := newResponder(t, ModeProxy, &history{}, func(c *Config) { c.Stage = got.stage })
	for _, mac := range []string{macBooting, macActive, macUnknown} {
		_, err := r.Respond(ctx, request(t, dhcpv4.MessageTypeDiscover, mac, KindUEFI), false)
		require.NoError(t, err)
	}
	_, err := r.Respond(ctx, request(t, dhcpv4.MessageTypeRequest, macBooting, KindUEFI), true)
	require.NoError(t, err)
	assert.Equal(t, stages{
		"node-1 | DISCOVER from UEFI PXE firmware of " + macBooting + " (arch EFI x86-64) | ",
		"node-1 | offered snponly.efi to " + macBooting + " (UEFI PXE, arch EFI x86-64; proxyDHCP OFFER) | ok",
		"node-3 | DISCOVER from UEFI PXE firmware of " + macActive + " | not answered: the node is active",
		"node-1 | REQUEST from UEFI PXE firmware of " + macBooting + " (arch EFI x86-64) | ",
		"node-1 | offered snponly.efi to " + macBooting + " (UEFI PXE, arch EFI x86-64; proxyDHCP ACK) | ok",
	}, got)

	st, err := sqlite.Open(ctx, filepath.Join(t.TempDir(), "anvil.db"))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	got = nil
	full := newResponder(t, ModeFull, &history{}, withStore(st), func(c *Config) { c.Stage = got.stage })
	exchange(t, full, macBooting, KindBIOS)
	exchange(t, full, macBooting, KindOther)
	assert.Equal(t, stages{
		"node-1 | DISCOVER from BIOS PXE firmware of " + macBooting + " (arch Intel x86PC) | ",
		"node-1 | offered undionly.kpxe to " + macBooting + " (BIOS PXE, arch Intel x86PC; OFFER of 10.9.0.2) | ok",
		"node-1 | REQUEST from BIOS PXE firmware of " + macBooting + " (arch Intel x86PC) | ",
		"node-1 | offered undionly.kpxe to " + macBooting + " (BIOS PXE, arch Intel x86PC; ACK of 10.9.0.2) | ok",
		"node-1 | DISCOVER from non-PXE client of " + macBooting + " | ",
		"node-1 | OFFER of 10.9.0.2 to " + macBooting + " (non-PXE client) | ok",
		"node-1 | REQUEST from non-PXE client of " + macBooting + " | ",
		"node-1 | ACK of 10.9.0.2 to " + macBooting + " (non-PXE client) | ok",
	}, got)
}
