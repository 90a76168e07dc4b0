package lldp

import (
	"encoding/binary"
	"encoding/hex"
)

// Organisationally unique identifiers of the TLV sets decoded.
const (
	oui8021 = 0x0080c2
	oui8023 = 0x00120f
)

// Process turns raw TLVs into Ironic's parse_lldp names
// (switch_chassis_id, switch_port_id, switch_port_description,
// switch_system_name, switch_system_description,
// switch_capabilities_support/enabled, switch_mgmt_addresses,
// switch_port_untagged_vlan_id, switch_port_vlans,
// switch_port_management_vlan_id, switch_port_mtu, link aggregation and
// auto-negotiation). As Ironic, the first value of a name wins, lists
// collect every TLV, and a TLV that does not decode is skipped. nil when
// nothing decoded.
func Process(tlvs []TLV) map[string]any {
	nv := map[string]any{}
	set := func(k string, v any) {
		if _, ok := nv[k]; !ok {
			nv[k] = v
		}
	}
	appendTo := func(k string, v any) {
		l, _ := nv[k].([]any)
		nv[k] = append(l, v)
	}
	for _, t := range tlvs {
		if len(t.Value) > MaxValue {
			continue
		}
		v := t.Value
		switch t.Type {
		case TypeChassisID:
			if _, id, ok := ID(v, true); ok {
				set("switch_chassis_id", id)
			}
		case TypePortID:
			if _, id, ok := ID(v, false); ok {
				set("switch_port_id", id)
			}
		case TypePortDesc, TypeSysName, TypeSysDesc:
			name := map[int]string{TypePortDesc: "switch_port_description", TypeSysName: "switch_system_name", TypeSysDesc: "switch_system_description"}[t.Type]
			if s, ok := text(v); ok {
				set(name, s)
			}
		case TypeSysCaps:
			if len(v) == 4 {
				set("switch_capabilities_support", capList(binary.BigEndian.Uint16(v)))
				set("switch_capabilities_enabled", capList(binary.BigEndian.Uint16(v[2:])))
			}
		case TypeMgmtAddress:
			// Address string length (family byte included), family, address.
			if len(v) >= 2 && int(v[0]) >= 1 && len(v) >= 1+int(v[0]) {
				if s, ok := ianaAddress(v[1], v[2:1+int(v[0])]); ok {
					appendTo("switch_mgmt_addresses", s)
				}
			}
		case TypeOrgSpecific:
			if len(v) >= 4 {
				orgSpecific(int(v[0])<<16|int(v[1])<<8|int(v[2]), v[3], v[4:], set, appendTo)
			}
		}
	}
	if len(nv) == 0 {
		return nil
	}
	return nv
}

func capList(bits uint16) []any {
	// The system capability bits, lowest first, in Ironic's words.
	names := []string{"Other", "Repeater", "Bridge", "WLAN", "Router", "Telephone", "DOCSIS cable device", "Station only", "C-Vlan", "S-Vlan", "TPMR"}
	out := []any{}
	for i, n := range names {
		if i > 0 && bits&(1<<i) != 0 { // bit 0 ("Other") is not named by Ironic
			out = append(out, n)
		}
	}
	return out
}

// orgSpecific decodes the 802.1 and 802.3 TLVs Ironic decodes.
func orgSpecific(oui int, sub byte, d []byte, set func(string, any), appendTo func(string, any)) {
	switch oui {
	case oui8021:
		switch sub {
		case 1: // port VLAN ID
			if len(d) == 2 {
				set("switch_port_untagged_vlan_id", int(binary.BigEndian.Uint16(d)))
			}
		case 2: // port and protocol VLAN ID
			if len(d) == 3 {
				set("switch_port_protocol_vlan_enabled", d[0]&0x04 != 0)
				set("switch_port_protocol_vlan_support", d[0]&0x02 != 0)
				appendTo("switch_port_protocol_vlan_ids", int(binary.BigEndian.Uint16(d[1:])))
			}
		case 3: // VLAN name
			if len(d) >= 3 && len(d) >= 3+int(d[2]) {
				if name, ok := text(d[3 : 3+int(d[2])]); ok {
					appendTo("switch_port_vlans", map[string]any{"id": int(binary.BigEndian.Uint16(d)), "name": name})
				}
			}
		case 4: // protocol identity
			if len(d) >= 1 && len(d) >= 1+int(d[0]) {
				appendTo("switch_protocol_identities", hex.EncodeToString(d[1:1+int(d[0])]))
			}
		case 6: // management VID
			if len(d) == 2 {
				set("switch_port_management_vlan_id", int(binary.BigEndian.Uint16(d)))
			}
		case 7: // link aggregation
			linkAggregation(d, set)
		}
	case oui8023:
		switch sub {
		case 1: // MAC/PHY configuration/status
			if len(d) == 5 {
				set("switch_port_autonegotiation_support", d[0]&0x01 != 0)
				set("switch_port_autonegotiation_enabled", d[0]&0x02 != 0)
			}
		case 3: // link aggregation (deprecated, same layout as 802.1's)
			linkAggregation(d, set)
		case 4: // maximum frame size
			if len(d) == 2 {
				set("switch_port_mtu", int(binary.BigEndian.Uint16(d)))
			}
		}
	}
}

func linkAggregation(d []byte, set func(string, any)) {
	if len(d) == 5 {
		set("switch_port_link_aggregation_enabled", d[0]&0x02 != 0)
		set("switch_port_link_aggregation_support", d[0]&0x01 != 0)
		set("switch_port_link_aggregation_id", int(binary.BigEndian.Uint32(d[1:])))
	}
}

// LocalLinkConnection is what Ironic's local_link_connection hook takes
// from the TLVs for a port: switch_id (the chassis ID, only when it is a
// MAC address), port_id and switch_info (the system name). Only the keys
// found are set.
func LocalLinkConnection(tlvs []TLV) map[string]string {
	out := map[string]string{}
	for _, t := range tlvs {
		switch t.Type {
		case TypeChassisID:
			if sub, id, ok := ID(t.Value, true); ok && sub == ChassisMACSubtype {
				setOnce(out, "switch_id", id)
			}
		case TypePortID:
			if _, id, ok := ID(t.Value, false); ok {
				setOnce(out, "port_id", id)
			}
		case TypeSysName:
			if s, ok := text(t.Value); ok {
				setOnce(out, "switch_info", s)
			}
		}
	}
	return out
}

func setOnce(m map[string]string, k, v string) {
	if _, ok := m[k]; !ok {
		m[k] = v
	}
}
