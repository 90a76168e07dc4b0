package api

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/controller/store"
)

// nodeField is one field of the node document and the microversion that
// introduced it; older clients never see newer fields. key is the field's
// name as JSON, with the colon; put writes its value. Views are written
// straight into the response's buffer: a detailed page is thousands of
// values, and boxing each into an interface, building an object of them
// and then walking it cost as much as the rest of the request.
type nodeField struct {
	name string
	min  int
	key  string
	put  func(v *nodeRenderer, b *bytes.Buffer, n *store.Node) error
}

func viewField(name string, min int, put func(v *nodeRenderer, b *bytes.Buffer, n *store.Node) error) nodeField {
	var k bytes.Buffer
	appendString(&k, name)
	k.WriteByte(':')
	return nodeField{name: name, min: min, key: k.String(), put: put}
}

func viewStr(name string, min int, get func(n *store.Node) string) nodeField {
	return viewField(name, min, func(_ *nodeRenderer, b *bytes.Buffer, n *store.Node) error {
		appendString(b, get(n))
		return nil
	})
}

func viewOpt(name string, min int, get func(n *store.Node) *string) nodeField {
	return viewField(name, min, func(_ *nodeRenderer, b *bytes.Buffer, n *store.Node) error {
		appendOptString(b, get(n))
		return nil
	})
}

func viewBool(name string, min int, get func(n *store.Node) bool) nodeField {
	return viewField(name, min, func(_ *nodeRenderer, b *bytes.Buffer, n *store.Node) error {
		b.WriteString(strconv.FormatBool(get(n)))
		return nil
	})
}

func viewOptBool(name string, min int, get func(n *store.Node) *bool) nodeField {
	return viewField(name, min, func(_ *nodeRenderer, b *bytes.Buffer, n *store.Node) error {
		if p := get(n); p != nil {
			b.WriteString(strconv.FormatBool(*p))
		} else {
			b.WriteString("null")
		}
		return nil
	})
}

func viewTime(name string, min int, get func(n *store.Node) *time.Time) nodeField {
	return viewField(name, min, func(_ *nodeRenderer, b *bytes.Buffer, n *store.Node) error {
		appendTime(b, get(n))
		return nil
	})
}

// viewMap writes a map with its keys sorted, as encoding/json does; the
// values hide says are secret are written masked.
func viewMap(name string, min int, get func(n *store.Node) map[string]any, hide func(k string, v any) bool) nodeField {
	return viewField(name, min, func(_ *nodeRenderer, b *bytes.Buffer, n *store.Node) error {
		return appendMap(b, get(n), hide)
	})
}

// appendOptString writes s, or null.
func appendOptString(b *bytes.Buffer, s *string) {
	if s == nil {
		b.WriteString("null")
		return
	}
	appendString(b, *s)
}

// appendTime writes t as fmtTime does, or null.
func appendTime(b *bytes.Buffer, t *time.Time) {
	if t == nil {
		b.WriteString("null")
		return
	}
	var buf [40]byte
	b.WriteByte('"')
	b.Write(t.UTC().AppendFormat(buf[:0], timeLayout)) // digits and punctuation: nothing to escape
	b.WriteString(`+00:00"`)
}

const timeLayout = "2006-01-02T15:04:05.000000"

// fmtTime renders timestamps as Ironic does: microseconds and a +00:00 zone.
func fmtTime(t time.Time) string { return t.UTC().Format(timeLayout) + "+00:00" }

func ts(t *time.Time) any {
	if t == nil {
		return nil
	}
	return fmtTime(*t)
}

func sp(s *string) any {
	if s == nil {
		return nil
	}
	return *s
}

// provisionState is a provision state as the version knows it: before
// 1.2 "available" was NOSTATE (null); before 1.39 "inspect wait" was
// "inspecting".
func provisionState(b *bytes.Buffer, ver int, s *string, target bool) {
	switch {
	case s == nil:
	case !target && ver < 2 && *s == "available":
		s = nil
	case ver < 39 && *s == "inspect wait":
		s = &inspecting
	}
	appendOptString(b, s)
}

var inspecting = "inspecting"

var nodeFields = []nodeField{
	viewStr("uuid", 1, func(n *store.Node) string { return n.UUID }),
	viewOpt("name", 5, func(n *store.Node) *string { return n.Name }),
	viewStr("driver", 1, func(n *store.Node) string { return n.Driver }),
	viewMap("driver_info", 1, func(n *store.Node) map[string]any { return n.DriverInfo }, hideSecret),
	viewMap("driver_internal_info", 3, func(n *store.Node) map[string]any { return maskCommandArgs(n.InternalInfo()) }, hideInternal),
	viewMap("properties", 1, func(n *store.Node) map[string]any { return n.Properties }, nil),
	viewMap("instance_info", 1, func(n *store.Node) map[string]any { return n.InstanceInfo }, hideInstanceInfo),
	viewMap("extra", 1, func(n *store.Node) map[string]any { return n.Extra }, nil),
	viewOpt("instance_uuid", 1, func(n *store.Node) *string { return n.InstanceUUID }),
	viewOpt("chassis_uuid", 1, func(n *store.Node) *string { return n.ChassisUUID }),
	viewOpt("power_state", 1, func(n *store.Node) *string { return n.PowerState }),
	viewOpt("target_power_state", 1, func(n *store.Node) *string { return n.TargetPowerState }),
	viewField("provision_state", 1, func(v *nodeRenderer, b *bytes.Buffer, n *store.Node) error {
		provisionState(b, v.ver, &n.ProvisionState, false)
		return nil
	}),
	viewField("target_provision_state", 1, func(v *nodeRenderer, b *bytes.Buffer, n *store.Node) error {
		provisionState(b, v.ver, n.TargetProvisionState, true)
		return nil
	}),
	viewTime("provision_updated_at", 1, func(n *store.Node) *time.Time { return n.ProvisionUpdatedAt }),
	viewBool("maintenance", 1, func(n *store.Node) bool { return n.Maintenance }),
	viewOpt("maintenance_reason", 1, func(n *store.Node) *string { return n.MaintenanceReason }),
	viewOpt("last_error", 1, func(n *store.Node) *string { return n.LastError }),
	viewOpt("reservation", 1, func(n *store.Node) *string { return n.Reservation }),
	viewBool("console_enabled", 1, func(n *store.Node) bool { return n.ConsoleEnabled }),
	viewTime("created_at", 1, func(n *store.Node) *time.Time { return &n.CreatedAt }),
	viewTime("updated_at", 1, func(n *store.Node) *time.Time { return n.UpdatedAt }),
	viewTime("inspection_started_at", 6, func(n *store.Node) *time.Time { return n.InspectionStartedAt }),
	viewTime("inspection_finished_at", 6, func(n *store.Node) *time.Time { return n.InspectionFinishedAt }),
	viewMap("clean_step", 7, func(n *store.Node) map[string]any { return n.CleanStep }, nil),
	viewMap("raid_config", 12, func(n *store.Node) map[string]any { return n.RAIDConfig }, nil),
	viewMap("target_raid_config", 12, func(n *store.Node) map[string]any { return n.TargetRAIDConfig }, nil),
	viewStr("network_interface", 20, func(n *store.Node) string { return n.Interfaces.Network }),
	viewOpt("resource_class", 21, func(n *store.Node) *string { return n.ResourceClass }),
	viewStr("boot_interface", 31, func(n *store.Node) string { return n.Interfaces.Boot }),
	viewStr("console_interface", 31, func(n *store.Node) string { return n.Interfaces.Console }),
	viewStr("deploy_interface", 31, func(n *store.Node) string { return n.Interfaces.Deploy }),
	viewStr("inspect_interface", 31, func(n *store.Node) string { return n.Interfaces.Inspect }),
	viewStr("management_interface", 31, func(n *store.Node) string { return n.Interfaces.Management }),
	viewStr("power_interface", 31, func(n *store.Node) string { return n.Interfaces.Power }),
	viewStr("raid_interface", 31, func(n *store.Node) string { return n.Interfaces.RAID }),
	viewStr("vendor_interface", 31, func(n *store.Node) string { return n.Interfaces.Vendor }),
	viewStr("storage_interface", 33, func(n *store.Node) string { return n.Interfaces.Storage }),
	viewField("traits", 37, func(_ *nodeRenderer, b *bytes.Buffer, n *store.Node) error {
		return appendValue(b, n.Traits)
	}),
	viewStr("rescue_interface", 38, func(n *store.Node) string { return n.Interfaces.Rescue }),
	viewStr("bios_interface", biosVersion, func(n *store.Node) string { return n.Interfaces.BIOS }),
	viewOpt("fault", 42, func(n *store.Node) *string { return n.Fault }),
	viewMap("deploy_step", 44, func(n *store.Node) map[string]any { return n.DeployStep }, nil),
	viewStr("conductor_group", 46, func(n *store.Node) string { return n.ConductorGroup }),
	viewOptBool("automated_clean", 47, func(n *store.Node) *bool { return n.AutomatedClean }),
	viewBool("protected", 48, func(n *store.Node) bool { return n.Protected }),
	viewOpt("protected_reason", 48, func(n *store.Node) *string { return n.ProtectedReason }),
	viewField("conductor", 49, func(v *nodeRenderer, b *bytes.Buffer, n *store.Node) error {
		// the controller working on the node (its reservation), else this
		// one: any controller takes a resting node's next request
		if n.Reservation != nil {
			appendString(b, *n.Reservation)
		} else {
			appendString(b, v.host)
		}
		return nil
	}),
	viewOpt("owner", 50, func(n *store.Node) *string { return n.Owner }),
	viewOpt("description", 51, func(n *store.Node) *string { return n.Description }),
	viewOpt("allocation_uuid", 52, func(n *store.Node) *string { return n.AllocationUUID }),
	viewBool("retired", 61, func(n *store.Node) bool { return n.Retired }),
	viewOpt("retired_reason", 61, func(n *store.Node) *string { return n.RetiredReason }),
	viewOpt("lessee", 65, func(n *store.Node) *string { return n.Lessee }),
	viewMap("network_data", 66, func(n *store.Node) map[string]any { return n.NetworkData }, nil),
	viewOpt("boot_mode", 75, func(n *store.Node) *string { return n.BootMode }),
	viewOptBool("secure_boot", 75, func(n *store.Node) *bool { return n.SecureBoot }),
	viewOpt("shard", 82, func(n *store.Node) *string { return n.Shard }),
	viewOpt("parent_node", parentNodeVersion, func(n *store.Node) *string { return n.ParentNode }),
	viewStr("firmware_interface", firmwareVersion, firmwareInterface),
	viewMap("service_step", serviceVersion, func(n *store.Node) map[string]any { return n.ServiceStep }, nil),
	viewBool("disable_power_off", disablePowerOffVersion, func(n *store.Node) bool { return n.DisablePowerOff }),
	viewOpt("health", healthVersion, func(n *store.Node) *string { return n.Health }),
	viewOpt("instance_name", instanceNameVersion, func(n *store.Node) *string { return n.InstanceName }),
}

var nodeFieldMin = func() map[string]int {
	// links are always shown, and ?fields= may name them too: Ironic
	// checks fields against the node as shown, links included.
	m := map[string]int{"links": 1}
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

// nodeRenderer writes nodes for one request: the fields, version, links
// base and host are worked out once for the whole page.
type nodeRenderer struct {
	ver    int
	host   string
	fields []*nodeField
	// linksHead and linksMid are the JSON around a node's UUID in its
	// links: `[{"href":"<base>/v1/nodes/` and `","rel":"self"},{"href":"<base>/nodes/`.
	linksHead, linksMid string
	links               bool     // a "links" list (all views but the states')
	subs                []string // the sub-resources linked (detail only)
	// redact gives the fields a caller below Ironic's filter_threshold
	// may not see on node n, with what is shown instead (nil: none).
	redact func(n *store.Node) map[string]string
}

// nodeFieldsAt are the fields of a whole node at each microversion.
var nodeFieldsAt = func() [][]*nodeField {
	at := make([][]*nodeField, maxMinor+1)
	for ver := range at {
		for i := range nodeFields {
			if nodeFields[i].min <= ver {
				at[ver] = append(at[ver], &nodeFields[i])
			}
		}
	}
	return at
}()

// nodeSubs are the sub-resources a whole node links to, each from a later
// microversion than the one before: 1.1, 1.14, 1.24 and 1.32.
var nodeSubs = []string{"/ports", "/states", "/portgroups", "/volume"}

// newNodeRenderer renders nodes for r with the given fields (nil: every
// field the version has, plus the sub-resource links).
func (s *Server) newNodeRenderer(r *http.Request, fields []string) *nodeRenderer {
	ver := min(max(version(r.Context()), 0), maxMinor)
	v := &nodeRenderer{ver: ver, host: s.cond.Host(), links: true, redact: s.nodeRedactor(r.Context())}
	if fields == nil {
		v.fields = nodeFieldsAt[ver]
		subs := 1
		for _, from := range []int{14, 24, 32} {
			if ver >= from {
				subs++
			}
		}
		v.subs = nodeSubs[:subs]
	} else {
		for i, name := range fields {
			if f, ok := nodeFieldByName[name]; ok && f.min <= ver && !slices.Contains(fields[:i], name) {
				v.fields = append(v.fields, f)
			}
		}
	}
	// The base is escaped apart from the UUIDs and paths that follow it,
	// which start with ASCII: the same bytes as escaping the whole href.
	var b bytes.Buffer
	base := baseFromContext(r, s)
	b.WriteString(`[{"href":`)
	appendString(&b, base+"/v1/nodes/")
	head := b.Len() - 1 // without the closing quote
	b.WriteString(`","rel":"self"},{"href":`)
	appendString(&b, base+"/nodes/")
	all := b.String()
	v.linksHead, v.linksMid = all[:head], all[head+1:len(all)-1]
	return v
}

// appendNode writes n as a JSON object.
func (v *nodeRenderer) appendNode(b *bytes.Buffer, n *store.Node) error {
	b.WriteByte('{')
	var hidden map[string]string
	if v.redact != nil {
		hidden = v.redact(n)
	}
	for i, f := range v.fields {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString(f.key)
		if raw, ok := hidden[f.name]; ok {
			b.WriteString(raw)
			continue
		}
		if err := f.put(v, b, n); err != nil {
			return fmt.Errorf("node %s: %s: %w", n.UUID, f.name, err)
		}
	}
	if v.links {
		if len(v.fields) > 0 {
			b.WriteByte(',')
		}
		b.WriteString(`"links":`)
		v.appendLinks(b, n.UUID, "")
		for _, sub := range v.subs {
			b.WriteString(`,"`)
			b.WriteString(sub[1:])
			b.WriteString(`":`)
			v.appendLinks(b, n.UUID, sub)
		}
	}
	b.WriteByte('}')
	return nil
}

// appendLinks writes linksAt(base, "nodes/"+uuid+sub).
func (v *nodeRenderer) appendLinks(b *bytes.Buffer, uuid, sub string) {
	b.WriteString(v.linksHead)
	appendStringBody(b, uuid)
	b.WriteString(sub)
	b.WriteString(v.linksMid)
	appendStringBody(b, uuid)
	b.WriteString(sub)
	b.WriteString(`","rel":"bookmark"}]`)
}

// renderedJSON is a value already written as JSON.
type renderedJSON []byte

func (j renderedJSON) MarshalJSON() ([]byte, error) { return j, nil }

// nodeView renders one node for the negotiated version, as a list does.
// fields == nil means every field plus the sub-resource links.
func (s *Server) nodeView(r *http.Request, n *store.Node, fields []string) (renderedJSON, error) {
	return s.newNodeRenderer(r, fields).render(n)
}

func (v *nodeRenderer) render(n *store.Node) (renderedJSON, error) {
	var b bytes.Buffer
	if err := v.appendNode(&b, n); err != nil {
		return nil, err
	}
	return b.Bytes(), nil
}

var nodeFieldByName = func() map[string]*nodeField {
	m := map[string]*nodeField{}
	for i := range nodeFields {
		m[nodeFields[i].name] = &nodeFields[i]
	}
	return m
}()

// summaryFields can be served from store.NodeSummary (indexed columns).
var summaryFields = map[string]bool{"links": true, "uuid": true, "name": true, "instance_uuid": true, "maintenance": true,
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

// The hide functions say which values of a map are masked.

func hideSecret(k string, v any) bool { return isSecretKey(k) && v != nil && v != "" }

func hideInternal(k string, v any) bool { return store.SecretInternalKey(k) && v != nil }

// maskCommandArgs masks the secrets in the arguments of the agent command
// driver_internal_info shows: write_image carries the tenant's config
// drive (user_data may hold credentials), which readers of the node (an
// owner's reader of a leased node among them) must not see while the step
// runs. info is InternalInfo's fresh copy, changed in place.
func maskCommandArgs(info map[string]any) map[string]any {
	cmd, _ := info["agent_command"].(map[string]any)
	step, _ := cmd["step"].(map[string]any)
	args, _ := step["args"].(map[string]any)
	if v, ok := args["configdrive"]; ok && v != nil {
		args["configdrive"] = "******"
	}
	return info
}

func hideInstanceInfo(k string, v any) bool {
	return (k == "configdrive" || k == "image_url" || k == "rescue_password") && v != nil
}
