package conductor

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

// What rules changed is applied field by field onto the node being
// written; a new driver brings its interfaces where the node's are not
// among its own, except those the rules set.
func TestRuleOutcomeApply(t *testing.T) {
	n := &store.Node{UUID: "u", Driver: "fake-hardware", Interfaces: store.Interfaces{Boot: "fake", Power: "fake", Inspect: "agent",
		Management: "fake", Deploy: "direct"}, Properties: map[string]any{"cpus": 4}}
	before, err := nodeDoc(n)
	require.NoError(t, err)
	after, err := nodeDoc(n)
	require.NoError(t, err)
	after["driver"] = "ipmi"
	after["power_interface"] = "ipmitool"
	after["resource_class"] = "gold"
	after["traits"] = []any{"CUSTOM_A"}
	after["driver_info"] = map[string]any{"ipmi_address": "192.0.2.1"}
	o := &ruleOutcome{before: before, after: after}
	assert.ElementsMatch(t, []string{"driver", "driver_info", "resource_class", "power_interface", "traits"}, o.changed())

	m := *n
	m.Extra = map[string]any{"kept": true} // written meanwhile: not the rules' to undo
	require.NoError(t, o.apply(&m))
	assert.Equal(t, "ipmi", m.Driver)
	assert.Equal(t, "ipmitool", m.Interfaces.Power)
	assert.Equal(t, "ipxe", m.Interfaces.Boot, "fake is not an ipmi boot interface: the default")
	assert.Equal(t, "ipmitool", m.Interfaces.Management)
	assert.Equal(t, "agent", m.Interfaces.Inspect, "agent is one of ipmi's")
	assert.Equal(t, "gold", *m.ResourceClass)
	assert.Equal(t, []string{"CUSTOM_A"}, m.Traits)
	assert.Equal(t, map[string]any{"ipmi_address": "192.0.2.1"}, m.DriverInfo)
	assert.Equal(t, map[string]any{"kept": true}, m.Extra)

	var none *ruleOutcome
	assert.NoError(t, none.apply(&m))
}

func TestRuleFieldChecks(t *testing.T) {
	check := ruleFieldCheck(map[string]Driver{"ipmi": nil})
	for _, c := range []struct {
		field string
		v     any
		want  string
	}{
		{"driver", "ipmi", ""},
		{"driver", "nosuch", "no conductor service registered which supports driver nosuch"},
		{"driver", nil, "driver is required"},
		{"name", "rack1-node-07", ""},
		{"name", "has space", "expected a logical name"},
		{"name", "6a1f4c52-5a43-4bd7-9b07-3f4e2f2f0c11", "expected a logical name"},
		{"resource_class", 5.0, "is not a string"},
		{"driver_info", "x", "is not an object"},
		{"retired", "yes", "is not a boolean"},
		{"automated_clean", nil, ""},
		{"boot_interface", 1.0, "is not an interface name"},
		{"provision_state", "active", "cannot be changed"},
	} {
		err := check(c.field, c.v)
		if c.want == "" {
			assert.NoError(t, err, c.field)
		} else {
			assert.ErrorContains(t, err, c.want, c.field)
		}
	}
	for _, c := range []struct {
		field string
		v     any
		ok    bool
	}{
		{"extra", map[string]any{}, true}, {"local_link_connection", nil, true}, {"pxe_enabled", "no", false},
		{"physical_network", "physnet1", true}, {"address", "x", false},
	} {
		assert.Equal(t, c.ok, checkPortField(c.field, c.v) == nil, c.field)
	}
}
