package api

import (
	"encoding/hex"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/simagent"
	"github.com/anvil-metal/anvil/protocol"
	"github.com/anvil-metal/anvil/protocol/lldp"
)

// A frame Debian's lldpd 1.0.16 sent (protocol/lldp/testdata): chassis
// 52:54:00:5e:00:01, port "vA", system name sw-rack7.
const lldpdFrame = "0180c200000e5254005e000188cc0207045254005e00010403057641060200080a0873772d7261636b370c11616e76696c2074657374207377697463680e04009c0080100c0501c000020a02000000060010181102fe80000000000000e86b9afffe6134e5020000000600081545746865726e6574312f3720746f206e6f64652d37fe0900120f030100000000fe0900120f010080000036fe070012bb01003f04fe130012bb07362e31382e34342d66632d763539350000"

func reportWithBMCAndLLDP(t *testing.T, serial, mac string) protocol.DiscoveryRequest {
	t.Helper()
	raw, err := hex.DecodeString(lldpdFrame)
	require.NoError(t, err)
	tlvs, err := lldp.ParseFrame(raw)
	require.NoError(t, err)
	rep := discoveryReport(serial, mac)
	rep.Inventory.BMCAddress, rep.Inventory.BMCMAC = "192.0.2.45", "52:54:00:aa:bb:01"
	rep.Inventory.Interfaces[0].LLDP = tlvs
	return rep
}

// Discovery that finishes the job: a sensitive rule sets the BMC address
// the agent read in band, credentials, name, resource class, trait and
// capability, and manages the node, which ends manageable with nobody
// touching it; its port names the switch port LLDP reported.
func TestDiscoveryRulesManageTheNode(t *testing.T) {
	e := discoveryEnv(t, nil)
	rule := e.addRule(map[string]any{"description": "new rack", "sensitive": true, "priority": 10,
		"conditions": []any{map[string]any{"op": "!is-empty", "args": map[string]any{"value": "{inventory[bmc_address]}"}}},
		"actions": []any{
			map[string]any{"op": "set-attribute", "args": map[string]any{"path": "driver_info/ipmi_address", "value": "{inventory[bmc_address]}"}},
			map[string]any{"op": "set-attribute", "args": map[string]any{"path": "driver_info/ipmi_username", "value": "admin"}},
			map[string]any{"op": "set-attribute", "args": map[string]any{"path": "driver_info/ipmi_password", "value": "rack-secret"}},
			map[string]any{"op": "set-attribute", "args": map[string]any{"path": "name", "value": "node-{inventory[system_vendor][serial_number]}"}},
			map[string]any{"op": "set-attribute", "args": map[string]any{"path": "resource_class", "value": "baremetal"}},
			map[string]any{"op": "add-trait", "args": map[string]any{"name": "CUSTOM_RACK7"}},
			map[string]any{"op": "set-capability", "args": map[string]any{"name": "boot_mode", "value": "uefi"}},
			map[string]any{"op": "anvil-manage", "args": map[string]any{}},
		}})
	r := e.do("POST", "/v1/discovery", "", reportWithBMCAndLLDP(t, "SN7", "52:54:00:aa:00:07"))
	require.Equal(t, 201, r.status, string(r.body))
	var dr protocol.DiscoveryResponse
	require.NoError(t, json.Unmarshal(r.body, &dr))
	assert.Contains(t, dr.Message, "the inspection rules had it managed (")

	n := e.waitState("node-SN7", "manageable")
	assert.Equal(t, "baremetal", n["resource_class"])
	assert.Equal(t, []any{"CUSTOM_RACK7"}, n["traits"])
	assert.Equal(t, "boot_mode:uefi", n["properties"].(map[string]any)["capabilities"])
	di := n["driver_info"].(map[string]any)
	assert.Equal(t, "192.0.2.45", di["ipmi_address"])
	assert.Equal(t, "******", di["ipmi_password"], "credentials are never shown")
	assert.Nil(t, n["last_error"])

	port := e.do("GET", "/v1/ports?address=52:54:00:aa:00:07&detail=true", latest, nil).json(t)["ports"].([]any)[0].(map[string]any)
	assert.Equal(t, map[string]any{"switch_id": "52:54:00:5e:00:01", "port_id": "vA", "switch_info": "sw-rack7"}, port["local_link_connection"])

	inv := e.do("GET", "/v1/nodes/node-SN7/inventory", latest, nil).json(t)
	assert.Equal(t, "192.0.2.45", inv["inventory"].(map[string]any)["bmc_address"])
	pd := inv["plugin_data"].(map[string]any)
	assert.Equal(t, "sw-rack7", pd["parsed_lldp"].(map[string]any)["eth0"].(map[string]any)["switch_system_name"])
	assert.Equal(t, "vA", pd["all_interfaces"].(map[string]any)["eth0"].(map[string]any)["lldp_processed"].(map[string]any)["switch_port_id"])

	hist := historyText(e, "node-SN7")
	assert.Contains(t, hist, "discovery rule "+rule+": set-attribute driver_info")
	assert.Contains(t, hist, "discovery rule "+rule+": anvil-manage (manage requested)")
	assert.NotContains(t, hist, "rack-secret")
}

// A rule that fails leaves the discovered node in enroll, with the
// rule's id and reason, and applies nothing; with no rule asking, a node
// is not managed.
func TestDiscoveryRulesFailureAndNoManage(t *testing.T) {
	e := discoveryEnv(t, nil)
	e.addRule(map[string]any{"priority": 20,
		"actions": []any{map[string]any{"op": "set-attribute", "args": map[string]any{"path": "resource_class", "value": "rc-{inventory[cpu][count]}"}}}})
	r := e.do("POST", "/v1/discovery", "", discoveryReport("SN8", "52:54:00:aa:00:08"))
	require.Equal(t, 201, r.status, string(r.body))
	var dr protocol.DiscoveryResponse
	require.NoError(t, json.Unmarshal(r.body, &dr))
	n := e.waitState(dr.NodeUUID, "enroll")
	assert.Equal(t, "rc-4", n["resource_class"], "rules ran; nobody asked to manage")

	bad := e.addRule(map[string]any{"priority": 5,
		"conditions": []any{map[string]any{"op": "is-empty", "args": map[string]any{"value": "{inventory[bmc_address]}"}}},
		"actions":    []any{map[string]any{"op": "fail", "args": map[string]any{"msg": "no in-band BMC address"}}}})
	r = e.do("POST", "/v1/discovery", "", discoveryReport("SN9", "52:54:00:aa:00:09"))
	require.Equal(t, 201, r.status, string(r.body))
	require.NoError(t, json.Unmarshal(r.body, &dr))
	n = e.waitState(dr.NodeUUID, "enroll")
	assert.Contains(t, n["last_error"], "Inspection rule "+bad+" failed")
	assert.Contains(t, n["last_error"], "no in-band BMC address")
	assert.Nil(t, n["resource_class"], "the rule before the failure is not applied either")
}

// An agent inspection fills the ports' local_link_connection from the
// LLDP its NICs heard, keeping what an operator set, and the inventory's
// plugin data has Ironic's all_interfaces and parsed_lldp.
func TestInspectionFillsLocalLinkConnection(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	id := e.agentNode("llc", nil)
	raw, err := hex.DecodeString(lldpdFrame)
	require.NoError(t, err)
	tlvs, err := lldp.ParseFrame(raw)
	require.NoError(t, err)
	a := simagent.New(e.srv.URL, mac1, mac2)
	require.Len(t, a.Inventory.Interfaces, 2)
	a.Inventory.Interfaces[0].LLDP, a.Inventory.Interfaces[1].LLDP = tlvs, tlvs
	// The operator already named the second port's switch port.
	r := e.do("POST", "/v1/ports", latest, map[string]any{"address": mac2, "node_uuid": id, "local_link_connection": map[string]any{"port_id": "Ethernet1/8"}})
	require.Equal(t, 201, r.status, string(r.body))
	require.Equal(t, 202, e.provision("llc", "inspect", nil).status)
	e.drive(a, id, "manageable", nil)
	llc := func(mac string) any {
		return e.do("GET", "/v1/ports?address="+mac+"&detail=true", latest, nil).json(t)["ports"].([]any)[0].(map[string]any)["local_link_connection"]
	}
	assert.Equal(t, map[string]any{"switch_id": "52:54:00:5e:00:01", "port_id": "vA", "switch_info": "sw-rack7"}, llc(mac1))
	assert.Equal(t, map[string]any{"switch_id": "52:54:00:5e:00:01", "port_id": "Ethernet1/8", "switch_info": "sw-rack7"}, llc(mac2))
}
