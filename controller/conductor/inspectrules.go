package conductor

// Inspection rules at the end of an inspection: the stored rules (API
// 1.96) and the built-in ones (Config.InspectionRules) run through
// controller/inspectrules on the node as it was read, its ports, its
// inventory and plugin data. What they change in the node is applied in
// the same write that ends the inspection (ruleOutcome.apply); a rule
// that fails fails the inspection and changes nothing.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"regexp"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/anvil-metal/anvil/controller/inspectrules"
	"github.com/anvil-metal/anvil/controller/store"
)

// ruleOutcome is what the rules left to write with the inspection's end.
type ruleOutcome struct {
	before, after map[string]any // the node's fields as rules see them
	// events are the node history entries: which rule changed what.
	events []*store.Event
	c      *core
	// manage: a rule asked for the node to be managed (discovery only).
	manage bool
}

// applyInspectionRules runs every inspection rule on n, given its
// inventory and plugin data: the one entry point of both inspections, in
// band (finishInspection) and out of band. Port changes are written
// here; the node's are returned for the write that ends the inspection:
// outcome.apply(m) inside its mutate, outcome.events with it. An error
// from a rule is an *inspectrules.ExecError: ruleFailure gives the
// inspection's last_error.
func applyInspectionRules(ctx context.Context, c *core, n *store.Node, inventory, pluginData map[string]any) (*ruleOutcome, error) {
	rules := slices.Clone(c.cfg.InspectionRules)
	stored, err := loadStoredRules(ctx, c.st)
	if err != nil {
		return nil, err
	}
	rules = append(stored, rules...) // stored rules first, as Ironic lists them
	out := &ruleOutcome{c: c}
	if len(rules) == 0 {
		return out, nil
	}
	doc, err := nodeDoc(n)
	if err != nil {
		return nil, err
	}
	ports, err := c.st.ListPorts(ctx, store.ResourceFilter{NodeUUID: &n.UUID}, store.Page{})
	if err != nil {
		return nil, fmt.Errorf("inspection rules: list ports of node %s: %w", n.UUID, err)
	}
	portDocs := make([]map[string]any, 0, len(ports))
	for _, p := range ports {
		d, err := toDoc(p)
		if err != nil {
			return nil, err
		}
		portDocs = append(portDocs, d)
	}
	res, err := inspectrules.Run(ctx, rules, inspectrules.Subject{Node: doc, Ports: portDocs, Inventory: inventory, PluginData: pluginData},
		inspectrules.Options{Logger: c.log, CheckNode: ruleFieldCheck(c.drivers), CheckPort: checkPortField})
	if err != nil {
		return nil, err
	}
	for _, id := range res.PortsChanged {
		if err := writeRulePort(ctx, c.st, ports, res.Ports, id); err != nil {
			return nil, err
		}
	}
	out.before, out.after, out.manage = doc, res.Node, res.Manage
	for _, ch := range res.Changes {
		out.events = append(out.events, c.newEvent(n.UUID, "INFO", "inspection", "inspection "+ch))
	}
	return out, nil
}

// ruleFailure is the last_error of an inspection a rule failed, and
// whether err is a rule's failure (else it is the store's, to retry).
func ruleFailure(nodeUUID string, err error) (string, bool) {
	var re *inspectrules.ExecError
	if !errors.As(err, &re) {
		return "", false
	}
	return fmt.Sprintf("Inspection rule %s failed on node %s: %s", re.Rule, nodeUUID, re.Msg), true
}

// loadStoredRules reads the main phase's rules, every page.
func loadStoredRules(ctx context.Context, st store.Store) ([]inspectrules.Rule, error) {
	var out []inspectrules.Rule
	p := store.Page{Limit: 500}
	for {
		page, err := st.ListInspectionRules(ctx, inspectrules.PhaseMain, p)
		if err != nil {
			return nil, fmt.Errorf("inspection rules: %w", err)
		}
		for _, r := range page {
			doc := map[string]any{"uuid": r.UUID, "phase": r.Phase, "priority": float64(r.Priority), "sensitive": r.Sensitive,
				"conditions": anyList(r.Conditions), "actions": anyList(r.Actions)}
			// builtIn: a stored rule was checked when written; a check
			// added since must not stop every inspection.
			parsed, err := inspectrules.Parse(doc, true)
			if err != nil {
				return nil, fmt.Errorf("inspection rule %s: %w", r.UUID, err)
			}
			out = append(out, *parsed)
		}
		if len(page) < p.Limit {
			return out, nil
		}
		p.Marker = page[len(page)-1].UUID
	}
}

func anyList(l []map[string]any) []any {
	out := make([]any, len(l))
	for i, m := range l {
		out[i] = m
	}
	return out
}

// toDoc is a value as a JSON document (Ironic's field names).
func toDoc(v any) (map[string]any, error) {
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("inspection rules: encode: %w", err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, fmt.Errorf("inspection rules: decode: %w", err)
	}
	return doc, nil
}

// nodeDoc is the node as rules see it: its API fields, interfaces as
// boot_interface and so on.
func nodeDoc(n *store.Node) (map[string]any, error) {
	c := *n
	c.Normalize()
	doc, err := toDoc(&c)
	if err != nil {
		return nil, err
	}
	if ifaces, ok := doc["interfaces"].(map[string]any); ok {
		maps.Copy(doc, ifaces)
		delete(doc, "interfaces")
	}
	return doc, nil
}

// changed lists the top-level fields the rules changed.
func (o *ruleOutcome) changed() []string {
	var out []string
	for _, k := range inspectrules.SettableNodeFields {
		if !reflect.DeepEqual(o.before[k], o.after[k]) {
			out = append(out, k)
		}
	}
	if !reflect.DeepEqual(o.before["traits"], o.after["traits"]) {
		out = append(out, "traits")
	}
	return out
}

// apply writes what the rules changed onto m, the node being written
// (re-read by the write, so only the changed fields are set). A driver
// the rules set brings its default interfaces where the node's are not
// among the new driver's.
func (o *ruleOutcome) apply(m *store.Node) error {
	if o == nil || o.after == nil {
		return nil
	}
	m.Normalize()
	set := o.changed()
	for _, k := range set {
		if err := setNodeField(m, k, o.after[k]); err != nil {
			return fmt.Errorf("inspection rules: node %s field %s: %w", m.UUID, k, err)
		}
	}
	if slices.Contains(set, "driver") {
		hw := HardwareInterfaces(m.Driver)
		for _, t := range InterfaceTypes() {
			p := interfacePtr(&m.Interfaces, t)
			if p != nil && !slices.Contains(set, t+"_interface") && !slices.Contains(hw[t].Enabled, *p) {
				*p = hw[t].Default
			}
		}
	}
	return nil
}

// ruleFieldCheck checks a value a rule leaves in a node field: the type
// the store keeps, a valid name, a driver this controller runs.
func ruleFieldCheck(drivers map[string]Driver) func(string, any) error {
	return func(field string, v any) error {
		var n store.Node
		if err := setNodeField(&n, field, v); err != nil {
			return err
		}
		switch {
		case field == "driver":
			if _, ok := drivers[n.Driver]; !ok {
				return fmt.Errorf("no conductor service registered which supports driver %s", n.Driver)
			}
		case field == "name" && n.Name != nil:
			if _, err := uuid.Parse(*n.Name); err == nil || !ruleNameRE.MatchString(*n.Name) {
				return fmt.Errorf("expected a logical name but received %q: use 1 to 255 characters from A-Z a-z 0-9 - . _ ~", *n.Name)
			}
		}
		return nil
	}
}

// ruleNameRE is the API's node name rule (RFC 3986 unreserved characters).
var ruleNameRE = regexp.MustCompile(`^[A-Za-z0-9\-._~]{1,255}$`)

func interfacePtr(i *store.Interfaces, t string) *string {
	return map[string]*string{"bios": &i.BIOS, "boot": &i.Boot, "console": &i.Console, "deploy": &i.Deploy,
		"firmware": &i.Firmware, "inspect": &i.Inspect, "management": &i.Management, "network": &i.Network,
		"power": &i.Power, "raid": &i.RAID, "rescue": &i.Rescue, "storage": &i.Storage, "vendor": &i.Vendor}[t]
}

// setNodeField sets one field rules may write, by its Ironic name.
func setNodeField(n *store.Node, field string, v any) error {
	optStr := func(p **string) error {
		switch x := v.(type) {
		case nil:
			*p = nil
		case string:
			if len(x) > 255 {
				return fmt.Errorf("%q is too long", x[:32]+"...")
			}
			*p = &x
		default:
			return fmt.Errorf("%v is not a string", v)
		}
		return nil
	}
	obj := func(p *map[string]any) error {
		switch x := v.(type) {
		case nil:
			*p = map[string]any{}
		case map[string]any:
			*p = x
		default:
			return fmt.Errorf("%v is not an object", v)
		}
		return nil
	}
	if t, ok := strings.CutSuffix(field, "_interface"); ok {
		p := interfacePtr(&n.Interfaces, t)
		s, isStr := v.(string)
		if p == nil || !isStr && v != nil {
			return fmt.Errorf("%v is not an interface name", v)
		}
		*p = s
		return nil
	}
	switch field {
	case "name":
		return optStr(&n.Name)
	case "description":
		return optStr(&n.Description)
	case "resource_class":
		return optStr(&n.ResourceClass)
	case "owner":
		return optStr(&n.Owner)
	case "lessee":
		return optStr(&n.Lessee)
	case "shard":
		return optStr(&n.Shard)
	case "retired_reason":
		return optStr(&n.RetiredReason)
	case "driver", "conductor_group":
		var s *string
		if err := optStr(&s); err != nil {
			return err
		}
		if field == "conductor_group" {
			n.ConductorGroup = strings.ToLower(deref(s))
			return nil
		}
		if s == nil || *s == "" {
			return fmt.Errorf("driver is required and cannot be removed")
		}
		n.Driver = *s
	case "driver_info":
		return obj(&n.DriverInfo)
	case "properties":
		return obj(&n.Properties)
	case "extra":
		return obj(&n.Extra)
	case "instance_info":
		return obj(&n.InstanceInfo)
	case "network_data":
		return obj(&n.NetworkData)
	case "retired", "automated_clean":
		b, ok := v.(bool)
		if !ok && (v != nil || field == "retired") {
			return fmt.Errorf("%v is not a boolean", v)
		}
		if field == "retired" {
			n.Retired = b
		} else if v == nil {
			n.AutomatedClean = nil
		} else {
			n.AutomatedClean = &b
		}
	case "traits":
		l, _ := v.([]any)
		n.Traits = make([]string, 0, len(l))
		for _, t := range l {
			s, _ := t.(string)
			n.Traits = append(n.Traits, s)
		}
	default:
		return fmt.Errorf("%s cannot be changed by an inspection rule", field)
	}
	return nil
}

// checkPortField checks a value a rule leaves in a port field.
func checkPortField(field string, v any) error {
	var p store.Port
	return setPortField(&p, field, v)
}

func setPortField(p *store.Port, field string, v any) error {
	switch field {
	case "name", "physical_network":
		s, ok := v.(string)
		if !ok && v != nil {
			return fmt.Errorf("%v is not a string", v)
		}
		ptr := &p.Name
		if field == "physical_network" {
			ptr = &p.PhysicalNetwork
		}
		*ptr = nil
		if v != nil {
			*ptr = &s
		}
	case "extra", "local_link_connection":
		m, ok := v.(map[string]any)
		if !ok && v != nil {
			return fmt.Errorf("%v is not an object", v)
		}
		if m == nil {
			m = map[string]any{}
		}
		if field == "extra" {
			p.Extra = m
		} else {
			p.LocalLinkConnection = m
		}
	case "pxe_enabled", "is_smartnic":
		b, ok := v.(bool)
		if !ok {
			return fmt.Errorf("%v is not a boolean", v)
		}
		if field == "pxe_enabled" {
			p.PXEEnabled = b
		} else {
			p.IsSmartNIC = b
		}
	default:
		return fmt.Errorf("%s cannot be changed by an inspection rule", field)
	}
	return nil
}

// writeRulePort writes the fields rules changed on one port.
func writeRulePort(ctx context.Context, st store.Store, ports []*store.Port, after []map[string]any, id string) error {
	for i, p := range ports {
		if p.UUID != id {
			continue
		}
		before, err := toDoc(p)
		if err != nil {
			return err
		}
		next := *p
		for _, f := range inspectrules.SettablePortFields {
			if !reflect.DeepEqual(before[f], after[i][f]) {
				if err := setPortField(&next, f, after[i][f]); err != nil {
					return fmt.Errorf("inspection rules: port %s field %s: %w", id, f, err)
				}
			}
		}
		if err := st.UpdatePort(ctx, &next); err != nil {
			return fmt.Errorf("inspection rules: update port %s: %w", id, err)
		}
	}
	return nil
}
