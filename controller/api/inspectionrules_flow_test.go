package api

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/simagent"
	"github.com/anvil-metal/anvil/protocol"
)

func (e *testEnv) addRule(body map[string]any) string {
	e.t.Helper()
	r := e.do("POST", "/v1/inspection_rules", rulesVer, body)
	require.Equal(e.t, http.StatusCreated, r.status, string(r.body))
	return r.json(e.t)["uuid"].(string)
}

// The example: a QEMU machine gets a resource class, a trait, a
// capability and its port's switch, all in the write that ends the
// agent's inspection, each change in the history under its rule.
func TestInspectionRulesOnAgentInspection(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	id := e.agentNode("qemu", nil)
	qemu := e.addRule(map[string]any{"description": "QEMU machines", "priority": 50,
		"conditions": []any{map[string]any{"op": "eq", "args": map[string]any{"values": []any{"{inventory[system_vendor][manufacturer]}", "QEMU"}}},
			map[string]any{"op": "gt", "args": map[string]any{"values": []any{"{node.properties[memory_mb]}", "1000"}}}},
		"actions": []any{
			map[string]any{"op": "set-attribute", "args": map[string]any{"path": "/resource_class", "value": "vm-{inventory[cpu][count]}cpu"}},
			map[string]any{"op": "add-trait", "args": map[string]any{"name": "CUSTOM_VM"}},
			map[string]any{"op": "set-capability", "args": map[string]any{"name": "boot_mode", "value": "uefi"}},
			map[string]any{"op": "set-attribute", "args": map[string]any{"path": "name", "value": "vm-{inventory[system_vendor][serial_number]}"}},
			map[string]any{"op": "set-port-attribute", "args": map[string]any{"port_id": "{item}", "path": "local_link_connection",
				"value": map[string]any{"switch_id": "aa:bb:cc:dd:ee:ff", "port_id": "Eth1/{inventory[cpu][count]}"}}, "loop": []any{mac1}},
		}})
	never := e.addRule(map[string]any{"priority": 99,
		"conditions": []any{map[string]any{"op": "!eq", "args": map[string]any{"values": []any{"{node.driver}", "fake-hardware"}}}},
		"actions":    []any{map[string]any{"op": "fail", "args": map[string]any{"msg": "not reached"}}}})

	a := simagent.New(e.srv.URL, mac1, mac2)
	a.Inventory.SystemVendor = protocol.SystemVendor{Manufacturer: "QEMU", ProductName: "Standard PC", SerialNumber: "S42"}
	require.Equal(t, 202, e.provision("qemu", "inspect", nil).status)
	e.drive(a, id, "manageable", nil) // by UUID: a rule renames it
	n := e.do("GET", "/v1/nodes/vm-S42", latest, nil).json(t)
	assert.Equal(t, "vm-4cpu", n["resource_class"])
	assert.Equal(t, []any{"CUSTOM_VM"}, n["traits"])
	props := n["properties"].(map[string]any)
	assert.Equal(t, "boot_mode:uefi", props["capabilities"])
	assert.Equal(t, float64(4), props["cpus"], "inventory properties stay")
	assert.Nil(t, n["last_error"])
	port := e.do("GET", "/v1/ports?address="+mac1+"&detail=true", latest, nil).json(t)["ports"].([]any)[0].(map[string]any)
	assert.Equal(t, map[string]any{"switch_id": "aa:bb:cc:dd:ee:ff", "port_id": "Eth1/4"}, port["local_link_connection"])
	hist := historyText(e, "vm-S42")
	assert.Contains(t, hist, "inspection rule "+qemu+": set-attribute resource_class")
	assert.Contains(t, hist, "inspection rule "+qemu+": add-trait CUSTOM_VM")
	assert.Contains(t, hist, "inspection rule "+qemu+": set-port-attribute port ")
	assert.NotContains(t, hist, never)
}

// A failing rule fails the inspection with its id and message; what the
// rules before it did is not applied.
func TestInspectionRuleFailureAppliesNothing(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	e.agentNode("bad", nil)
	e.addRule(map[string]any{"priority": 90, "actions": []any{
		map[string]any{"op": "set-attribute", "args": map[string]any{"path": "resource_class", "value": "gold"}}}})
	failing := e.addRule(map[string]any{"priority": 10, "actions": []any{
		map[string]any{"op": "set-attribute", "args": map[string]any{"path": "driver", "value": "nosuch"}}}})
	a := simagent.New(e.srv.URL, mac1)
	require.Equal(t, 202, e.provision("bad", "inspect", nil).status)
	n := e.drive(a, "bad", "inspect failed", nil)
	assert.Nil(t, n["resource_class"], "nothing applied")
	assert.Equal(t, "fake-hardware", n["driver"])
	lastErr, _ := n["last_error"].(string)
	assert.True(t, strings.HasPrefix(lastErr, "Inspection rule "+failing+" failed on node "), lastErr)
	assert.Contains(t, lastErr, "no conductor service registered which supports driver nosuch")
}

// Stock IPA's report through /v1/continue_inspection runs the rules too,
// with its inventory's own fields (bmc_address) and a sensitive rule's
// credentials, which no reader sees again.
func TestInspectionRulesOnContinueInspection(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	e.agentNode("ipa", nil)
	sens := e.addRule(map[string]any{"sensitive": true, "conditions": []any{
		map[string]any{"op": "contains", "args": map[string]any{"value": "{inventory[system_vendor][manufacturer]}", "regex": "(?i)dell"}}},
		"actions": []any{map[string]any{"op": "set-attribute", "args": map[string]any{"path": "{item[path]}", "value": "{item[value]}"},
			"loop": []any{map[string]any{"path": "driver_info/ipmi_address", "value": "{inventory[bmc_address]}"},
				map[string]any{"path": "driver_info/ipmi_password", "value": "t0psecret"}}}}})
	require.Equal(t, 202, e.provision("ipa", "inspect", nil).status)
	e.waitState("ipa", "inspect wait")
	report := ipaReport(mac1)
	report["inventory"].(map[string]any)["bmc_address"] = "192.0.2.77"
	require.Equal(t, 202, e.postInspection("", "", report).status)
	n := e.waitState("ipa", "manageable")
	di := n["driver_info"].(map[string]any)
	assert.Equal(t, "192.0.2.77", di["ipmi_address"])
	assert.Equal(t, "******", di["ipmi_password"], "set, and masked as every password")
	assert.NotContains(t, string(e.do("GET", "/v1/inspection_rules/"+sens, rulesVer, nil).body), "t0psecret")
	assert.NotContains(t, historyText(e, "ipa"), "t0psecret")
}
