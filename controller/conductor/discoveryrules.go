package conductor

// Discovery that finishes the job: the inspection rules run on a node
// discovery has just enrolled (in enroll), with the inventory the agent
// reported, so that they can set its driver, BMC address (the agent's
// in-band bmc_address), credentials, name, resource class, traits and
// capabilities. A rule with the anvil-manage action then has the node
// managed as an operator would (enroll -> verifying -> manageable, the
// credentials checked against the BMC). Without rules the node stays in
// enroll, as before.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// DiscoveryOutcome says what the rules did to a discovered node.
type DiscoveryOutcome struct {
	Changed []string // the node fields the rules changed
	// Managed: a rule asked for it and the manage verb was accepted
	// (the node is verifying its BMC credentials).
	Managed bool
	// Failure is why the rules or the manage verb left the node in
	// enroll ("" when they did not): a rule's failure with its id, or
	// the manage verb's refusal. It is in the node's last_error and
	// history too.
	Failure string
}

// RunDiscoveryRules runs the inspection rules on node nodeUUID, which
// discovery has just enrolled with its inventory. An error is the
// store's; what rules refuse is in the outcome.
func (c *Conductor) RunDiscoveryRules(ctx context.Context, nodeUUID string) (DiscoveryOutcome, error) {
	var out DiscoveryOutcome
	n, err := c.core.st.GetNode(ctx, nodeUUID)
	if err != nil {
		return out, err
	}
	if state.State(n.ProvisionState) != state.Enroll {
		return out, nil
	}
	raw, err := c.core.st.GetInventory(ctx, nodeUUID)
	if err != nil {
		return out, fmt.Errorf("discovery rules: inventory of node %s: %w", nodeUUID, err)
	}
	var inv protocol.Inventory
	var inventory map[string]any
	if err := json.Unmarshal(raw, &inv); err != nil {
		return out, fmt.Errorf("discovery rules: decode the inventory of node %s: %w", nodeUUID, err)
	}
	if err := json.Unmarshal(raw, &inventory); err != nil {
		return out, fmt.Errorf("discovery rules: decode the inventory of node %s: %w", nodeUUID, err)
	}
	rules, err := applyInspectionRules(ctx, c.core, n, inventory, InventoryPluginData(inv))
	if err != nil {
		msg, ok := ruleFailure(nodeUUID, err)
		if !ok {
			return out, err
		}
		out.Failure = msg
		_, err := store.MutateNodeEvents(ctx, c.core.st, nodeUUID, func(m *store.Node) ([]*store.Event, error) {
			m.LastError = strp(msg)
			return []*store.Event{c.core.newEvent(nodeUUID, "ERROR", "discovery", msg+"; the node stays in enroll")}, nil
		})
		return out, err
	}
	out.Changed = rules.changed()
	if len(rules.events) > 0 {
		events := make([]*store.Event, 0, len(rules.events))
		for _, e := range rules.events {
			e.EventType = "discovery"
			e.Event = "discovery " + strings.TrimPrefix(e.Event, "inspection ")
			events = append(events, e)
		}
		if _, err := store.MutateNodeEvents(ctx, c.core.st, nodeUUID, func(m *store.Node) ([]*store.Event, error) {
			return events, rules.apply(m)
		}); err != nil {
			return out, err
		}
	}
	if !rules.manage {
		return out, nil
	}
	err = c.Provision(ctx, nodeUUID, ProvisionRequest{Target: "manage", RequestedBy: "an inspection rule (discovery)"})
	var ae *Error
	if errors.As(err, &ae) {
		out.Failure = fmt.Sprintf("Discovery rules asked to manage node %s, which was refused: %s", nodeUUID, ae.Error())
		_, err := store.MutateNodeEvents(ctx, c.core.st, nodeUUID, func(m *store.Node) ([]*store.Event, error) {
			m.LastError = strp(out.Failure)
			return []*store.Event{c.core.newEvent(nodeUUID, "ERROR", "discovery", out.Failure+"; the node stays in enroll")}, nil
		})
		return out, err
	}
	out.Managed = err == nil
	return out, err
}
