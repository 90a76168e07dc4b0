package conductor

// The inspection callback (Ironic 1.84, POST /v1/continue_inspection): a
// stock ironic-python-agent posts its inventory there instead of looking
// up and waiting for an inventory command. It is a lookup with a report
// attached and gets exactly what a lookup gets: the node is found by its
// ports' MACs (or, failing that, its BMC address) and must be in inspect
// wait, and the lookup's trust rules decide (trust.go; the boot's nonce
// when the controller served the boot, the first claimant only, and a
// second claimant stops the operation). Only the caller the token was
// just issued to has its inventory accepted; the inventory then ends the
// inspection as the agent's inventory command does (finishInspection,
// through agentWait), so properties and ports are filled the same way.

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"strings"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// InspectionReport is a POST /v1/continue_inspection, checked for shape by
// the API: who the caller says it is and its inventory.
type InspectionReport struct {
	NodeUUID     string   // ?node_uuid= (1.84)
	MACs         []string // the inventory's interfaces, valid MACs only
	BMCAddresses []string // the inventory's bmc_address and bmc_v6address
	Nonce        string   // ?nonce=, the boot's nonce (anvil.token=) when the boot has one
	Address      string   // where the request came from
	Inventory    json.RawMessage
}

// ContinueInspection accepts an inspection report: it looks the node up
// as a lookup does (inspect wait only), and when this caller is issued the
// token, stores the inventory as the finished inventory command of this
// boot and hands the node to its worker, which ends the inspection. The
// answer is the lookup's (node and agent config with the token).
func (c *sessions) ContinueInspection(ctx context.Context, rep InspectionReport) (*protocol.LookupResponse, error) {
	ident := rep.NodeUUID
	if ident == "" {
		var err error
		if ident, err = c.inspectionNode(ctx, rep.MACs, rep.BMCAddresses); err != nil {
			return nil, err
		}
	}
	resp, err := c.Lookup(ctx, LookupRequest{NodeUUID: ident, Nonce: rep.Nonce, Address: rep.Address, Only: state.InspectWait})
	if err != nil {
		return nil, err
	}
	token := resp.Config.AgentToken
	_, err = store.MutateNodeEvents(ctx, c.st, resp.Node.UUID, func(n *store.Node) ([]*store.Event, error) {
		a := &n.Operation.Agent
		if state.State(n.ProvisionState) != state.InspectWait || token == "" || subtle.ConstantTimeCompare([]byte(a.Token), []byte(token)) != 1 {
			return nil, NotFound(msgNoAgentExpected) // the operation moved on meanwhile
		}
		now := c.now()
		a.Await, a.Booted, a.LastHeartbeat = nil, true, now
		issueCommand(n, protocol.CmdInventory, nil, now)
		a.CommandStatus = &protocol.CommandStatus{ID: a.Command.ID, Name: protocol.CmdInventory, State: protocol.CommandSucceeded,
			Result: rep.Inventory, StartedAt: now, FinishedAt: &now}
		return []*store.Event{c.newEvent(n.UUID, "INFO", "inspection",
			fmt.Sprintf("inventory posted to /v1/continue_inspection from %s by the agent the token was issued to", orUnknown(rep.Address)))}, nil
	})
	if err != nil {
		return nil, err
	}
	c.kick(resp.Node.UUID)
	return resp, nil
}

// inspectionNode finds the node of a report: by its MACs as a lookup
// does, else by the BMC address among nodes in inspect wait that have no
// port yet (Ironic's inspection lookup; inspection is how such a node
// gets its ports). A node that has ports is found by them only: a BMC's
// address is easy to learn on the provisioning network, and the MACs a
// report brings are made PXE ports. Every failure is the lookup's
// generic 404.
func (c *sessions) inspectionNode(ctx context.Context, macs, bmcs []string) (string, error) {
	if len(macs) > 0 {
		id, err := c.nodeByMACs(ctx, macs)
		if err == nil || len(bmcs) == 0 {
			return id, err
		}
	}
	wait := string(state.InspectWait)
	nodes, err := c.st.ListNodes(ctx, store.NodeFilter{ProvisionState: &wait}, store.Page{})
	if err != nil {
		return "", err
	}
	var found []string
	for _, n := range nodes {
		if !bmcMatches(n.DriverInfo, bmcs) {
			continue
		}
		uuid := n.UUID
		ports, err := c.st.ListPorts(ctx, store.ResourceFilter{NodeUUID: &uuid}, store.Page{Limit: 1})
		if err != nil {
			return "", err
		}
		if len(ports) == 0 {
			found = append(found, n.UUID)
		}
	}
	if len(found) != 1 {
		c.log.InfoContext(ctx, "inspection lookup refused", "reason", fmt.Sprintf("%d nodes in inspect wait have these BMC addresses", len(found)), "bmc", bmcs, "macs", macs)
		return "", NotFound(msgNoAgentExpected)
	}
	return found[0], nil
}

// bmcMatches reports whether a driver_info *_address (a host, an IP, or a
// URL as redfish_address is) names one of the addresses.
func bmcMatches(driverInfo map[string]any, addrs []string) bool {
	for k, v := range driverInfo {
		s, ok := v.(string)
		if !ok || !strings.HasSuffix(k, "_address") || s == "" {
			continue
		}
		host := s
		if u, err := url.Parse(s); err == nil && u.Host != "" {
			host = u.Hostname()
		} else if h, _, err := net.SplitHostPort(s); err == nil {
			host = h
		}
		host = strings.Trim(host, "[]")
		for _, a := range addrs {
			ip, want := net.ParseIP(host), net.ParseIP(a)
			if (ip != nil && want != nil && ip.Equal(want)) || strings.EqualFold(host, a) {
				return true
			}
		}
	}
	return false
}
