package transfer

// The BIOS settings and firmware components of the fleet's nodes: two
// sections keyed by node UUID, each a node's whole set,
//
//	"bios_settings":{"NODE-UUID":[{...},...],...},
//	"firmware_components":{"NODE-UUID":[{...},...],...}
//
// written after the deploy templates for nodes that have any. They came
// later within version 1: a document without them imports with none. The
// times and initial versions are kept (the store keeps those given for a
// set it has not seen).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/anvil-metal/anvil/controller/store"
)

// exportNodeSets writes the two sections for the nodes uuids, in order.
func exportNodeSets(ctx context.Context, d *docWriter, src Source, uuids []string, sum *Summary) error {
	var err error
	if sum.BIOSSettings, err = exportNodeSet(ctx, d, "bios_settings", uuids, src.ListBIOSSettings); err != nil {
		return err
	}
	sum.Firmware, err = exportNodeSet(ctx, d, "firmware_components", uuids, src.ListFirmwareComponents)
	return err
}

// exportNodeSet writes section: each node's non-empty set, as list reads
// it; it returns how many items it wrote.
func exportNodeSet[T any](ctx context.Context, d *docWriter, section string, uuids []string,
	list func(context.Context, string) ([]T, error)) (int, error) {
	count := 0
	d.open(section, '{')
	for _, u := range uuids {
		items, err := list(ctx, u)
		if err != nil {
			return count, fmt.Errorf("export %s of node %s: %w", section, u, err)
		}
		if len(items) == 0 {
			continue
		}
		raw, err := json.Marshal(items)
		if err != nil {
			return count, fmt.Errorf("export %s of node %s: %w", section, u, err)
		}
		if err := d.keyed(u, raw); err != nil {
			return count, fmt.Errorf("export %s of node %s: %w", section, u, err)
		}
		count += len(items)
	}
	d.close('}')
	return count, nil
}

// nodeSetSection reads section: node UUID to that node's set, each node
// of the document at most once, each item named (name or component) once
// within its node; replace stores one node's set.
func nodeSetSection[T any](ctx context.Context, d *decoder, section, where string, name func(*T) string,
	replace func(context.Context, string, []T) error, count *int) error {
	if err := d.delim(where, '{'); err != nil {
		return err
	}
	seen := map[string]bool{}
	for d.dec.More() {
		tok, err := d.dec.Token()
		if err != nil {
			return d.fail(d.at(section), err)
		}
		node, _ := tok.(string)
		where := d.at(fmt.Sprintf("%s[%q]", section, node))
		var items []T
		if err := d.dec.Decode(&items); err != nil {
			return d.fail(where, err)
		}
		errs := []error{exists(d.nodes, "node", node), unique(seen, "node", node)}
		names := map[string]bool{}
		for i := range items {
			if err := unique(names, "name", name(&items[i])); err != nil {
				errs = append(errs, fmt.Errorf("[%d]: %w", i, err))
			}
		}
		if err := errors.Join(errs...); err != nil {
			return d.fail(where, err)
		}
		if err := replace(ctx, node, items); err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		*count += len(items)
	}
	return d.delim(d.at(section), '}')
}

func (d *decoder) biosSection(ctx context.Context, where string) error {
	return nodeSetSection(ctx, d, "bios_settings", where, func(s *store.BIOSSetting) string { return s.Name },
		d.dst.ReplaceBIOSSettings, &d.sum.BIOSSettings)
}

func (d *decoder) firmwareSection(ctx context.Context, where string) error {
	return nodeSetSection(ctx, d, "firmware_components", where, func(c *store.FirmwareComponent) string { return c.Component },
		d.dst.ReplaceFirmwareComponents, &d.sum.Firmware)
}

func (discard) ReplaceBIOSSettings(context.Context, string, []store.BIOSSetting) error { return nil }
func (discard) ReplaceFirmwareComponents(context.Context, string, []store.FirmwareComponent) error {
	return nil
}
