package lldp

import (
	"encoding/json"
	"net"

	"github.com/anvil-metal/anvil/protocol"
)

// PluginData is the part of Ironic's inspection plugin data built from
// the inventory's interfaces: all_interfaces (validate_interfaces: each
// interface as reported, with pxe_enabled, and, as ironic-inspector's
// lldp_basic hook left it, lldp_processed) and parsed_lldp (parse_lldp:
// the processed LLDP per interface name). Interfaces without a name or a
// valid MAC are left out, as Ironic does.
func PluginData(inv protocol.Inventory) map[string]any {
	all := map[string]any{}
	parsed := map[string]any{}
	pxe, _ := net.ParseMAC(inv.Boot.PXEInterface)
	for _, nic := range inv.Interfaces {
		mac, err := net.ParseMAC(nic.MACAddress)
		if nic.Name == "" || err != nil {
			continue
		}
		doc := map[string]any{}
		if raw, err := json.Marshal(nic); err == nil {
			_ = json.Unmarshal(raw, &doc)
		}
		doc["mac_address"] = mac.String()
		doc["pxe_enabled"] = pxe != nil && pxe.String() == mac.String()
		if p := Process(nic.LLDP); p != nil {
			doc["lldp_processed"] = p
			parsed[nic.Name] = p
		}
		all[nic.Name] = doc
	}
	out := map[string]any{"all_interfaces": all}
	if len(parsed) > 0 {
		out["parsed_lldp"] = parsed
	}
	return out
}

// PortLocalLinkConnection fills llc (a port's local_link_connection, nil
// for none) from the TLVs its NIC heard, as Ironic's
// local_link_connection hook does: keys already set are kept (an
// operator's or a rule's word wins). It returns the result and whether
// anything was added.
func PortLocalLinkConnection(llc map[string]any, tlvs []TLV) (map[string]any, bool) {
	found := LocalLinkConnection(tlvs)
	out := map[string]any{}
	for k, v := range llc {
		out[k] = v
	}
	added := false
	for k, v := range found {
		if _, ok := out[k]; !ok {
			out[k] = v
			added = true
		}
	}
	return out, added
}
