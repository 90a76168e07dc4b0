package transfer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/controller/store"
)

// ExportOptions tune Export.
type ExportOptions struct {
	// Force exports even while nodes are reserved by a running operation.
	Force bool
	// Now stamps exported_at; nil means time.Now.
	Now func() time.Time
}

// Export writes the whole fleet of src to w as one document and returns
// what it wrote.
//
// It refuses, unless opts.Force, while any node is reserved: the operation
// holding it runs in a controller attached to src, and a copy taken
// mid-operation (a step half done, an agent about to call back) cannot be
// resumed reliably from another database. A source that can read a
// snapshot (the SQLite and PostgreSQL stores) is exported in one read
// transaction, so the document is one moment of the fleet even while
// controllers keep writing; another source is read query by query.
//
// Memory stays bounded by one page of objects (and one node's history), plus
// the fleet's node UUIDs, which the history and inventory sections walk.
func Export(ctx context.Context, src Source, w io.Writer, opts ExportOptions) (Summary, error) {
	snap, ok := src.(snapshotReader)
	if !ok {
		return exportFleet(ctx, src, w, opts)
	}
	var sum Summary
	err := snap.ReadSnapshot(ctx, func(st store.Store) error {
		var err error
		sum, err = exportFleet(ctx, st, w, opts)
		return err
	})
	return sum, err
}

// agentStateLoader is a source whose node lists leave out the agent's
// state (store.Node.Partial) and that reads it for a page on request.
type agentStateLoader interface {
	LoadAgentState(ctx context.Context, nodes []*store.Node) error
}

// snapshotReader is a source that can read one consistent snapshot.
type snapshotReader interface {
	ReadSnapshot(ctx context.Context, fn func(st store.Store) error) error
}

func exportFleet(ctx context.Context, src Source, w io.Writer, opts ExportOptions) (Summary, error) {
	var sum Summary
	if !opts.Force {
		if err := refuseReserved(ctx, src); err != nil {
			return sum, err
		}
	}
	now := time.Now
	if opts.Now != nil {
		now = opts.Now
	}
	d := newDocWriter(w)
	d.header(now().UTC())

	var err error
	if sum.Chassis, err = exportResources(ctx, d, "chassis", func(p store.Page) ([]*store.Chassis, error) { return src.ListChassis(ctx, p) },
		func(c *store.Chassis) string { return c.UUID }); err != nil {
		return sum, err
	}

	var uuids []string
	d.open("nodes", '[')
	err = eachPage(ctx, func(p store.Page) ([]*store.Node, error) {
		nodes, err := src.ListNodes(ctx, store.NodeFilter{}, p)
		if l, ok := src.(agentStateLoader); ok && err == nil {
			// The document keeps each node's whole operation, the agent's
			// step cache and command status included, which lists leave out.
			err = l.LoadAgentState(ctx, nodes)
		}
		return nodes, err
	},
		func(n *store.Node) string { return n.UUID },
		func(n *store.Node) error {
			if n.Reservation != nil && !opts.Force {
				return fmt.Errorf("node %s was reserved by %s during the export: %w", n.UUID, *n.Reservation, ErrReserved)
			}
			uuids = append(uuids, n.UUID)
			sum.Nodes++
			// The document keeps the format of version 1: the operation
			// inside driver_internal_info, under Ironic's keys.
			doc := *n
			doc.DriverInternalInfo = n.InternalInfo()
			return d.item(&doc)
		})
	if err != nil {
		return sum, fmt.Errorf("export nodes: %w", err)
	}
	d.close(']')
	if sum.Portgroups, err = exportResources(ctx, d, "portgroups", all(ctx, src.ListPortgroups), func(p *store.Portgroup) string { return p.UUID }); err != nil {
		return sum, err
	}
	if sum.Ports, err = exportResources(ctx, d, "ports", all(ctx, src.ListPorts), func(p *store.Port) string { return p.UUID }); err != nil {
		return sum, err
	}
	if sum.Allocations, err = exportResources(ctx, d, "allocations", all(ctx, src.ListAllocations), func(a *store.Allocation) string { return a.UUID }); err != nil {
		return sum, err
	}
	if sum.VolumeConnectors, err = exportResources(ctx, d, "volume_connectors", all(ctx, src.ListVolumeConnectors),
		func(c *store.VolumeConnector) string { return c.UUID }); err != nil {
		return sum, err
	}
	if sum.VolumeTargets, err = exportResources(ctx, d, "volume_targets", all(ctx, src.ListVolumeTargets),
		func(t *store.VolumeTarget) string { return t.UUID }); err != nil {
		return sum, err
	}

	// History in node order, oldest first: appended in this order, each
	// node's history lists the same in the target.
	d.open("history", '[')
	for _, u := range uuids {
		events, err := src.ListEvents(ctx, u, 0)
		if err != nil {
			return sum, fmt.Errorf("export history of node %s: %w", u, err)
		}
		for _, e := range events {
			if err := d.item(e); err != nil {
				return sum, err
			}
			sum.Events++
		}
	}
	d.close(']')

	d.open("inventories", '{')
	for _, u := range uuids {
		inv, err := src.GetInventory(ctx, u)
		if errors.Is(err, store.ErrNotFound) {
			continue
		}
		if err != nil {
			return sum, fmt.Errorf("export inventory of node %s: %w", u, err)
		}
		if err := d.keyed(u, inv); err != nil {
			return sum, fmt.Errorf("export inventory of node %s: %w", u, err)
		}
		sum.Inventories++
	}
	d.close('}')
	if sum.StepResults, err = exportResults(ctx, d, "step_results", src.ListStepResults, func(r *store.StepResult) string { return r.UUID }); err != nil {
		return sum, err
	}
	if sum.Records, err = exportResults(ctx, d, "erase_records", src.ListEraseRecords, func(r *store.EraseRecord) string { return r.UUID }); err != nil {
		return sum, err
	}
	if sum.Templates, err = exportResources(ctx, d, "deploy_templates",
		func(p store.Page) ([]*store.DeployTemplate, error) { return src.ListDeployTemplates(ctx, p) },
		func(t *store.DeployTemplate) string { return t.UUID }); err != nil {
		return sum, err
	}
	if sum.Runbooks, err = exportResources(ctx, d, "runbooks",
		func(p store.Page) ([]*store.Runbook, error) { return src.ListRunbooks(ctx, store.RunbookFilter{}, p) },
		func(rb *store.Runbook) string { return rb.UUID }); err != nil {
		return sum, err
	}
	// Sensitive rules too: the export holds BMC credentials already, and
	// a migration that dropped them would lose them for good.
	if sum.InspectionRules, err = exportResources(ctx, d, "inspection_rules",
		func(p store.Page) ([]*store.InspectionRule, error) { return src.ListInspectionRules(ctx, "", p) },
		func(r *store.InspectionRule) string { return r.UUID }); err != nil {
		return sum, err
	}
	if err := exportNodeSets(ctx, d, src, uuids, &sum); err != nil {
		return sum, err
	}
	return sum, d.finish()
}

// exportResults writes step results or erase records, oldest first, so
// the target lists them in the same order.
func exportResults[T any](ctx context.Context, d *docWriter, section string,
	list func(context.Context, store.ResultPage) ([]*T, error), uuidOf func(*T) string) (int, error) {
	return exportResources(ctx, d, section, func(p store.Page) ([]*T, error) {
		return list(ctx, store.ResultPage{Limit: p.Limit, Marker: p.Marker, Ascending: true})
	}, uuidOf)
}

// refuseReserved fails with ErrReserved, naming a few nodes, when any node
// is reserved.
func refuseReserved(ctx context.Context, src Source) error {
	const show = 5
	yes := true
	held, err := src.ListNodeSummaries(ctx, store.NodeFilter{Reserved: &yes}, store.Page{Limit: show + 1})
	if err != nil {
		return fmt.Errorf("check reservations: %w", err)
	}
	if len(held) == 0 {
		return nil
	}
	var names []string
	for i, n := range held {
		if i == show {
			names = append(names, "and more")
			break
		}
		holder := ""
		if n.Reservation != nil {
			holder = *n.Reservation
		}
		names = append(names, fmt.Sprintf("%s (%s, held by %s)", n.UUID, n.ProvisionState, holder))
	}
	return fmt.Errorf("%w: %s; a fleet exported mid-operation cannot resume reliably from another database: "+
		"let the operations finish (a stopped controller resumes them when started), stop the controllers and export again, "+
		"or export anyway with --force", ErrReserved, strings.Join(names, ", "))
}

// exportResources writes one section of a resource kind listed by list.
func exportResources[T any](ctx context.Context, d *docWriter, section string,
	list func(store.Page) ([]*T, error), uuidOf func(*T) string) (int, error) {
	count := 0
	d.open(section, '[')
	err := eachPage(ctx, list, uuidOf,
		func(v *T) error {
			count++
			return d.item(v)
		})
	if err != nil {
		return count, fmt.Errorf("export %s: %w", section, err)
	}
	d.close(']')
	return count, nil
}

// all lists every resource of a kind: list without a filter.
func all[T any](ctx context.Context, list func(context.Context, store.ResourceFilter, store.Page) ([]*T, error)) func(store.Page) ([]*T, error) {
	return func(p store.Page) ([]*T, error) { return list(ctx, store.ResourceFilter{}, p) }
}

// eachPage calls fn with every object list returns, one keyset page at a
// time, in the source's default order (creation order).
func eachPage[T any](ctx context.Context, list func(store.Page) ([]*T, error), uuidOf func(*T) string, fn func(*T) error) error {
	return store.EachPage(ctx, pageSize, list, uuidOf, fn)
}

// docWriter writes the document one object per line. Write errors are
// sticky: later calls do nothing and finish reports the first.
type docWriter struct {
	w     *bufio.Writer
	buf   bytes.Buffer
	enc   *json.Encoder
	items int // in the open section
	err   error
}

func newDocWriter(w io.Writer) *docWriter {
	d := &docWriter{w: bufio.NewWriterSize(w, 64<<10)}
	d.enc = json.NewEncoder(&d.buf)
	// Readable passwords and URLs: the document is not HTML.
	d.enc.SetEscapeHTML(false)
	return d
}

func (d *docWriter) write(s string) {
	if d.err == nil {
		_, d.err = d.w.WriteString(s)
	}
}

func (d *docWriter) header(at time.Time) {
	d.write(fmt.Sprintf(`{"format":%q,"version":%d,"exported_at":%q`, Format, Version, at.Format(time.RFC3339Nano)))
}

// open starts section name, an array ('[') or an object ('{').
func (d *docWriter) open(name string, delim byte) {
	d.write(",\n" + `"` + name + `":` + string(delim))
	d.items = 0
}

func (d *docWriter) close(delim byte) {
	if d.items > 0 {
		d.write("\n")
	}
	d.write(string(delim))
}

// sep starts the next element of the open section on its own line.
func (d *docWriter) sep() {
	if d.items > 0 {
		d.write(",\n")
	} else {
		d.write("\n")
	}
	d.items++
}

// item writes v as the next element of the open array.
func (d *docWriter) item(v any) error {
	d.buf.Reset()
	if err := d.enc.Encode(v); err != nil {
		return fmt.Errorf("encode %T: %w", v, err)
	}
	d.sep()
	if d.err == nil {
		_, d.err = d.w.Write(bytes.TrimSuffix(d.buf.Bytes(), []byte("\n")))
	}
	return d.err
}

// keyed writes the member key: raw of the open object, raw compacted to
// keep one member per line (whitespace means nothing in JSON, and the API
// compacts it when it serves the document anyway).
func (d *docWriter) keyed(key string, raw []byte) error {
	d.buf.Reset()
	if err := json.Compact(&d.buf, raw); err != nil {
		return fmt.Errorf("stored document is not JSON: %w", err)
	}
	k, err := json.Marshal(key)
	if err != nil {
		return err
	}
	d.sep()
	d.write(string(k) + ":")
	if d.err == nil {
		_, d.err = d.w.Write(d.buf.Bytes())
	}
	return d.err
}

// finish ends the document and flushes it.
func (d *docWriter) finish() error {
	d.write("}\n")
	if d.err == nil {
		d.err = d.w.Flush()
	}
	if d.err != nil {
		return fmt.Errorf("write export: %w", d.err)
	}
	return nil
}
