package api

import (
	"context"
	"net/http"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/controller/store"
)

// nodeField is one field of the node document and the microversion that
// introduced it; older clients never see newer fields.
type nodeField struct {
	name string
	min  int
	get  func(n *store.Node) any
}

func ts(t *time.Time) any {
	if t == nil {
		return nil
	}
	return fmtTime(*t)
}

// fmtTime renders timestamps as Ironic does: microseconds and a +00:00 zone.
func fmtTime(t time.Time) string { return t.UTC().Format("2006-01-02T15:04:05.000000") + "+00:00" }

func sp(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

var nodeFields = []nodeField{
	{"uuid", 1, func(n *store.Node) any { return n.UUID }},
	{"name", 5, func(n *store.Node) any { return sp(n.Name) }},
	{"driver", 1, func(n *store.Node) any { return n.Driver }},
	{"driver_info", 1, func(n *store.Node) any { return maskSecrets(n.DriverInfo) }},
	{"driver_internal_info", 3, func(n *store.Node) any { return maskInternal(n.InternalInfo()) }},
	{"properties", 1, func(n *store.Node) any { return n.Properties }},
	{"instance_info", 1, func(n *store.Node) any { return maskInstanceInfo(n.InstanceInfo) }},
	{"extra", 1, func(n *store.Node) any { return n.Extra }},
	{"instance_uuid", 1, func(n *store.Node) any { return sp(n.InstanceUUID) }},
	{"chassis_uuid", 1, func(n *store.Node) any { return sp(n.ChassisUUID) }},
	{"power_state", 1, func(n *store.Node) any { return sp(n.PowerState) }},
	{"target_power_state", 1, func(n *store.Node) any { return sp(n.TargetPowerState) }},
	{"provision_state", 1, func(n *store.Node) any { return n.ProvisionState }},
	{"target_provision_state", 1, func(n *store.Node) any { return sp(n.TargetProvisionState) }},
	{"provision_updated_at", 1, func(n *store.Node) any { return ts(n.ProvisionUpdatedAt) }},
	{"maintenance", 1, func(n *store.Node) any { return n.Maintenance }},
	{"maintenance_reason", 1, func(n *store.Node) any { return sp(n.MaintenanceReason) }},
	{"last_error", 1, func(n *store.Node) any { return sp(n.LastError) }},
	{"reservation", 1, func(n *store.Node) any { return sp(n.Reservation) }},
	{"console_enabled", 1, func(n *store.Node) any { return n.ConsoleEnabled }},
	{"created_at", 1, func(n *store.Node) any { return fmtTime(n.CreatedAt) }},
	{"updated_at", 1, func(n *store.Node) any { return ts(n.UpdatedAt) }},
	{"inspection_started_at", 6, func(n *store.Node) any { return ts(n.InspectionStartedAt) }},
	{"inspection_finished_at", 6, func(n *store.Node) any { return ts(n.InspectionFinishedAt) }},
	{"clean_step", 7, func(n *store.Node) any { return n.CleanStep }},
	{"raid_config", 12, func(n *store.Node) any { return n.RAIDConfig }},
	{"target_raid_config", 12, func(n *store.Node) any { return n.TargetRAIDConfig }},
	{"network_interface", 20, func(n *store.Node) any { return n.Interfaces.Network }},
	{"resource_class", 21, func(n *store.Node) any { return sp(n.ResourceClass) }},
	{"boot_interface", 31, func(n *store.Node) any { return n.Interfaces.Boot }},
	{"console_interface", 31, func(n *store.Node) any { return n.Interfaces.Console }},
	{"deploy_interface", 31, func(n *store.Node) any { return n.Interfaces.Deploy }},
	{"inspect_interface", 31, func(n *store.Node) any { return n.Interfaces.Inspect }},
	{"management_interface", 31, func(n *store.Node) any { return n.Interfaces.Management }},
	{"power_interface", 31, func(n *store.Node) any { return n.Interfaces.Power }},
	{"raid_interface", 31, func(n *store.Node) any { return n.Interfaces.RAID }},
	{"vendor_interface", 31, func(n *store.Node) any { return n.Interfaces.Vendor }},
	{"storage_interface", 33, func(n *store.Node) any { return n.Interfaces.Storage }},
	{"traits", 37, func(n *store.Node) any { return n.Traits }},
	{"rescue_interface", 38, func(n *store.Node) any { return n.Interfaces.Rescue }},
	{"bios_interface", 40, func(n *store.Node) any { return n.Interfaces.BIOS }},
	{"fault", 42, func(n *store.Node) any { return sp(n.Fault) }},
	{"deploy_step", 44, func(n *store.Node) any { return n.DeployStep }},
	{"conductor_group", 46, func(n *store.Node) any { return n.ConductorGroup }},
	{"automated_clean", 47, func(n *store.Node) any {
		if n.AutomatedClean == nil {
			return nil
		}
		return *n.AutomatedClean
	}},
	{"protected", 48, func(n *store.Node) any { return n.Protected }},
	{"protected_reason", 48, func(n *store.Node) any { return sp(n.ProtectedReason) }},
	{"conductor", 49, func(n *store.Node) any { return nil }}, // filled by the view with our host
	{"owner", 50, func(n *store.Node) any { return sp(n.Owner) }},
	{"description", 51, func(n *store.Node) any { return sp(n.Description) }},
	{"allocation_uuid", 52, func(n *store.Node) any { return sp(n.AllocationUUID) }},
	{"retired", 61, func(n *store.Node) any { return n.Retired }},
	{"retired_reason", 61, func(n *store.Node) any { return sp(n.RetiredReason) }},
	{"lessee", 65, func(n *store.Node) any { return sp(n.Lessee) }},
	{"network_data", 66, func(n *store.Node) any { return n.NetworkData }},
	{"boot_mode", 75, func(n *store.Node) any { return sp(n.BootMode) }},
	{"secure_boot", 75, func(n *store.Node) any {
		if n.SecureBoot == nil {
			return nil
		}
		return *n.SecureBoot
	}},
	{"shard", 82, func(n *store.Node) any { return sp(n.Shard) }},
}

var nodeFieldMin = func() map[string]int {
	m := map[string]int{}
	for _, f := range nodeFields {
		m[f.name] = f.min
	}
	return m
}()

// listFields are what a plain (non-detail) list shows.
var listFields = []string{"uuid", "instance_uuid", "maintenance", "power_state", "provision_state", "name"}

// checkFields refuses unknown fields (400) and fields above the version (406).
func checkFields(ctx context.Context, fields []string, known map[string]int) error {
	for _, f := range fields {
		min, ok := known[f]
		if !ok {
			return badRequest("Field(s) %q are not valid", f)
		}
		if err := atLeast(ctx, min); err != nil {
			return err
		}
	}
	return nil
}

// nodeView renders a node for the negotiated version. fields == nil means
// every field plus the sub-resource links.
func (s *Server) nodeView(r *http.Request, n *store.Node, fields []string) *object {
	ver := version(r.Context())
	out := newObject(len(nodeFields) + 6)
	if fields == nil {
		for _, f := range nodeFields {
			if f.min <= ver {
				out.add(f.name, f.get(n))
			}
		}
	} else {
		for _, name := range fields {
			if f, ok := nodeFieldByName[name]; ok && f.min <= ver {
				out.set(name, f.get(n))
			}
		}
	}
	if _, ok := out.get("conductor"); ok {
		// the controller working on the node (its reservation), else
		// this one: any controller takes a resting node's next request
		host := s.cond.Host()
		if n.Reservation != nil {
			host = *n.Reservation
		}
		out.set("conductor", host)
	}
	if ps, _ := out.get("provision_state"); ver < 2 && ps == "available" {
		out.set("provision_state", nil) // before 1.2 "available" was NOSTATE
	}
	if ver < 39 {
		for _, k := range []string{"provision_state", "target_provision_state"} {
			if v, _ := out.get(k); v == "inspect wait" {
				out.set(k, "inspecting")
			}
		}
	}
	base := baseFromContext(r, s)
	self := "nodes/" + n.UUID
	out.set("links", linksAt(base, self))
	if fields == nil {
		out.add("ports", linksAt(base, self+"/ports"))
		if ver >= 14 {
			out.add("states", linksAt(base, self+"/states"))
		}
		if ver >= 24 {
			out.add("portgroups", linksAt(base, self+"/portgroups"))
		}
		if ver >= 32 {
			out.add("volume", linksAt(base, self+"/volume"))
		}
	}
	return out
}

var nodeFieldByName = func() map[string]nodeField {
	m := map[string]nodeField{}
	for _, f := range nodeFields {
		m[f.name] = f
	}
	return m
}()

// summaryFields can be served from store.NodeSummary (indexed columns).
var summaryFields = map[string]bool{"uuid": true, "name": true, "instance_uuid": true, "maintenance": true,
	"power_state": true, "provision_state": true, "reservation": true}

func summaryNode(s *store.NodeSummary) *store.Node {
	return &store.Node{UUID: s.UUID, Name: s.Name, InstanceUUID: s.InstanceUUID, Maintenance: s.Maintenance,
		PowerState: s.PowerState, ProvisionState: s.ProvisionState, Reservation: s.Reservation}
}

const masked = bmc.MaskedValue

// isSecretKey matches the driver_info keys that are masked: the bmc
// package owns the list (it also keeps them out of its logs); private keys
// are masked too.
func isSecretKey(k string) bool {
	k = strings.ToLower(k)
	return bmc.IsSecret(k) || strings.HasSuffix(k, "_key") || k == "key"
}

// The mask helpers copy a map only when something in it must be hidden:
// node lists render these maps for every node.

func maskSecrets(m map[string]any) map[string]any {
	hide := false
	for k, v := range m {
		hide = hide || (isSecretKey(k) && v != nil && v != "")
	}
	if !hide {
		return m
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		if isSecretKey(k) && v != nil && v != "" {
			v = masked
		}
		out[k] = v
	}
	return out
}

func maskInternal(m map[string]any) map[string]any {
	if m[store.TokenKey] == nil {
		return m
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		if k == store.TokenKey && v != nil {
			v = masked
		}
		out[k] = v
	}
	return out
}

func maskInstanceInfo(m map[string]any) map[string]any {
	if m["configdrive"] == nil && m["image_url"] == nil && m["rescue_password"] == nil {
		return m
	}
	out := make(map[string]any, len(m))
	for k, v := range m {
		if (k == "configdrive" || k == "image_url" || k == "rescue_password") && v != nil {
			v = masked
		}
		out[k] = v
	}
	return out
}
