package api

// POST /v1/continue_inspection (Ironic 1.84): the inspection callback of
// a stock ironic-python-agent, which posts {inventory, <plugin data>...}
// instead of looking itself up. It is public, as in Ironic, so it is
// treated as the lookup it replaces: the conductor finds the node among
// nodes in inspect wait and applies the lookup's trust rules (the boot's
// nonce, first claimant only) before the inventory is accepted
// (conductor/inspectcallback.go). The body is bounded, the inventory
// stored is bounded again, and the plugin data (IPA's logs, extra
// hardware, LLDP) is not kept: anvil derives what it keeps from the
// inventory, as its own agent's inspection does.

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"

	"github.com/google/uuid"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/protocol"
)

const (
	// continueInspectionPath is the route, outside the 1 MiB body bound
	// of other requests (requestMiddleware).
	continueInspectionPath = "/v1/continue_inspection"
	// maxInspectionBody bounds the whole report: IPA's logs and
	// extra-hardware collectors add hundreds of kilobytes, which are read
	// and dropped.
	maxInspectionBody = 8 << 20
	// maxInspectionInventory bounds the inventory, which is stored.
	maxInspectionInventory = 1 << 20
	// maxInspectionNICs bounds the lookups one report makes.
	maxInspectionNICs = 64
)

// bodyLimit is the most a request to path may send.
func bodyLimit(path string) int64 {
	// the route is served with and without the /v1 prefix
	if path == continueInspectionPath || "/v1"+path == continueInspectionPath {
		return maxInspectionBody
	}
	return maxBody
}

// inspectionReport is a parsed report: the inventory to store and what
// the node is looked up by.
type inspectionReport struct {
	inventory json.RawMessage
	macs      []string // valid MACs, normalised; invalid ones are ignored as Ironic does
	bmcs      []string // bmc_address, bmc_v6address when set
}

// parseInspection checks a report against Ironic's DATA_VALIDATOR (an
// object with an inventory object whose interfaces, at least one, each
// have a string mac_address; bmc addresses are strings or null).
func parseInspection(body []byte) (inspectionReport, error) {
	var rep inspectionReport
	var top map[string]json.RawMessage
	if err := json.Unmarshal(body, &top); err != nil || top == nil {
		return rep, badRequest("Invalid input for field/attribute data. Value: the request body. The body must be a JSON object.")
	}
	raw, ok := top["inventory"]
	if !ok {
		return rep, badRequest("Schema error for data: 'inventory' is a required property")
	}
	if len(raw) > maxInspectionInventory {
		return rep, errf(http.StatusRequestEntityTooLarge, "The inventory is larger than %d bytes", maxInspectionInventory)
	}
	if err := protocol.CheckStoredJSON(raw); err != nil {
		return rep, badRequest("Schema error for data: inventory cannot be stored: %v", err)
	}
	var inv struct {
		Interfaces *[]map[string]json.RawMessage `json:"interfaces"`
		BMC        *string                       `json:"bmc_address"`
		BMC6       *string                       `json:"bmc_v6address"`
	}
	if err := json.Unmarshal(raw, &inv); err != nil {
		return rep, badRequest("Schema error for data: inventory is not an object with an interfaces array and string BMC addresses: %v", err)
	}
	if inv.Interfaces == nil {
		return rep, badRequest("Schema error for data: 'interfaces' is a required property of inventory")
	}
	if len(*inv.Interfaces) == 0 {
		return rep, badRequest("Schema error for data: inventory interfaces should be non-empty")
	}
	if len(*inv.Interfaces) > maxInspectionNICs {
		return rep, badRequest("Schema error for data: inventory lists %d interfaces; at most %d are accepted", len(*inv.Interfaces), maxInspectionNICs)
	}
	seen := map[string]bool{}
	for i, nic := range *inv.Interfaces {
		var mac string
		if m, ok := nic["mac_address"]; !ok || json.Unmarshal(m, &mac) != nil {
			return rep, badRequest("Schema error for data: inventory interface %d needs a string 'mac_address'", i)
		}
		hw, err := net.ParseMAC(strings.TrimSpace(mac))
		if err != nil || len(hw) != 6 || seen[hw.String()] {
			continue
		}
		seen[hw.String()] = true
		rep.macs = append(rep.macs, hw.String())
	}
	for _, b := range []*string{inv.BMC, inv.BMC6} {
		if b == nil {
			continue
		}
		switch a := strings.TrimSpace(*b); a {
		case "", "0.0.0.0", "::", "::/0": // IPA's "no BMC"
		default:
			if len(a) <= 255 {
				rep.bmcs = append(rep.bmcs, a)
			}
		}
	}
	rep.inventory = raw
	return rep, nil
}

// continueInspection serves POST /v1/continue_inspection: 202 with the
// lookup's answer (node and agent config with the token) at 1.84 and
// above, {"uuid": ...} at 1.1 (ironic-inspector's answer, for agents that
// send no version), 404 at any other version, as Ironic.
func (s *Server) continueInspection(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	q, err := parseQuery(r, "node_uuid", protocol.LookupNonce)
	if err != nil {
		return err
	}
	body, err := readInspectionBody(r)
	if err != nil {
		return err
	}
	rep, err := parseInspection(body)
	if err != nil {
		return err
	}
	nodeUUID := q.v.Get("node_uuid")
	if _, perr := uuid.Parse(nodeUUID); nodeUUID != "" && (perr != nil || len(nodeUUID) != 36) {
		return badRequest("Invalid UUID for node_uuid: %s", nodeUUID)
	}
	v := version(ctx)
	if (v < 84 && v != minMinor) || (nodeUUID != "" && v < 84) {
		return errf(http.StatusNotFound, "API version 1.84 or newer is required")
	}
	if len(rep.macs) == 0 && len(rep.bmcs) == 0 && nodeUUID == "" {
		return badRequest("No lookup information provided")
	}
	resp, err := s.cond.ContinueInspection(ctx, conductor.InspectionReport{NodeUUID: nodeUUID, MACs: rep.macs, BMCAddresses: rep.bmcs,
		Nonce: q.v.Get(protocol.LookupNonce), Address: sourceAddr(r), Inventory: rep.inventory})
	var ce *conductor.Error
	if errors.As(err, &ce) && ce.Code == conductor.CodeNotFound && nodeUUID == "" && s.discovery != nil && s.discovery.cfg.Enabled {
		resp, err = s.discoverByInspection(ctx, rep, sourceAddr(r), err)
	}
	if err != nil {
		s.countClaim(err, "continue_inspection")
		return err
	}
	if v < 84 {
		writeJSON(w, http.StatusAccepted, map[string]any{"uuid": resp.Node.UUID})
		return nil
	}
	writeJSON(w, http.StatusAccepted, resp)
	return nil
}

// discoverByInspection is Ironic's auto-discovery through the callback: a
// report no node matches enrols a new node in enroll when discovery is on
// (--boot-discovery), with discovery's bounds (its rate, the cap on
// discovered nodes in enroll) and its rule that an existing node is never
// changed. A report that discovery refuses because the machine is a node
// already gets the lookup's 404 (notFound), as Ironic answers it. The
// answer carries the new node and no token: nothing waits for an agent
// in enroll.
func (s *Server) discoverByInspection(ctx context.Context, rep inspectionReport, from string, notFound error) (*protocol.LookupResponse, error) {
	if !s.discovery.limiter.allow("discovery") {
		return nil, errf(http.StatusTooManyRequests, "Too many discovery reports; retry later.")
	}
	var req protocol.DiscoveryRequest
	if err := json.Unmarshal(rep.inventory, &req.Inventory); err != nil {
		return nil, badRequest("Schema error for data: the inventory cannot be read for discovery: %v", err)
	}
	var macs []string
	for _, m := range rep.macs {
		if hw, _ := net.ParseMAC(m); hw[0]&1 == 0 && m != "00:00:00:00:00:00" {
			macs = append(macs, m) // unicast: a NIC's own address
		}
	}
	if len(macs) == 0 {
		return nil, notFound
	}
	n, err := s.enrolReport(ctx, req, macs, from)
	if err != nil {
		if ae := (*apiError)(nil); errors.As(err, &ae) && ae.status == http.StatusConflict {
			return nil, notFound
		}
		return nil, err
	}
	return &protocol.LookupResponse{Node: protocol.LookupNode{UUID: n.UUID, Properties: n.Properties, InstanceInfo: map[string]any{}},
		Config: protocol.AgentConfig{AgentTokenRequired: true}}, nil
}

// readInspectionBody reads the report, within maxInspectionBody (the
// request middleware's bound for this route, bodyLimit).
func readInspectionBody(r *http.Request) ([]byte, error) {
	b, err := io.ReadAll(r.Body)
	if err != nil {
		return nil, bodyError(err)
	}
	return b, nil
}
