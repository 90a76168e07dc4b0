package api

// Discovery (opt-in, --boot-discovery): a machine no node knows network-
// boots the agent ramdisk with anvil.discovery, and its agent reports the
// inventory here; the controller enrols it as a new node in enroll, with a
// port per NIC, and tells the agent to power off. Ironic's inspector calls
// this discovery. Everything here comes from unauthenticated callers on the
// provisioning network, so it is bounded: a global rate, a cap on
// discovered nodes still in enroll, no second node for a MAC or serial, and
// never a change to an existing node.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
	"github.com/anvil-metal/anvil/protocol/lldp"
)

// DiscoveryConfig switches discovery on and bounds it.
type DiscoveryConfig struct {
	Enabled bool
	// Driver of discovered nodes (ipmi, redfish, fake-hardware); the
	// operator adds the BMC's driver_info before managing the node.
	Driver string
	// MaxPending caps the discovered nodes still in enroll: beyond it,
	// reports are refused (503) until an operator manages or deletes some.
	MaxPending int
	// Rate and Burst bound discovery reports over all sources (per
	// second), on top of the per-source limit of the public endpoints.
	Rate  float64
	Burst int
}

// DefaultDiscovery is discovery's configuration when switched on.
func DefaultDiscovery() DiscoveryConfig {
	return DiscoveryConfig{Driver: "ipmi", MaxPending: 50, Rate: 1, Burst: 10}
}

// Limits of a discovery report: it is stored as the node's inventory.
const (
	maxDiscoveryBytes = 1 << 20
	maxDiscoveryNICs  = 32
)

// discoverer is the server's discovery state.
type discoverer struct {
	cfg     DiscoveryConfig
	limiter *limiter
	// mu serialises check-then-create within this controller; across
	// controllers the store's unique port addresses refuse the second.
	// It guards noted too.
	mu sync.Mutex
	// noted: when a refused report was last put into an existing node's
	// history, so a replayed report cannot fill a history.
	noted map[string]time.Time
}

// noteInterval is how often a refused report reaches a node's history.
const noteInterval = 10 * time.Minute

func newDiscoverer(cfg DiscoveryConfig) *discoverer {
	if cfg.Driver == "" {
		cfg.Driver = DefaultDiscovery().Driver
	}
	return &discoverer{cfg: cfg, noted: map[string]time.Time{}, limiter: newLimiter(PublicLimit{Rate: cfg.Rate, Burst: cfg.Burst, LimitLoopback: true}, time.Now)}
}

// discoveryMarker is the extra key of a discovered node (Ironic's).
const discoveryMarker = "auto_discovered"

// discover serves POST /v1/discovery.
func (s *Server) discover(w http.ResponseWriter, r *http.Request) error {
	d := s.discovery
	if d == nil || !d.cfg.Enabled {
		return errf(http.StatusNotFound, "Discovery is off on this controller: it enrols unknown machines only when started with --boot-discovery.")
	}
	if _, err := parseQuery(r); err != nil {
		return err
	}
	if !d.limiter.allow("discovery") {
		w.Header().Set("Retry-After", "5")
		return errf(http.StatusTooManyRequests, "Too many discovery reports; retry later.")
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxDiscoveryBytes)
	body, err := readBody(r)
	if err != nil {
		return err
	}
	req, macs, err := parseDiscovery(body)
	if err != nil {
		return err
	}
	n, err := s.enrolReport(r.Context(), req, macs, sourceAddr(r))
	if err != nil {
		return err
	}
	msg := "enrolled as node " + n.UUID + " in enroll; powering off until an operator manages it"
	if cur, err := s.st.GetNode(r.Context(), n.UUID); err == nil && cur.ProvisionState != string(state.Enroll) {
		msg = "enrolled as node " + n.UUID + "; the inspection rules had it managed (" + cur.ProvisionState + "); powering off"
	}
	writeJSON(w, http.StatusCreated, protocol.DiscoveryResponse{NodeUUID: n.UUID, Action: protocol.DiscoveryPowerOff, Message: msg})
	return nil
}

// enrolReport enrols the machine of a discovery report (from the agent's
// POST /v1/discovery or a stock agent's /v1/continue_inspection) unless
// it is a node already or too many discovered nodes wait.
func (s *Server) enrolReport(ctx context.Context, req protocol.DiscoveryRequest, macs []string, from string) (*store.Node, error) {
	d := s.discovery
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := s.discoveryUnique(ctx, macs, req.Inventory.SystemVendor.SerialNumber); err != nil {
		return nil, err
	}
	if err := s.discoveryRoom(ctx, d.cfg.MaxPending); err != nil {
		return nil, err
	}
	if _, ok := s.cond.Driver(d.cfg.Driver); !ok {
		return nil, errf(http.StatusServiceUnavailable, "Discovery's driver %q is not available on this controller (--boot-discovery-driver).", d.cfg.Driver)
	}
	n, err := s.enrolDiscovered(ctx, d.cfg.Driver, req, macs, from)
	if err != nil {
		return nil, err
	}
	// The node exists now: the rules run to their end even if the agent
	// hangs up. What they refuse is in the node's history; the machine is
	// enrolled either way.
	out, err := s.cond.RunDiscoveryRules(context.WithoutCancel(ctx), n.UUID)
	switch {
	case err != nil:
		s.log.Warn("discovery: inspection rules could not run; the node stays in enroll", "node", n.UUID, "err", err)
	case out.Failure != "":
		s.log.Warn("discovery: inspection rules left the node in enroll", "node", n.UUID, "reason", out.Failure)
	case out.Managed || len(out.Changed) > 0:
		s.log.Info("discovery: inspection rules ran", "node", n.UUID, "changed", out.Changed, "managed", out.Managed)
	}
	return n, nil
}

// parseDiscovery decodes a report and its MACs (a client error if bad).
func parseDiscovery(body []byte) (protocol.DiscoveryRequest, []string, error) {
	var req protocol.DiscoveryRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return req, nil, badRequest("Malformed discovery report: %v", err)
	}
	macs, err := discoveryMACs(req.Inventory)
	return req, macs, err
}

// discoveryMACs are the report's NIC MACs: unicast, globally or locally
// administered, each once; at least one.
func discoveryMACs(inv protocol.Inventory) ([]string, error) {
	if len(inv.Interfaces) > maxDiscoveryNICs {
		return nil, badRequest("Discovery report lists %d interfaces; at most %d are accepted.", len(inv.Interfaces), maxDiscoveryNICs)
	}
	seen := map[string]bool{}
	var out []string
	for _, nic := range inv.Interfaces {
		hw, err := net.ParseMAC(strings.TrimSpace(nic.MACAddress))
		if err != nil || len(hw) != 6 {
			return nil, badRequest("Discovery report: interface %q has an invalid MAC address %q.", nic.Name, nic.MACAddress)
		}
		if hw[0]&1 == 1 || string(hw) == "\x00\x00\x00\x00\x00\x00" {
			continue // multicast or zero: not a NIC's own address
		}
		if mac := hw.String(); !seen[mac] {
			seen[mac] = true
			out = append(out, mac)
		}
	}
	if len(out) == 0 {
		return nil, badRequest("Discovery report lists no interface with a unicast MAC address.")
	}
	return out, nil
}

// errAlreadyEnrolled is the answer to a machine that is already a node.
// The caller is unauthenticated: it learns neither which node nor its
// state; the node's history and the controller's log say which.
func errAlreadyEnrolled() error {
	return errf(http.StatusConflict, "This machine is already enrolled (a port has one of its MACs, or a node was discovered with its serial); "+
		"discovery never changes an existing node.")
}

// discoveryUnique refuses a machine that is already a node: by a port's
// MAC (any node), or by the serial a discovered node was created with.
// The existing node is never changed; its history says it was seen.
func (s *Server) discoveryUnique(ctx context.Context, macs []string, serial string) error {
	for _, mac := range macs {
		ports, err := s.st.ListPorts(ctx, store.ResourceFilter{Address: &mac}, store.Page{Limit: 1})
		if err != nil {
			return err
		}
		if len(ports) > 0 {
			s.discoveryNote(ctx, ports[0].NodeUUID, fmt.Sprintf("discovery report for MAC %s refused: this node has a port with it; discovery never changes an existing node", mac))
			s.log.Info("discovery: report refused, a port has its MAC", "mac", mac, "node", ports[0].NodeUUID)
			return errAlreadyEnrolled()
		}
	}
	if serial = usableSerial(serial); serial == "" {
		return nil
	}
	marker := serialMarker(serial)
	nodes, err := s.st.ListNodes(ctx, store.NodeFilter{DescriptionContains: &marker}, store.Page{Limit: 10})
	if err != nil {
		return err
	}
	for _, n := range nodes {
		if dd, _ := n.Extra["discovery"].(map[string]any); dd != nil && dd["serial"] == serial {
			s.discoveryNote(ctx, n.UUID, fmt.Sprintf("discovery report with serial %q and MACs %s refused: this node was discovered with that serial", serial, strings.Join(macs, ", ")))
			s.log.Info("discovery: report refused, a node was discovered with its serial", "serial", serial, "macs", macs, "node", n.UUID)
			return errAlreadyEnrolled()
		}
	}
	return nil
}

// usableSerial drops the placeholders firmware puts in the DMI serial.
func usableSerial(s string) string {
	s = strings.TrimSpace(s)
	switch strings.ToLower(s) {
	case "", "0", "none", "n/a", "na", "default string", "not specified", "system serial number",
		"to be filled by o.e.m.", "0123456789", "unknown":
		return ""
	}
	if len(s) > 128 {
		return ""
	}
	return s
}

func serialMarker(serial string) string { return "serial " + serial + ")" }

// discoveryRoom refuses a report while max discovered nodes wait in enroll.
func (s *Server) discoveryRoom(ctx context.Context, max int) error {
	if max <= 0 {
		return nil
	}
	enroll := string(state.Enroll)
	pending, marker := 0, ""
	for {
		nodes, err := s.st.ListNodes(ctx, store.NodeFilter{ProvisionState: &enroll}, store.Page{Limit: 500, Marker: marker})
		if err != nil {
			return err
		}
		for _, n := range nodes {
			if n.Extra[discoveryMarker] == true {
				pending++
			}
		}
		if pending >= max {
			return errf(http.StatusServiceUnavailable, "%d discovered nodes wait in enroll, the limit (--boot-discovery-max-pending); manage or delete some and the machine is enrolled on its next report.", pending)
		}
		if len(nodes) < 500 {
			return nil
		}
		marker = nodes[len(nodes)-1].UUID
	}
}

// enrolDiscovered creates the node with its ports, inventory and history
// lines in one transaction: readers never see a half-made node, and a
// crash leaves none. A port another controller created meanwhile refuses
// the whole of it.
func (s *Server) enrolDiscovered(ctx context.Context, driver string, req protocol.DiscoveryRequest, macs []string, from string) (*store.Node, error) {
	inv := req.Inventory
	now := time.Now().UTC()
	sv := inv.SystemVendor
	serial := usableSerial(sv.SerialNumber)
	desc := strings.TrimSpace(fmt.Sprintf("Discovered %s: %s %s", now.Format(time.DateOnly), clip(sv.Manufacturer, 64), clip(sv.ProductName, 64)))
	if serial != "" {
		desc += " (" + serialMarker(serial)
	}
	n := &store.Node{UUID: uuid.NewString(), CreatedAt: now, ProvisionState: string(state.Enroll), Driver: driver, Description: &desc}
	n.Normalize()
	n.Extra[discoveryMarker] = true
	n.Extra["discovery"] = map[string]any{"at": now.Format(time.RFC3339), "address": from, "boot_id": clip(req.BootID, 64),
		"serial": serial, "macs": macs}
	n.Properties = discoveredProperties(inv)
	s.defaultInterfaces(n)
	raw, err := json.Marshal(inv)
	if err != nil {
		return nil, err
	}
	e := &store.Enrolment{Node: n, Inventory: raw}
	for _, mac := range macs {
		e.Ports = append(e.Ports, &store.Port{UUID: uuid.NewString(), NodeUUID: n.UUID, Address: mac, PXEEnabled: true, CreatedAt: now,
			LocalLinkConnection: discoveredLocalLink(inv, mac)})
	}
	msg := fmt.Sprintf("discovered by the boot service: agent at %s (boot %s) reported %s %s, serial %q, %d CPUs, %d MiB, %d disks, MACs %s; "+
		"enrolled in enroll with driver %s and told to power off: nothing is cleaned or deployed until an operator acts",
		from, clip(req.BootID, 64), clip(sv.Manufacturer, 64), clip(sv.ProductName, 64), serial, inv.CPU.Count, inv.Memory.PhysicalMB,
		len(inv.Disks), strings.Join(macs, ", "), driver)
	e.Events = append(e.Events, s.newDiscoveryEvent(n.UUID, "INFO", msg))
	if warn := protocol.DriverWarnings(inv); len(warn) > 0 {
		e.Events = append(e.Events, s.newDiscoveryEvent(n.UUID, "WARNING", "hardware without a driver in the ramdisk: "+clip(strings.Join(warn, "; "), 2048)))
	}
	if err := s.st.EnrolNode(ctx, e); err != nil {
		if errors.Is(err, store.ErrDuplicateAddr) {
			s.log.Info("discovery: report refused, its MAC was enrolled meanwhile", "macs", macs)
			return nil, errAlreadyEnrolled()
		}
		return nil, err
	}
	s.log.Info("discovery: enrolled a new node", "node", n.UUID, "from", from, "macs", macs, "serial", serial)
	return n, nil
}

// discoveredProperties are Ironic inspection's properties of the machine.
func discoveredProperties(inv protocol.Inventory) map[string]any {
	p := map[string]any{}
	if inv.CPU.Count > 0 {
		p["cpus"] = inv.CPU.Count
	}
	if a := clip(inv.CPU.Architecture, 32); a != "" {
		p["cpu_arch"] = a
	}
	if inv.Memory.PhysicalMB > 0 {
		p["memory_mb"] = inv.Memory.PhysicalMB
	}
	if m := inv.Boot.CurrentBootMode; m == "uefi" || m == "bios" {
		p["capabilities"] = "boot_mode:" + m
	}
	return p
}

// discoveryNote records a refused report in an existing node's history,
// once per noteInterval and node (the caller holds s.discovery.mu).
func (s *Server) discoveryNote(ctx context.Context, nodeUUID, msg string) {
	d, now := s.discovery, time.Now()
	if at, ok := d.noted[nodeUUID]; ok && now.Sub(at) < noteInterval {
		return
	}
	if len(d.noted) >= 4096 {
		clear(d.noted)
	}
	d.noted[nodeUUID] = now
	s.discoveryEvent(ctx, nodeUUID, "WARNING", msg+" (repeats within 10 minutes are not recorded)")
}

func (s *Server) discoveryEvent(ctx context.Context, nodeUUID, severity, msg string) {
	e := s.newDiscoveryEvent(nodeUUID, severity, msg)
	if err := s.st.AppendEvent(ctx, e); err != nil {
		s.log.Warn("discovery: recording a history event failed", "node", nodeUUID, "err", err)
	}
}

func (s *Server) newDiscoveryEvent(nodeUUID, severity, msg string) *store.Event {
	return &store.Event{UUID: uuid.NewString(), NodeUUID: nodeUUID, CreatedAt: time.Now().UTC(), Severity: severity,
		EventType: "provisioning", Event: msg, Conductor: s.cond.Host()}
}

// clip bounds a string from an unauthenticated report to n bytes, cutting
// before a character the bound falls in: half a character is invalid
// UTF-8, which PostgreSQL refuses to store.
func clip(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return strings.ToValidUTF8(s[:n], "")
	}
	return s
}

// discoveredLocalLink is the local_link_connection of the port with MAC
// mac from the LLDP frame its NIC heard (nil when none).
func discoveredLocalLink(inv protocol.Inventory, mac string) map[string]any {
	for _, nic := range inv.Interfaces {
		if hw, err := net.ParseMAC(strings.TrimSpace(nic.MACAddress)); err == nil && hw.String() == mac && len(nic.LLDP) > 0 {
			llc, _ := lldp.PortLocalLinkConnection(nil, nic.LLDP)
			return llc
		}
	}
	return nil
}
