package agent

import (
	"context"
	"encoding/json"
	"net/netip"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/protocol"
)

// Network data as Ironic's docs and Nova's config drive write it.
const (
	ndStatic = `{
  "links": [{"id": "port0", "type": "phy", "ethernet_mac_address": "52:54:00:12:34:56", "mtu": 1500}],
  "networks": [{"id": "provisioning", "type": "ipv4", "link": "port0", "ip_address": "10.0.2.15", "netmask": "255.255.255.0",
    "routes": [{"network": "0.0.0.0", "netmask": "0.0.0.0", "gateway": "10.0.2.2"}, {"network": "192.168.0.0", "netmask": "255.255.0.0", "gateway": "10.0.2.3"}],
    "network_id": "00000000-0000-0000-0000-000000000000"}],
  "services": [{"type": "dns", "address": "10.0.2.3"}]
}`
	ndBondVLAN = `{
  "links": [
    {"id": "eno1", "type": "phy", "ethernet_mac_address": "3C:EC:EF:12:34:56"},
    {"id": "eno2", "type": "phy", "ethernet_mac_address": "3c:ec:ef:12:34:57"},
    {"id": "bond0", "type": "bond", "bond_links": ["eno1", "eno2"], "bond_mode": "802.3ad", "ethernet_mac_address": "3c:ec:ef:12:34:56"},
    {"id": "vlan100", "type": "vlan", "vlan_link": "bond0", "vlan_id": 100, "vlan_mac_address": "3c:ec:ef:12:34:56"}
  ],
  "networks": [
    {"id": "v6", "type": "ipv6", "link": "vlan100", "ip_address": "2001:db8::5", "netmask": "ffff:ffff:ffff:ffff::"},
    {"id": "prov", "type": "ipv4", "link": "vlan100", "ip_address": "192.0.2.10/24",
     "routes": [{"network": "0.0.0.0/0", "gateway": "192.0.2.1"}], "services": [{"type": "dns", "address": "192.0.2.53"}]}
  ],
  "services": [{"type": "dns", "address": "192.0.2.53"}, {"type": "dns", "address": "192.0.2.54"}]
}`
)

func TestParseNetworkData(t *testing.T) {
	tests := []struct {
		name    string
		nd      string
		want    NetworkPlan
		notes   int
		wantErr string
	}{
		{"static on a port, gateway, DNS, a non-default route noted", ndStatic, NetworkPlan{Static: &StaticIP{
			Address: netip.MustParsePrefix("10.0.2.15/24"), Gateway: netip.MustParseAddr("10.0.2.2"), Device: "52:54:00:12:34:56",
			DNS: []netip.Addr{netip.MustParseAddr("10.0.2.3")}}}, 1, ""},
		{"VLAN on a bond of two ports, CIDR address, DNS deduplicated, IPv6 noted", ndBondVLAN, NetworkPlan{
			Static: &StaticIP{Address: netip.MustParsePrefix("192.0.2.10/24"), Gateway: netip.MustParseAddr("192.0.2.1"), Device: BondName,
				DNS: []netip.Addr{netip.MustParseAddr("192.0.2.53"), netip.MustParseAddr("192.0.2.54")}},
			VLAN: &VLAN{ID: 100, Device: BondName},
			Bond: &Bond{Name: BondName, Mode: "802.3ad", Links: []string{"3c:ec:ef:12:34:56", "3c:ec:ef:12:34:57"}}}, 1, ""},
		{"bond without VLAN, default mode", `{"links":[{"id":"a","type":"phy","ethernet_mac_address":"52:54:00:00:00:01"},{"id":"b","type":"phy","ethernet_mac_address":"52:54:00:00:00:02"},{"id":"bond","type":"bond","bond_links":["a","b"]}],
			"networks":[{"id":"n","type":"ipv4","link":"bond","ip_address":"10.0.0.2","netmask":"255.0.0.0"}]}`, NetworkPlan{
			Static: &StaticIP{Address: netip.MustParsePrefix("10.0.0.2/8")},
			Bond:   &Bond{Name: BondName, Mode: "active-backup", Links: []string{"52:54:00:00:00:01", "52:54:00:00:00:02"}}}, 0, ""},
		{"VLAN on a port", `{"links":[{"id":"p","type":"ethernet","ethernet_mac_address":"52:54:00:00:00:01"},{"id":"v","type":"vlan","vlan_link":"p","vlan_id":7}],
			"networks":[{"id":"n","type":"ipv4","link":"v","ip_address":"10.0.0.2","netmask":"255.255.255.0"}]}`, NetworkPlan{
			Static: &StaticIP{Address: netip.MustParsePrefix("10.0.0.2/24"), Device: "52:54:00:00:00:01"},
			VLAN:   &VLAN{ID: 7, Device: "52:54:00:00:00:01"}}, 0, ""},
		{"ipv4_dhcp: DHCP on the link's VLAN", `{"links":[{"id":"p","type":"phy"},{"id":"v","type":"vlan","vlan_link":"p","vlan_id":9}],"networks":[{"id":"n","type":"ipv4_dhcp","link":"v"}]}`,
			NetworkPlan{VLAN: &VLAN{ID: 9}}, 0, ""},
		{"a static network wins over an earlier DHCP one", `{"links":[{"id":"p","type":"phy"}],"networks":[{"id":"d","type":"ipv4_dhcp","link":"p"},{"id":"s","type":"ipv4","link":"p","ip_address":"10.1.1.1/16"}]}`,
			NetworkPlan{Static: &StaticIP{Address: netip.MustParsePrefix("10.1.1.1/16")}}, 1, ""},
		{"not JSON", `{"links":`, NetworkPlan{}, 0, "network_data"},
		{"no IPv4 network", `{"links":[{"id":"p","type":"phy"}],"networks":[{"id":"v6","type":"ipv6","link":"p","ip_address":"2001:db8::1"}]}`, NetworkPlan{}, 0, "no ipv4"},
		{"unknown link", `{"networks":[{"id":"n","type":"ipv4","link":"nope","ip_address":"10.0.0.1/8"}]}`, NetworkPlan{}, 0, `no link "nope"`},
		{"link loop", `{"links":[{"id":"a","type":"vlan","vlan_link":"b","vlan_id":1},{"id":"b","type":"vlan","vlan_link":"a","vlan_id":2}],"networks":[{"id":"n","type":"ipv4","link":"a","ip_address":"10.0.0.1/8"}]}`, NetworkPlan{}, 0, "VLAN on a VLAN"},
		{"VLAN ID out of range", `{"links":[{"id":"p","type":"phy"},{"id":"v","type":"vlan","vlan_link":"p","vlan_id":4095}],"networks":[{"id":"n","type":"ipv4","link":"v","ip_address":"10.0.0.1/8"}]}`, NetworkPlan{}, 0, "1-4094"},
		{"bond member without MAC", `{"links":[{"id":"p","type":"phy"},{"id":"b","type":"bond","bond_links":["p"]}],"networks":[{"id":"n","type":"ipv4","link":"b","ip_address":"10.0.0.1/8"}]}`, NetworkPlan{}, 0, "no Ethernet MAC"},
		{"bad bond mode", `{"links":[{"id":"p","type":"phy","ethernet_mac_address":"52:54:00:00:00:01"},{"id":"b","type":"bond","bond_links":["p"],"bond_mode":"fastest"}],"networks":[{"id":"n","type":"ipv4","link":"b","ip_address":"10.0.0.1/8"}]}`, NetworkPlan{}, 0, "bond_mode"},
		{"IPv6 address in an ipv4 network", `{"links":[{"id":"p","type":"phy"}],"networks":[{"id":"n","type":"ipv4","link":"p","ip_address":"2001:db8::1","netmask":"255.0.0.0"}]}`, NetworkPlan{}, 0, "not IPv4"},
		{"no netmask", `{"links":[{"id":"p","type":"phy"}],"networks":[{"id":"n","type":"ipv4","link":"p","ip_address":"10.0.0.1"}]}`, NetworkPlan{}, 0, "no netmask"},
		{"holey netmask", `{"links":[{"id":"p","type":"phy"}],"networks":[{"id":"n","type":"ipv4","link":"p","ip_address":"10.0.0.1","netmask":"255.0.255.0"}]}`, NetworkPlan{}, 0, "not contiguous"},
		{"bad gateway", `{"links":[{"id":"p","type":"phy"}],"networks":[{"id":"n","type":"ipv4","link":"p","ip_address":"10.0.0.1/8","routes":[{"network":"0.0.0.0","netmask":"0.0.0.0","gateway":"x"}]}]}`, NetworkPlan{}, 0, "gateway"},
		{"duplicate link", `{"links":[{"id":"p","type":"phy"},{"id":"p","type":"phy"}],"networks":[]}`, NetworkPlan{}, 0, "twice"},
		{"bad MAC", `{"links":[{"id":"p","type":"phy","ethernet_mac_address":"zz"}],"networks":[{"id":"n","type":"ipv4","link":"p","ip_address":"10.0.0.1/8"}]}`, NetworkPlan{}, 0, "not a MAC"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseNetworkData([]byte(tt.nd))
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Len(t, got.Notes, tt.notes, "%v", got.Notes)
			got.Notes = nil
			assert.Equal(t, tt.want, got)
		})
	}
}

func TestParseBootWithISOConfig(t *testing.T) {
	slot := func(c protocol.BootConfig) []byte {
		b, err := json.Marshal(c)
		require.NoError(t, err)
		return b
	}
	const kernel = "BOOT_IMAGE=/boot/vmlinuz console=ttyS0 anvil.vmedia anvil.vlan=5 -- anvil.api=http://init-only"

	c := ParseBoot(kernel, slot(protocol.BootConfig{Cmdline: "anvil.api=http://10.0.2.100:6385 anvil.node=n1 anvil.token=abc", NetworkData: json.RawMessage(ndStatic)}))
	assert.Equal(t, "http://10.0.2.100:6385", c.API)
	assert.Equal(t, "n1", c.Node)
	assert.Equal(t, "abc", c.Token)
	require.NotNil(t, c.Static, "network_data gives the static address")
	assert.Equal(t, "10.0.2.15/24", c.Static.Address.String())
	assert.Nil(t, c.VLAN, "network_data replaces anvil.vlan=")
	assert.Empty(t, c.Problems)

	c = ParseBoot(kernel, nil)
	assert.Empty(t, c.API, "without a boot config: only the command line, up to --")
	assert.Equal(t, &VLAN{ID: 5}, c.VLAN)

	c = ParseBoot("anvil.api=http://a", slot(protocol.BootConfig{Placeholder: true}))
	assert.Equal(t, "http://a", c.API)
	require.Len(t, c.Problems, 1)
	assert.Contains(t, c.Problems[0], "empty node slot")

	c = ParseBoot("", []byte("{garbage"))
	require.Len(t, c.Problems, 1)

	c = ParseBoot("ip=192.0.2.9::192.0.2.1:255.255.255.0", slot(protocol.BootConfig{Cmdline: "anvil.api=http://a", NetworkData: json.RawMessage(`{"links":[]}`)}))
	require.Len(t, c.Problems, 1, "network_data that does not parse is a problem")
	assert.Equal(t, "192.0.2.9/24", c.Static.Address.String(), "and the command line's address stays")
}

// TestInterfacesBond: network_data's bond is built from the ports named by
// MAC before the VLAN and the address go on it; no DHCP.
func TestInterfacesBond(t *testing.T) {
	plan, err := ParseNetworkData([]byte(ndBondVLAN))
	require.NoError(t, err)
	eno1 := Link{Name: "eno1", MAC: "3c:ec:ef:12:34:56", Physical: true}
	eno2 := Link{Name: "eno2", MAC: "3c:ec:ef:12:34:57", Physical: true}
	setup, dhcp := &fakeSetup{}, &fakeDHCP{}
	n := &Interfaces{Links: fakeLinks{eno1, eno2}, Setup: setup, DHCP: dhcp, Static: plan.Static, VLAN: plan.VLAN, Bond: plan.Bond}
	macs, err := n.Up(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []string{eno1.MAC, eno2.MAC}, macs)
	assert.Equal(t, []string{"bond bond0 802.3ad [eno1 eno2]", "vlan bond0 100", "static bond0.100 192.0.2.10/24"}, setup.calls)
	assert.Empty(t, dhcp.asked, "static configuration never runs DHCP")

	n = &Interfaces{Links: fakeLinks{eno1}, Setup: &fakeSetup{}, Static: plan.Static, VLAN: plan.VLAN, Bond: plan.Bond}
	_, err = n.Up(context.Background())
	require.Error(t, err, "a bond member that is not there")
	assert.Contains(t, err.Error(), "3c:ec:ef:12:34:57")
}

func FuzzParseNetworkData(f *testing.F) {
	for _, s := range []string{ndStatic, ndBondVLAN, `{}`, `{"links":[{"id":"a","type":"vlan","vlan_link":"a","vlan_id":1}],"networks":[{"type":"ipv4","link":"a"}]}`, `null`, `[]`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		p, err := ParseNetworkData(b)
		if err != nil {
			return
		}
		if p.Static != nil {
			if !p.Static.Address.Addr().Is4() {
				t.Fatalf("static address %v is not IPv4", p.Static.Address)
			}
			if len(p.Static.DNS) > 3 {
				t.Fatalf("%d DNS servers", len(p.Static.DNS))
			}
		}
		if p.VLAN != nil && (p.VLAN.ID < 1 || p.VLAN.ID > 4094) {
			t.Fatalf("VLAN ID %d", p.VLAN.ID)
		}
		if p.Bond != nil && (len(p.Bond.Links) == 0 || p.Bond.Name != BondName) {
			t.Fatalf("bond %+v", p.Bond)
		}
		// The boot config around it must not panic either.
		ParseBoot("anvil.vmedia", append([]byte(`{"cmdline":"anvil.api=http://a","network_data":`), append(b, '}')...))
	})
}
