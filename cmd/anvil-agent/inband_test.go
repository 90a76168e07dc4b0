package main

import (
	"context"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/anvil-metal/anvil/hardware/ipmi"
	"github.com/anvil-metal/anvil/protocol"
)

func TestInbandFill(t *testing.T) {
	done := make(chan struct{})
	close(done)
	tlvs := []protocol.LLDPTLV{{Type: 1, Value: []byte{4, 0x52, 0x54, 0, 0x5e, 0, 1}}, {Type: 2, Value: []byte{5, 'v', 'A'}}}
	b := &inband{bmcDone: done, lldpDone: done, bmc: ipmi.LAN{Address: "192.0.2.45", MAC: "52:54:00:aa:bb:01", Channel: 1},
		lldp: map[string][]protocol.LLDPTLV{"eth0": tlvs}}
	inv := protocol.Inventory{Interfaces: []protocol.NIC{{Name: "eth0"}, {Name: "eth1"}}}
	b.fill(context.Background(), &inv)
	assert.Equal(t, "192.0.2.45", inv.BMCAddress)
	assert.Equal(t, "52:54:00:aa:bb:01", inv.BMCMAC)
	assert.Empty(t, inv.BMCV6Address)
	assert.Equal(t, protocol.LLDPTLVs(tlvs), inv.Interfaces[0].LLDP)
	assert.Nil(t, inv.Interfaces[1].LLDP)
	assert.Nil(t, inv.Extra)

	// Still collecting: the inventory waits no longer than its context.
	never := &inband{bmcDone: make(chan struct{}), lldpDone: make(chan struct{})}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	inv = protocol.Inventory{}
	never.fill(ctx, &inv)
	assert.Empty(t, inv.BMCAddress)

	var none *inband // a fixture root: nothing collected
	none.fill(context.Background(), &inv)
}

func TestReadBMCWithoutInBandIPMI(t *testing.T) {
	for _, p := range []string{"/dev/ipmi0", "/dev/ipmi/0", "/dev/ipmidev/0"} {
		if _, err := os.Stat(p); err == nil {
			t.Skipf("%s exists here", p)
		}
	}
	start := time.Now()
	lan, note := readBMC(context.Background(), slog.New(slog.DiscardHandler), false)
	assert.Equal(t, ipmi.LAN{}, lan)
	assert.Equal(t, "no in-band IPMI", note)
	assert.Less(t, time.Since(start), time.Second)
	done := make(chan struct{})
	close(done)
	inv := protocol.Inventory{}
	(&inband{bmcDone: done, lldpDone: done, bmcNote: note}).fill(context.Background(), &inv)
	assert.Equal(t, "no in-band IPMI", inv.Extra["bmc"])
}
