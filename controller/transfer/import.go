package transfer

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/anvil-metal/anvil/controller/store"
)

// ImportOptions tune Import; there are none yet.
type ImportOptions struct{}

// Import reads a document written by Export and creates its fleet in dst,
// which must be empty (no node, no allocation): merging two fleets is not
// what this is for, and an import into a used database would mix them.
//
// The Store interface has no transaction spanning many objects, so an
// import is all-or-nothing only in effect: when r is seekable (a file), the
// whole document is read and checked first, and nothing is written unless
// it is valid; a failure while writing (a database error, or a document
// from a pipe that turns out malformed half-way) returns the Summary of
// what was written and an error saying the target is incomplete and must
// be dropped and the import retried into an empty database.
//
// Run it with no controller attached to dst.
func Import(ctx context.Context, dst Target, r io.Reader, _ ImportOptions) (Summary, error) {
	if err := refuseNonEmpty(ctx, dst); err != nil {
		return Summary{}, err
	}
	if rs, ok := r.(io.ReadSeeker); ok {
		if start, err := rs.Seek(0, io.SeekCurrent); err == nil {
			if _, err := decode(ctx, rs, discard{}); err != nil {
				return Summary{}, err
			}
			if _, err := rs.Seek(start, io.SeekStart); err != nil {
				return Summary{}, fmt.Errorf("rewind the document after checking it: %w", err)
			}
		}
	}
	sum, err := decode(ctx, r, dst)
	if err != nil && sum.Total() > 0 {
		return sum, fmt.Errorf("import failed after writing %s: %w; the target database is incomplete: "+
			"drop it (or remove the SQLite file) and import again into an empty database", sum, err)
	}
	return sum, err
}

func refuseNonEmpty(ctx context.Context, dst Target) error {
	one := store.Page{Limit: 1}
	for _, check := range []func() error{
		func() error {
			nodes, err := dst.ListNodeSummaries(ctx, store.NodeFilter{}, one)
			return holdsNone("nodes", nodes, err, func(n *store.NodeSummary) string { return n.UUID })
		},
		func() error {
			chassis, err := dst.ListChassis(ctx, one)
			return holdsNone("chassis", chassis, err, func(c *store.Chassis) string { return c.UUID })
		},
		func() error {
			allocs, err := dst.ListAllocations(ctx, store.ResourceFilter{}, one)
			return holdsNone("allocations", allocs, err, func(a *store.Allocation) string { return a.UUID })
		},
		func() error {
			templates, err := dst.ListDeployTemplates(ctx, one)
			return holdsNone("deploy templates", templates, err, func(t *store.DeployTemplate) string { return t.Name })
		},
		func() error {
			runbooks, err := dst.ListRunbooks(ctx, store.RunbookFilter{}, one)
			return holdsNone("runbooks", runbooks, err, func(rb *store.Runbook) string { return rb.Name })
		},
		func() error {
			rules, err := dst.ListInspectionRules(ctx, "", one)
			return holdsNone("inspection rules", rules, err, func(r *store.InspectionRule) string { return r.UUID })
		},
	} {
		if err := check(); err != nil {
			return err
		}
	}
	return nil
}

// holdsNone checks one kind's first page of the target (err: listing it
// failed): any object in it fails the import, named by name.
func holdsNone[T any](kind string, first []*T, err error, name func(*T) string) error {
	if err != nil {
		return fmt.Errorf("check the target is empty: %w", err)
	}
	if len(first) > 0 {
		return fmt.Errorf("%w: it holds %s (e.g. %s); import only into a new, empty database", ErrNotEmpty, kind, name(first[0]))
	}
	return nil
}

// discard is the Target of the checking pass.
type discard struct{}

func (discard) ListNodeSummaries(context.Context, store.NodeFilter, store.Page) ([]*store.NodeSummary, error) {
	return nil, nil
}

func (discard) ListAllocations(context.Context, store.ResourceFilter, store.Page) ([]*store.Allocation, error) {
	return nil, nil
}
func (discard) ListChassis(context.Context, store.Page) ([]*store.Chassis, error) { return nil, nil }
func (discard) CreateChassis(context.Context, *store.Chassis) error               { return nil }
func (discard) CreateVolumeConnector(context.Context, *store.VolumeConnector) error {
	return nil
}
func (discard) CreateVolumeTarget(context.Context, *store.VolumeTarget) error { return nil }
func (discard) CreateNode(context.Context, *store.Node) error                 { return nil }
func (discard) CreatePortgroup(context.Context, *store.Portgroup) error       { return nil }
func (discard) CreatePort(context.Context, *store.Port) error                 { return nil }
func (discard) CreateAllocation(context.Context, *store.Allocation) error     { return nil }
func (discard) AppendEvent(context.Context, *store.Event) error               { return nil }
func (discard) PutInventory(context.Context, string, []byte) error            { return nil }
func (discard) PutStepResult(context.Context, *store.StepResult) error        { return nil }
func (discard) ListDeployTemplates(context.Context, store.Page) ([]*store.DeployTemplate, error) {
	return nil, nil
}
func (discard) CreateDeployTemplate(context.Context, *store.DeployTemplate) error { return nil }
func (discard) ListRunbooks(context.Context, store.RunbookFilter, store.Page) ([]*store.Runbook, error) {
	return nil, nil
}
func (discard) CreateRunbook(context.Context, *store.Runbook) error { return nil }
func (discard) ListInspectionRules(context.Context, string, store.Page) ([]*store.InspectionRule, error) {
	return nil, nil
}
func (discard) CreateInspectionRule(context.Context, *store.InspectionRule) error { return nil }
func (discard) PutEraseRecords(context.Context, []*store.EraseRecord) error {
	return nil
}

// decoder reads a document token by token and writes each object to dst as
// soon as it is read. It checks what the stores would not: required
// fields, unique UUIDs, names and addresses, and that every reference
// points to an object earlier in the document (sections come in dependency
// order).
type decoder struct {
	dec *json.Decoder
	dst Target
	sum Summary

	nodes, nodeNames map[string]bool
	// resources maps the UUIDs of portgroups, ports and allocations to
	// their kind: both stores keep them in one table, unique across kinds.
	resources map[string]string
	// names and addresses are unique per kind (an index on kind and value).
	pgNames, pgAddrs, portNames, portAddrs, allocNames map[string]bool
	inventories                                        map[string]bool
	// chassis are the chassis created so far; connectorIDs the (type,
	// connector_id) and bootIndexes the (node, boot_index) of volumes.
	chassis, connectorIDs, bootIndexes map[string]bool
	now                                func() time.Time
	templateUUIDs, templateNames       map[string]bool
	runbookUUIDs, runbookNames         map[string]bool
	ruleUUIDs                          map[string]bool
}

func decode(ctx context.Context, r io.Reader, dst Target) (Summary, error) {
	d := &decoder{dec: json.NewDecoder(bufio.NewReaderSize(r, 64<<10)), dst: dst,
		nodes: map[string]bool{}, nodeNames: map[string]bool{}, resources: map[string]string{},
		pgNames: map[string]bool{}, pgAddrs: map[string]bool{}, portNames: map[string]bool{}, portAddrs: map[string]bool{},
		allocNames: map[string]bool{}, inventories: map[string]bool{},
		chassis: map[string]bool{}, connectorIDs: map[string]bool{}, bootIndexes: map[string]bool{}, now: time.Now,
		templateUUIDs: map[string]bool{}, templateNames: map[string]bool{},
		runbookUUIDs: map[string]bool{}, runbookNames: map[string]bool{}, ruleUUIDs: map[string]bool{}}
	// The document is ours: a field this controller does not know is a typo
	// or a newer exporter's, and dropping it silently would lose data.
	d.dec.DisallowUnknownFields()
	err := d.document(ctx)
	return d.sum, err
}

// fail wraps err with where in the document it happened: a member or an
// element, with the byte offset where it starts. (The offset in a
// json.SyntaxError from a Decoder is not the offset in the stream.)
func (d *decoder) fail(where string, err error) error {
	var syn *json.SyntaxError
	switch {
	case errors.As(err, &syn):
		return fmt.Errorf("%w: %s: malformed JSON: %v", ErrInvalid, where, err)
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return fmt.Errorf("%w: %s: the document ends early (truncated?) at byte %d", ErrInvalid, where, d.dec.InputOffset())
	}
	return fmt.Errorf("%w: %s: %v", ErrInvalid, where, err)
}

// at names a place in the document by the current offset.
func (d *decoder) at(what string) string {
	return fmt.Sprintf("%s at byte %d", what, d.dec.InputOffset())
}

// delim reads the next token, which must be want.
func (d *decoder) delim(where string, want json.Delim) error {
	tok, err := d.dec.Token()
	if err != nil {
		return d.fail(where, err)
	}
	if got, ok := tok.(json.Delim); !ok || got != want {
		return d.fail(where, fmt.Errorf("expected %q, found %v", want, describe(tok)))
	}
	return nil
}

func describe(tok json.Token) string {
	switch v := tok.(type) {
	case json.Delim:
		return fmt.Sprintf("%q", string(v))
	case string:
		return fmt.Sprintf("string %q", v)
	case nil:
		return "null"
	}
	return fmt.Sprintf("%v", tok)
}

func (d *decoder) document(ctx context.Context) error {
	tok, err := d.dec.Token()
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: the document is empty", ErrInvalid)
	}
	if err != nil {
		return d.fail(d.at("document"), err)
	}
	if tok != json.Delim('{') {
		return d.fail("document", fmt.Errorf("not an anvil export: it must be one JSON object, not %s", describe(tok)))
	}
	seen := map[string]bool{}
	for d.dec.More() {
		tok, err := d.dec.Token()
		if err != nil {
			return d.fail(d.at("document"), err)
		}
		key, _ := tok.(string) // object keys are always strings
		where := d.at(fmt.Sprintf("member %q", key))
		if seen[key] {
			return d.fail(where, errors.New("appears twice"))
		}
		seen[key] = true
		if key != "format" && key != "version" && (!seen["format"] || !seen["version"]) {
			return d.fail(where, errors.New(`"format" and "version" must come first: not an anvil export, or a damaged one`))
		}
		if err := d.member(ctx, key, where); err != nil {
			return err
		}
	}
	if err := d.delim(d.at("document"), '}'); err != nil {
		return err
	}
	if _, err := d.dec.Token(); !errors.Is(err, io.EOF) {
		return d.fail(d.at("document"), errors.New("data after the end of the document"))
	}
	// Every member is required: Export writes them all, and a missing one
	// would import a fleet without, say, its ports.
	for _, s := range []string{"format", "version", "exported_at", "nodes", "portgroups", "ports", "allocations", "history", "inventories"} {
		if !seen[s] {
			return d.fail("document", fmt.Errorf("no %q member", s))
		}
	}
	return nil
}

func (d *decoder) member(ctx context.Context, key, where string) error {
	switch key {
	case "format":
		var f string
		if err := d.dec.Decode(&f); err != nil {
			return d.fail(where, err)
		}
		if f != Format {
			return d.fail(where, fmt.Errorf("is %q, not %q: not an anvil export", f, Format))
		}
	case "version":
		var v int
		if err := d.dec.Decode(&v); err != nil {
			return d.fail(where, err)
		}
		if v != Version {
			return d.fail(where, fmt.Errorf("%d is not supported: this controller reads version %d; import with the controller version that exported it, or a newer one", v, Version))
		}
	case "exported_at":
		var at time.Time
		if err := d.dec.Decode(&at); err != nil {
			return d.fail(where, err)
		}
	case "chassis":
		return section(ctx, d, key, where, d.chassisCheck, counted(d.dst.CreateChassis, &d.sum.Chassis))
	case "nodes":
		return section(ctx, d, key, where, d.node, counted(d.createNode, &d.sum.Nodes))
	case "portgroups":
		return section(ctx, d, key, where, d.portgroup, counted(d.dst.CreatePortgroup, &d.sum.Portgroups))
	case "ports":
		return section(ctx, d, key, where, d.port, counted(d.dst.CreatePort, &d.sum.Ports))
	case "allocations":
		return section(ctx, d, key, where, d.allocation, counted(d.dst.CreateAllocation, &d.sum.Allocations))
	case "volume_connectors":
		return section(ctx, d, key, where, d.connector, counted(d.dst.CreateVolumeConnector, &d.sum.VolumeConnectors))
	case "volume_targets":
		return section(ctx, d, key, where, d.target, counted(d.dst.CreateVolumeTarget, &d.sum.VolumeTargets))
	case "history":
		batcher, ok := d.dst.(eventBatcher)
		if !ok {
			return section(ctx, d, key, where, d.event, counted(d.dst.AppendEvent, &d.sum.Events))
		}
		b := &eventBatch{dst: batcher, count: &d.sum.Events}
		if err := section(ctx, d, key, where, d.event, b.add); err != nil {
			return err
		}
		if err := b.flush(ctx); err != nil {
			return fmt.Errorf("history: %w", err)
		}
	case "inventories":
		return d.inventorySection(ctx, where)
	case "step_results":
		return section(ctx, d, key, where, d.stepResult, counted(d.dst.PutStepResult, &d.sum.StepResults))
	case "erase_records":
		return section(ctx, d, key, where, d.eraseRecord, counted(func(ctx context.Context, r *store.EraseRecord) error {
			return d.dst.PutEraseRecords(ctx, []*store.EraseRecord{r})
		}, &d.sum.Records))
	case "deploy_templates":
		return section(ctx, d, key, where, d.template, counted(d.dst.CreateDeployTemplate, &d.sum.Templates))
	case "runbooks":
		return section(ctx, d, key, where, d.runbook, counted(d.dst.CreateRunbook, &d.sum.Runbooks))
	case "inspection_rules":
		return section(ctx, d, key, where, d.inspectionRule, counted(d.dst.CreateInspectionRule, &d.sum.InspectionRules))
	case "bios_settings":
		return d.biosSection(ctx, where)
	case "firmware_components":
		return d.firmwareSection(ctx, where)
	default:
		return d.fail(where, errors.New("unknown member (a typo, or a document from a newer controller)"))
	}
	return nil
}

// section reads the array member name, checking and creating each element.
func section[T any](ctx context.Context, d *decoder, name, where string, check func(*T) error, create func(context.Context, *T) error) error {
	if err := d.delim(where, '['); err != nil {
		return err
	}
	for i := 0; d.dec.More(); i++ {
		where := d.at(fmt.Sprintf("%s[%d]", name, i))
		v := new(T)
		if err := d.dec.Decode(v); err != nil {
			return d.fail(where, err)
		}
		if err := check(v); err != nil {
			return d.fail(where, err)
		}
		if err := create(ctx, v); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
	}
	return d.delim(d.at(name), ']')
}

// counted is create counting what it created.
func counted[T any](create func(context.Context, *T) error, count *int) func(context.Context, *T) error {
	return func(ctx context.Context, v *T) error {
		if err := create(ctx, v); err != nil {
			return err
		}
		*count++
		return nil
	}
}

// eventBatcher is a Target that appends many history entries in one
// transaction, as both stores do: history is most of a fleet's rows, and
// one commit (an fsync on SQLite) per entry made a 10,000-node import take
// minutes.
type eventBatcher interface {
	AppendEvents(ctx context.Context, events []*store.Event) error
}

// eventBatchSize bounds the events held before they are written.
const eventBatchSize = 500

// eventBatch buffers history entries, in document order, for an
// eventBatcher; count counts only those written.
type eventBatch struct {
	dst     eventBatcher
	pending []*store.Event
	count   *int
}

func (b *eventBatch) add(ctx context.Context, e *store.Event) error {
	b.pending = append(b.pending, e)
	if len(b.pending) < eventBatchSize {
		return nil
	}
	return b.flush(ctx)
}

func (b *eventBatch) flush(ctx context.Context) error {
	if len(b.pending) == 0 {
		return nil
	}
	if err := b.dst.AppendEvents(ctx, b.pending); err != nil {
		return err
	}
	*b.count += len(b.pending)
	b.pending = b.pending[:0]
	return nil
}

// unique records key in set, failing if it is empty or already there.
func unique(set map[string]bool, field, key string) error {
	if key == "" {
		return fmt.Errorf("%s is missing or empty", field)
	}
	if set[key] {
		return fmt.Errorf("%s %q appears twice", field, key)
	}
	set[key] = true
	return nil
}

// uniqueOpt is unique for an optional name or address; an empty one is a
// value like any other (the stores' unique indexes see it so).
func uniqueOpt(set map[string]bool, field string, key *string) error {
	if key == nil {
		return nil
	}
	if set[*key] {
		return fmt.Errorf("%s %q appears twice", field, *key)
	}
	set[*key] = true
	return nil
}

func required(field, v string) error {
	if v == "" {
		return fmt.Errorf("%s is missing or empty", field)
	}
	return nil
}

// exists checks a reference to an object of an earlier section.
func exists(set map[string]bool, field, key string) error {
	if !set[key] {
		return fmt.Errorf("%s %q is not an object earlier in the document", field, key)
	}
	return nil
}

// node checks a node and takes its operation out of driver_internal_info,
// where the document keeps it, into its own record.
func (d *decoder) node(n *store.Node) error {
	err := errors.Join(unique(d.nodes, "uuid", n.UUID), uniqueOpt(d.nodeNames, "name", n.Name),
		required("driver", n.Driver), required("provision_state", n.ProvisionState))
	if err == nil {
		n.AdoptLegacyOperation()
	}
	return err
}

func (d *decoder) chassisCheck(c *store.Chassis) error {
	return unique(d.chassis, "uuid", c.UUID)
}

// createNode creates the node's chassis first if the document has none
// of that UUID: documents of earlier releases name chassis that never
// existed, and today's stores refuse a node in a missing chassis.
func (d *decoder) createNode(ctx context.Context, n *store.Node) error {
	if c := n.ChassisUUID; c != nil && *c != "" && !d.chassis[*c] {
		if err := d.dst.CreateChassis(ctx, &store.Chassis{UUID: *c, Extra: map[string]any{}, CreatedAt: d.now().UTC()}); err != nil {
			return fmt.Errorf("create chassis %s of node %s: %w", *c, n.UUID, err)
		}
		d.chassis[*c] = true
		d.sum.Chassis++
	}
	return d.dst.CreateNode(ctx, n)
}

func (d *decoder) connector(c *store.VolumeConnector) error {
	return errors.Join(d.resource("volume_connector", c.UUID), required("type", c.Type),
		unique(d.connectorIDs, "(type, connector_id)", c.Type+"/"+c.ConnectorID), exists(d.nodes, "node_uuid", c.NodeUUID))
}

func (d *decoder) target(t *store.VolumeTarget) error {
	return errors.Join(d.resource("volume_target", t.UUID), required("volume_type", t.VolumeType),
		unique(d.bootIndexes, "(node_uuid, boot_index)", fmt.Sprintf("%s/%d", t.NodeUUID, t.BootIndex)),
		exists(d.nodes, "node_uuid", t.NodeUUID))
}

// resource records the UUID of a portgroup, port or allocation.
func (d *decoder) resource(kind, uuid string) error {
	if uuid == "" {
		return errors.New("uuid is missing or empty")
	}
	if other, ok := d.resources[uuid]; ok {
		return fmt.Errorf("uuid %q is already the uuid of a %s", uuid, other)
	}
	d.resources[uuid] = kind
	return nil
}

func (d *decoder) portgroup(p *store.Portgroup) error {
	return errors.Join(d.resource("portgroup", p.UUID), uniqueOpt(d.pgNames, "name", p.Name),
		uniqueOpt(d.pgAddrs, "address", p.Address), exists(d.nodes, "node_uuid", p.NodeUUID))
}

func (d *decoder) port(p *store.Port) error {
	err := errors.Join(d.resource("port", p.UUID), unique(d.portAddrs, "address", p.Address),
		uniqueOpt(d.portNames, "name", p.Name), exists(d.nodes, "node_uuid", p.NodeUUID))
	if p.PortgroupUUID != nil && d.resources[*p.PortgroupUUID] != "portgroup" {
		err = errors.Join(err, fmt.Errorf("portgroup_uuid %q is not a portgroup earlier in the document", *p.PortgroupUUID))
	}
	return err
}

func (d *decoder) allocation(a *store.Allocation) error {
	err := errors.Join(d.resource("allocation", a.UUID), uniqueOpt(d.allocNames, "name", a.Name), required("state", a.State))
	if a.NodeUUID != nil {
		err = errors.Join(err, exists(d.nodes, "node_uuid", *a.NodeUUID))
	}
	return err
}

// event checks a history entry; event UUIDs are not tracked (a fleet's
// history is the largest section, and the stores refuse duplicates).
func (d *decoder) event(e *store.Event) error {
	return errors.Join(required("uuid", e.UUID), exists(d.nodes, "node_uuid", e.NodeUUID))
}

// inventorySection reads the inventories object: node UUID to the inventory
// document the agent reported, stored as read.
func (d *decoder) inventorySection(ctx context.Context, where string) error {
	const name = "inventories"
	if err := d.delim(where, '{'); err != nil {
		return err
	}
	for d.dec.More() {
		tok, err := d.dec.Token()
		if err != nil {
			return d.fail(d.at(name), err)
		}
		node, _ := tok.(string)
		where := d.at(fmt.Sprintf("%s[%q]", name, node))
		var raw json.RawMessage
		if err := d.dec.Decode(&raw); err != nil {
			return d.fail(where, err)
		}
		if err := errors.Join(exists(d.nodes, "node", node), unique(d.inventories, "node", node)); err != nil {
			return d.fail(where, err)
		}
		if err := d.dst.PutInventory(ctx, node, raw); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		d.sum.Inventories++
	}
	return d.delim(d.at(name), '}')
}

// stepResult checks a step result; like history, it belongs to a node of
// the document.
func (d *decoder) stepResult(r *store.StepResult) error {
	return errors.Join(required("uuid", r.UUID), exists(d.nodes, "node_uuid", r.NodeUUID))
}

// template checks a deploy template: unique UUID and name, steps.
func (d *decoder) template(t *store.DeployTemplate) error {
	err := errors.Join(unique(d.templateUUIDs, "uuid", t.UUID), unique(d.templateNames, "name", t.Name))
	if len(t.Steps) == 0 {
		err = errors.Join(err, errors.New("steps is missing or empty"))
	}
	for i, s := range t.Steps {
		if s.Interface == "" || s.Step == "" || s.Priority < 0 {
			err = errors.Join(err, fmt.Errorf("steps[%d] needs an interface, a step and a priority of 0 or more", i))
		}
	}
	return err
}

// runbook checks a runbook: unique UUID and name, steps, and no owner
// for a public one.
func (d *decoder) runbook(rb *store.Runbook) error {
	err := errors.Join(unique(d.runbookUUIDs, "uuid", rb.UUID), unique(d.runbookNames, "name", rb.Name))
	if len(rb.Steps) == 0 {
		err = errors.Join(err, errors.New("steps is missing or empty"))
	}
	for i, s := range rb.Steps {
		if s.Interface == "" || s.Step == "" || s.Order < 0 {
			err = errors.Join(err, fmt.Errorf("steps[%d] needs an interface, a step and an order of 0 or more", i))
		}
	}
	if rb.Public && rb.Owner != nil {
		err = errors.Join(err, errors.New("a public runbook has no owner"))
	}
	return err
}

// eraseRecord checks an erase record: its node may be gone (records
// outlive their node), and its signed document must be JSON.
func (d *decoder) eraseRecord(r *store.EraseRecord) error {
	err := errors.Join(required("uuid", r.UUID), required("node_uuid", r.NodeUUID))
	if !json.Valid(r.Data) {
		err = errors.Join(err, errors.New("data is not a JSON document"))
	}
	return err
}
