package lldp

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/protocol"
)

func TestPluginData(t *testing.T) {
	tlvs, err := ParseFrame(frame(t, "lldpd-1.0.16-ifname.hex"))
	require.NoError(t, err)
	inv := protocol.Inventory{Boot: protocol.BootInfo{PXEInterface: "52:54:00:12:34:56"}, Interfaces: []protocol.NIC{
		{Name: "eth0", MACAddress: "52:54:00:12:34:56", HasCarrier: true, LLDP: tlvs},
		{Name: "eth1", MACAddress: "52:54:00:12:34:57"},
		{Name: "", MACAddress: "52:54:00:12:34:58"},
		{Name: "bad0", MACAddress: "nope"},
	}}
	pd := PluginData(inv)
	all := pd["all_interfaces"].(map[string]any)
	assert.Len(t, all, 2)
	eth0 := all["eth0"].(map[string]any)
	assert.Equal(t, true, eth0["pxe_enabled"])
	assert.Equal(t, false, all["eth1"].(map[string]any)["pxe_enabled"])
	assert.Equal(t, "vA", eth0["lldp_processed"].(map[string]any)["switch_port_id"])
	assert.NotNil(t, eth0["lldp"], "the raw TLVs stay, as in the inventory")
	assert.Equal(t, map[string]any{"eth0": eth0["lldp_processed"]}, pd["parsed_lldp"])
	assert.NotContains(t, PluginData(protocol.Inventory{}), "parsed_lldp")

	llc, added := PortLocalLinkConnection(nil, tlvs)
	assert.True(t, added)
	assert.Equal(t, map[string]any{"switch_id": "52:54:00:5e:00:01", "port_id": "vA", "switch_info": "sw-rack7"}, llc)
	llc, added = PortLocalLinkConnection(map[string]any{"port_id": "Ethernet1/7"}, tlvs)
	assert.True(t, added)
	assert.Equal(t, "Ethernet1/7", llc["port_id"], "a value already set is kept")
	_, added = PortLocalLinkConnection(llc, tlvs)
	assert.False(t, added)
}
