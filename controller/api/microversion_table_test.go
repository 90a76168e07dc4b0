package api

import (
	"fmt"
	"net/http"
	"slices"
	"sort"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// gatedField is one field of a node, a port or a port group that a
// microversion after 1.82 brought: from the version it is shown at, a
// client may create the resource with it and PATCH it; below, it is
// absent from every view and either write is refused with 406.
type gatedField struct {
	resource string // "node", "port" or "portgroup"
	name     string
	from     int
	value    any  // a value to create and patch it with (names get a suffix)
	readOnly bool // shown, never written (create and PATCH refuse it)
}

// gatedFields drives TestMicroversionTable, one row per field.
var gatedFields = []gatedField{
	{resource: "node", name: "parent_node", from: 83, value: nil},
	{resource: "node", name: "firmware_interface", from: 86, value: "fake"},
	{resource: "node", name: "service_step", from: serviceVersion, readOnly: true},
	{resource: "node", name: "disable_power_off", from: disablePowerOffVersion, value: true},
	{resource: "node", name: "health", from: healthVersion, readOnly: true},
	{resource: "node", name: "instance_name", from: instanceNameVersion, value: "web"},
	{resource: "port", name: "name", from: portNameVersion, value: "eth"},
	{resource: "port", name: "description", from: portDescriptionVersion, value: "the first port"},
	{resource: "port", name: "vendor", from: portVendorVersion, value: "acme"},
	{resource: "port", name: "category", from: portCategoryVersion, value: "uplink"},
	{resource: "portgroup", name: "physical_network", from: portgroupPhysnetVersion, value: "physnet1"},
	{resource: "portgroup", name: "category", from: portgroupCategoryVersion, value: "bond"},
}

// gatedFilter is a list filter a microversion after 1.81 brought, with
// Ironic's refusal below it.
type gatedFilter struct {
	path, param, value string
	from               int
	fault              string
}

var gatedFilters = []gatedFilter{
	{"/v1/ports", "shard", "s1", 82, "Request not acceptable. The minimal required API version should be 1.82"},
	{"/v1/ports", "description_contains", "first", portDescriptionVersion, "Request not acceptable. The minimal required API version should be 1.97"},
	{"/v1/ports", "conductor_groups", "g1", conductorGroupsFilterVersion, "Request not acceptable. The minimal required API version should be 1.99"},
	{"/v1/portgroups", "conductor_groups", "g1", conductorGroupsFilterVersion, "Request not acceptable. The minimal required API version should be 1.99"},
	{"/v1/portgroups", "shard", "s1", portgroupShardVersion, "Request not acceptable. The minimal required API version should be 1.106"},
	{"/v1/nodes", "instance_name", "web", instanceNameVersion, "instance_name is not acceptable in this API version"},
}

// baseFields are what each resource shows at 1.82, links included.
var baseFields = map[string][]string{
	"node": {"allocation_uuid", "automated_clean", "bios_interface", "boot_interface", "boot_mode", "chassis_uuid",
		"clean_step", "conductor", "conductor_group", "console_enabled", "console_interface", "created_at",
		"deploy_interface", "deploy_step", "description", "driver", "driver_info", "driver_internal_info", "extra",
		"fault", "inspect_interface", "inspection_finished_at", "inspection_started_at", "instance_info",
		"instance_uuid", "last_error", "lessee", "links", "maintenance", "maintenance_reason", "management_interface",
		"name", "network_data", "network_interface", "owner", "portgroups", "ports", "power_interface", "power_state",
		"properties", "protected", "protected_reason", "provision_state", "provision_updated_at", "raid_config",
		"raid_interface", "rescue_interface", "reservation", "resource_class", "retired", "retired_reason",
		"secure_boot", "shard", "states", "storage_interface", "target_power_state", "target_provision_state",
		"target_raid_config", "traits", "updated_at", "uuid", "vendor_interface", "volume"},
	"port": {"address", "created_at", "extra", "internal_info", "is_smartnic", "links", "local_link_connection",
		"node_uuid", "physical_network", "portgroup_uuid", "pxe_enabled", "updated_at", "uuid"},
	"portgroup": {"address", "created_at", "extra", "internal_info", "links", "mode", "name", "node_uuid",
		"properties", "standalone_ports_supported", "updated_at", "uuid"},
}

// wantFields is the field set of a whole resource at ver.
func wantFields(resource string, ver int) []string {
	want := slices.Clone(baseFields[resource])
	for _, f := range gatedFields {
		if f.resource == resource && f.from <= ver {
			want = append(want, f.name)
		}
	}
	sort.Strings(want)
	return want
}

// TestMicroversionTable: at each version from 1.82 to 1.110, a node, a
// port and a port group show exactly the fields the version has; each
// gated field can be created and patched from its version (201, 200) and
// is refused below it (406); each gated list filter likewise (200, 406).
func TestMicroversionTable(t *testing.T) {
	e := newEnv(t)
	node := e.createNode("mv", nil)["uuid"].(string)
	pg := e.do("POST", "/v1/portgroups", latest, map[string]any{"node_uuid": node, "name": "mvpg"})
	require.Equal(t, http.StatusCreated, pg.status, string(pg.body))
	port := e.do("POST", "/v1/ports", latest, map[string]any{"node_uuid": node, "address": "52:54:00:aa:00:01"})
	require.Equal(t, http.StatusCreated, port.status, string(port.body))
	views := map[string]string{"node": "/v1/nodes/mv", "port": "/v1/ports/" + port.json(t)["uuid"].(string),
		"portgroup": "/v1/portgroups/mvpg"}

	macs := 0
	create := func(resource, ver string, extra map[string]any) resp {
		body := map[string]any{}
		switch resource {
		case "node":
			body["driver"] = "fake-hardware"
		case "port":
			macs++
			body["node_uuid"], body["address"] = node, fmt.Sprintf("52:54:00:bb:%02x:%02x", macs/256, macs%256)
		case "portgroup":
			body["node_uuid"] = node
		}
		for k, v := range extra {
			body[k] = v
		}
		return e.do("POST", "/v1/"+resource+"s", ver, body)
	}
	for ver := 82; ver <= maxMinor; ver++ {
		v := fmt.Sprintf("1.%d", ver)
		t.Run(v, func(t *testing.T) {
			for _, res := range []string{"node", "port", "portgroup"} {
				r := e.do("GET", views[res], v, nil)
				require.Equal(t, http.StatusOK, r.status, string(r.body))
				assert.Equal(t, wantFields(res, ver), sortedKeys(r.json(t)), "%s fields at %s", res, v)
			}
			for _, f := range gatedFields {
				if f.value == nil || f.readOnly {
					continue // parent_node needs a node to name: nodechildren_test.go covers it
				}
				val := f.value
				if s, ok := val.(string); ok && f.name != "firmware_interface" {
					val = fmt.Sprintf("%s-%d", s, ver) // names are unique
				}
				want, wantPatch := http.StatusCreated, http.StatusOK
				if ver < f.from {
					want, wantPatch = http.StatusNotAcceptable, http.StatusNotAcceptable
				}
				r := create(f.resource, v, map[string]any{f.name: val})
				require.Equal(t, want, r.status, "create %s with %s at %s: %s", f.resource, f.name, v, r.body)
				if want == http.StatusCreated {
					assert.Equal(t, val, r.json(t)[f.name], "created %s shows %s", f.resource, f.name)
				} else {
					assert.Equal(t, "Request not acceptable.", r.fault(t))
				}
				if f.name == "firmware_interface" {
					continue // an interface is patched in its own states (nodechildren_test.go)
				}
				var patchVal any = fmt.Sprintf("%v-p", val)
				if b, ok := val.(bool); ok {
					patchVal = !b
				}
				r = e.do("PATCH", views[f.resource], v, []map[string]any{{"op": "add", "path": "/" + f.name, "value": patchVal}})
				require.Equal(t, wantPatch, r.status, "patch %s %s at %s: %s", f.resource, f.name, v, r.body)
				if wantPatch == http.StatusOK {
					assert.Equal(t, patchVal, r.json(t)[f.name])
				} else {
					assert.Equal(t, "Request not acceptable.", r.fault(t))
				}
			}
			for _, f := range gatedFilters {
				r := e.do("GET", f.path+"?"+f.param+"="+f.value, v, nil)
				if ver < f.from {
					require.Equal(t, http.StatusNotAcceptable, r.status, "%s?%s at %s: %s", f.path, f.param, v, r.body)
					assert.Equal(t, f.fault, r.fault(t))
				} else {
					assert.Equal(t, http.StatusOK, r.status, "%s?%s at %s: %s", f.path, f.param, v, r.body)
				}
			}
		})
	}
}
