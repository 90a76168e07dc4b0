package lldp

import (
	"encoding/hex"
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/protocol"
)

func frame(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile("testdata/" + name)
	require.NoError(t, err)
	f, err := hex.DecodeString(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	return f
}

func TestLLDPDFrames(t *testing.T) {
	for name, tc := range map[string]struct {
		file string
		want map[string]any
		llc  map[string]string
	}{
		"defaults: port ID is the MAC": {file: "lldpd-1.0.16-default.hex",
			want: map[string]any{"switch_chassis_id": "52:54:00:5e:00:01", "switch_port_id": "52:54:00:5e:00:01", "switch_system_name": "vm",
				"switch_system_description": "anvil test switch", "switch_port_description": "vA"},
			llc: map[string]string{"switch_id": "52:54:00:5e:00:01", "port_id": "52:54:00:5e:00:01", "switch_info": "vm"}},
		"port ID ifname, description and system name set": {file: "lldpd-1.0.16-ifname.hex",
			want: map[string]any{"switch_chassis_id": "52:54:00:5e:00:01", "switch_port_id": "vA", "switch_system_name": "sw-rack7",
				"switch_port_description": "Ethernet1/7 to node-7"},
			llc: map[string]string{"switch_id": "52:54:00:5e:00:01", "port_id": "vA", "switch_info": "sw-rack7"}},
	} {
		t.Run(name, func(t *testing.T) {
			tlvs, err := ParseFrame(frame(t, tc.file))
			require.NoError(t, err)
			require.GreaterOrEqual(t, len(tlvs), 3)
			assert.Equal(t, []int{TypeChassisID, TypePortID, TypeTTL}, []int{tlvs[0].Type, tlvs[1].Type, tlvs[2].Type}, "802.1AB's mandatory TLVs first")
			p := Process(tlvs)
			for k, v := range tc.want {
				assert.Equal(t, v, p[k], k)
			}
			assert.Equal(t, []any{"192.0.2.10", "fe80::e86b:9aff:fe61:34e5"}, p["switch_mgmt_addresses"])
			assert.Equal(t, []any{"Bridge", "WLAN", "Router", "Station only"}, p["switch_capabilities_support"])
			assert.Equal(t, tc.llc, LocalLinkConnection(tlvs))
		})
	}
}

// TestIronicVectors runs the TLVs of Ironic's own parse_lldp unit test
// (test_parse_lldp.py, test_all_valid_data) and expects what it expects.
func TestIronicVectors(t *testing.T) {
	raw := `[[1, "04112233aabbcc"], [2, "07373334"], [3, "003c"],
	[4, "686f737430322e6c61622e656e6720706f7274203320" ], [5, "737730312d646973742d31622d623132"],
	[7, "00140014"], [8, "0501c000020f020000000000"], [8, "110220010db885a3000000008a2e03707334020000000000"],
	[8, "0706aa11bb22cc3302000003e900"], [127, "00120f01036c110010"], [127, "00120f030300000002"], [127, "00120f0405ea"],
	[127, "0080c2010066"], [127, "0080c20206000a"], [127, "0080c202060014"], [127, "0080c204080026424203000000"],
	[127, "0080c203006507766c616e313031"], [127, "0080c203006607766c616e313032"], [127, "0080c203006807766c616e313034"],
	[127, "0080c2060058"], [0, ""]]`
	var tlvs []TLV
	require.NoError(t, json.Unmarshal([]byte(raw), &tlvs))
	p := Process(tlvs)
	want := map[string]any{
		"switch_capabilities_enabled": []any{"Bridge", "Router"}, "switch_capabilities_support": []any{"Bridge", "Router"},
		"switch_chassis_id": "11:22:33:aa:bb:cc", "switch_port_id": "734", "switch_system_name": "sw01-dist-1b-b12",
		"switch_port_description":             "host02.lab.eng port 3 ",
		"switch_mgmt_addresses":               []any{"192.0.2.15", "2001:db8:85a3::8a2e:370:7334", "aa:11:bb:22:cc:33"},
		"switch_port_autonegotiation_enabled": true, "switch_port_link_aggregation_enabled": true,
		"switch_port_link_aggregation_id": 2, "switch_port_link_aggregation_support": true, "switch_port_management_vlan_id": 88,
		"switch_port_mtu": 1514, "switch_port_protocol_vlan_enabled": true, "switch_port_protocol_vlan_ids": []any{10, 20},
		"switch_port_protocol_vlan_support": true, "switch_port_untagged_vlan_id": 102,
		"switch_port_vlans": []any{map[string]any{"id": 101, "name": "vlan101"}, map[string]any{"id": 102, "name": "vlan102"},
			map[string]any{"id": 104, "name": "vlan104"}},
		"switch_protocol_identities": []any{"0026424203000000"},
	}
	for k, v := range want {
		assert.Equal(t, v, p[k], k)
	}
	assert.Equal(t, map[string]string{"switch_id": "11:22:33:aa:bb:cc", "port_id": "734", "switch_info": "sw01-dist-1b-b12"}, LocalLinkConnection(tlvs))
	out, err := json.Marshal(tlvs[:2])
	require.NoError(t, err)
	assert.JSONEq(t, `[[1, "04112233aabbcc"], [2, "07373334"]]`, string(out), "the inventory's shape, as IPA's")
}

func TestBadInput(t *testing.T) {
	_, err := ParseFrame([]byte{1, 2, 3})
	assert.ErrorIs(t, err, ErrNotLLDP)
	ipv4 := frame(t, "lldpd-1.0.16-default.hex")
	ipv4[12], ipv4[13] = 0x08, 0x00
	_, err = ParseFrame(ipv4)
	assert.ErrorIs(t, err, ErrNotLLDP)
	f := frame(t, "lldpd-1.0.16-default.hex")
	tlvs, err := ParseFrame(f[:39])
	assert.ErrorContains(t, err, "claims")
	assert.NotEmpty(t, tlvs, "the TLVs before the cut are kept")

	// A chassis ID that is not a MAC is no switch_id, as in Ironic.
	llc := LocalLinkConnection([]TLV{{Type: TypeChassisID, Value: append([]byte{7}, "sw1"...)}, {Type: TypePortID, Value: []byte{3, 1, 2}}})
	assert.Empty(t, llc)
	assert.Nil(t, Process([]TLV{{Type: TypeSysName, Value: []byte{0xff, 0xfe}}}), "invalid UTF-8 is skipped")

	for _, bad := range []string{`[1]`, `[200, "00"]`, `[1, "zz"]`, `{"type": 1}`, `[1, "` + strings.Repeat("00", 512) + `"]`} {
		var tlv TLV
		assert.Error(t, json.Unmarshal([]byte(bad), &tlv), bad)
	}
}

func FuzzParseFrame(f *testing.F) {
	f.Add(frame(f, "lldpd-1.0.16-default.hex"))
	f.Add(frame(f, "lldpd-1.0.16-ifname.hex"))
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		tlvs, _ := ParseFrame(b)
		_ = Process(tlvs)
		_ = LocalLinkConnection(tlvs)
		if len(b) > 14 {
			tlvs, _ = ParseTLVs(b[14:])
			for _, tv := range tlvs {
				if len(tv.Value) > MaxValue {
					t.Fatalf("value of %d bytes", len(tv.Value))
				}
				_ = Process([]TLV{tv})
			}
			// Values straight from the fuzzer reach every decoder.
			for typ := range 9 {
				_ = Process([]TLV{{Type: typ, Value: b}, {Type: TypeOrgSpecific, Value: b}})
			}
		}
	})
}

// A stock agent's odd TLV is dropped, never the whole inventory.
func TestInventoryKeepsGoodTLVs(t *testing.T) {
	var nic protocol.NIC
	require.NoError(t, json.Unmarshal([]byte(`{"name": "eth0", "lldp": [[1, "04112233aabbcc"], [2, "zz"], "junk", [5, "7377"]]}`), &nic))
	assert.Equal(t, protocol.LLDPTLVs{{Type: 1, Value: []byte{4, 0x11, 0x22, 0x33, 0xaa, 0xbb, 0xcc}}, {Type: 5, Value: []byte("sw")}}, nic.LLDP)
	require.NoError(t, json.Unmarshal([]byte(`{"name": "eth0", "lldp": "none"}`), &nic))
	assert.Nil(t, nic.LLDP)
}
