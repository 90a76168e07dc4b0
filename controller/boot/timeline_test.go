package boot

import (
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/anvil-metal/anvil/controller/boot/tftp"
)

// fakeTimeline collects what the service records; it sits beside the
// Timeline interface it fakes.
type fakeTimeline struct {
	stages  []string
	learned map[netip.Addr]string
}

func (f *fakeTimeline) Record(node, stage, detail, outcome string) {
	f.stages = append(f.stages, node+" | "+stage+" | "+detail+" | "+outcome)
}

func (f *fakeTimeline) Learn(addr netip.Addr, node string) { f.learned[addr] = node }

// A known address's transfers go into its node's timeline (bytes and
// duration, or why they failed); the address is handed on for the HTTP
// downloads; strangers and size probes are recorded nowhere.
func TestHostBookTimeline(t *testing.T) {
	tl := &fakeTimeline{learned: map[netip.Addr]string{}}
	h := &hostBook{nodes: map[netip.Addr]string{}, timeline: tl}
	h.learn(netip.MustParseAddr("10.0.0.5"), "node-1")
	assert.Equal(t, map[netip.Addr]string{netip.MustParseAddr("10.0.0.5"): "node-1"}, tl.learned)
	h.transfer(tftp.Transfer{Remote: netip.MustParseAddrPort("10.0.0.5:2070"), File: "snponly.efi", Bytes: 173792, Duration: 1500 * time.Millisecond})
	h.transfer(tftp.Transfer{Remote: netip.MustParseAddrPort("10.0.0.5:2071"), File: "undionly.kpxe", Bytes: 512, Duration: time.Second, Err: errors.New("client stalled")})
	h.transfer(tftp.Transfer{Remote: netip.MustParseAddrPort("10.0.0.6:2070"), File: "snponly.efi"})
	h.transfer(tftp.Transfer{Remote: netip.MustParseAddrPort("10.0.0.5:2072"), File: "snponly.efi", Err: tftp.ErrSizeProbe})
	assert.Equal(t, []string{
		"node-1 | tftp | snponly.efi to 10.0.0.5 (173792 bytes, 1.5s) | ok",
		"node-1 | tftp | undionly.kpxe to 10.0.0.5 (512 bytes sent, 1s) | failed: client stalled",
	}, tl.stages)
}
