package agent

import (
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
)

// networkData is Ironic's network_data (Nova's network_data.json, as a
// config drive carries it): links (physical ports, bonds, VLANs),
// networks (addresses on links) and services (DNS).
type networkData struct {
	Links    []ndLink    `json:"links"`
	Networks []ndNetwork `json:"networks"`
	Services []ndService `json:"services"`
}

type ndLink struct {
	ID        string   `json:"id"`
	Type      string   `json:"type"`
	MAC       string   `json:"ethernet_mac_address"`
	VLANID    int      `json:"vlan_id"`
	VLANLink  string   `json:"vlan_link"`
	BondLinks []string `json:"bond_links"`
	BondMode  string   `json:"bond_mode"`
}

type ndNetwork struct {
	ID        string      `json:"id"`
	Type      string      `json:"type"`
	Link      string      `json:"link"`
	IPAddress string      `json:"ip_address"`
	Netmask   string      `json:"netmask"`
	Routes    []ndRoute   `json:"routes"`
	Services  []ndService `json:"services"`
}

type ndRoute struct {
	Network string `json:"network"`
	Netmask string `json:"netmask"`
	Gateway string `json:"gateway"`
}

type ndService struct {
	Type    string `json:"type"`
	Address string `json:"address"`
}

// Bond is a Linux bond over physical ports, from network_data.
type Bond struct {
	Name string
	// Mode is the Linux bonding mode (802.3ad, active-backup, ...).
	Mode string
	// Links are the member ports' MACs.
	Links []string
}

// NetworkPlan is what network_data asks the agent to set up: a static
// address (nil: DHCP), optionally on a VLAN and/or a bond.
type NetworkPlan struct {
	Static *StaticIP
	VLAN   *VLAN
	Bond   *Bond
	// Notes are parts of network_data the agent leaves alone (IPv6
	// networks, extra networks), for the log.
	Notes []string
}

// BondName is the bond interface the agent creates.
const BondName = "bond0"

// Limits on network_data: it comes from the controller's API, written by
// an operator; a typo must not make the agent loop or allocate much.
const (
	maxNetworkDataBytes = 32 << 10
	maxLinkDepth        = 3 // VLAN on bond on ports
)

// bondModes are the modes Linux's bonding driver knows (Nova's
// bond_mode uses the same names).
var bondModes = []string{"balance-rr", "active-backup", "balance-xor", "broadcast", "802.3ad", "balance-tlb", "balance-alb"}

// ParseNetworkData reads network_data (Ironic's/Nova's format) into what
// the agent configures: the first "ipv4" network (static), else the first
// "ipv4_dhcp" one (DHCP on its link), with the VLAN and bond its link is
// built of. An error means the agent cannot follow it at all.
func ParseNetworkData(raw []byte) (NetworkPlan, error) {
	var p NetworkPlan
	if len(raw) > maxNetworkDataBytes {
		return p, fmt.Errorf("network_data: %d bytes, at most %d", len(raw), maxNetworkDataBytes)
	}
	var nd networkData
	if err := json.Unmarshal(raw, &nd); err != nil {
		return p, fmt.Errorf("network_data: %w", err)
	}
	links := map[string]ndLink{}
	for _, l := range nd.Links {
		if l.ID == "" {
			return p, fmt.Errorf("network_data: a link has no id")
		}
		if _, dup := links[l.ID]; dup {
			return p, fmt.Errorf("network_data: link %q given twice", l.ID)
		}
		links[l.ID] = l
	}
	var chosen *ndNetwork
	for i, n := range nd.Networks {
		switch n.Type {
		case "ipv4":
			if chosen == nil || chosen.Type != "ipv4" {
				if chosen != nil {
					p.Notes = append(p.Notes, fmt.Sprintf("network %q (%s) not configured: %q is static", chosen.ID, chosen.Type, n.ID))
				}
				chosen = &nd.Networks[i]
				continue
			}
		case "ipv4_dhcp":
			if chosen == nil {
				chosen = &nd.Networks[i]
				continue
			}
		}
		p.Notes = append(p.Notes, fmt.Sprintf("network %q (%s) not configured by the agent", n.ID, n.Type))
	}
	if chosen == nil {
		return p, fmt.Errorf("network_data: no ipv4 or ipv4_dhcp network")
	}
	dev, err := p.walk(links, chosen.Link, 0)
	if err != nil {
		return p, fmt.Errorf("network_data: network %q: %w", chosen.ID, err)
	}
	if chosen.Type == "ipv4_dhcp" {
		return p, nil
	}
	st, err := parseNDAddress(chosen.IPAddress, chosen.Netmask)
	if err != nil {
		return p, fmt.Errorf("network_data: network %q: %w", chosen.ID, err)
	}
	for _, r := range chosen.Routes {
		if !isDefaultRoute(r) {
			p.Notes = append(p.Notes, fmt.Sprintf("route to %s/%s not configured", r.Network, r.Netmask))
			continue
		}
		gw, err := netip.ParseAddr(r.Gateway)
		if err != nil || !gw.Is4() {
			return p, fmt.Errorf("network_data: network %q: gateway %q is not IPv4", chosen.ID, r.Gateway)
		}
		st.Gateway = gw
	}
	for _, s := range append(append([]ndService(nil), chosen.Services...), nd.Services...) {
		if s.Type != "dns" {
			continue
		}
		a, err := netip.ParseAddr(s.Address)
		if err != nil {
			return p, fmt.Errorf("network_data: DNS server %q: %w", s.Address, err)
		}
		if len(st.DNS) < 3 && !slices.Contains(st.DNS, a) { // resolv.conf's limit
			st.DNS = append(st.DNS, a)
		}
	}
	switch {
	case p.VLAN != nil:
		st.Device = p.VLAN.Device
	case p.Bond == nil:
		st.Device = dev
	}
	p.Static = st
	return p, nil
}

// walk follows link id down to the ports and returns the device the
// address goes on: a port's MAC ("" if it has none: the first port with a
// carrier), or the bond. It fills p.VLAN and p.Bond on the way.
func (p *NetworkPlan) walk(links map[string]ndLink, id string, depth int) (string, error) {
	if depth >= maxLinkDepth {
		return "", fmt.Errorf("links nested deeper than %d (a loop?) at %q", maxLinkDepth, id)
	}
	l, ok := links[id]
	if !ok {
		return "", fmt.Errorf("no link %q", id)
	}
	switch l.Type {
	case "vlan":
		if p.VLAN != nil {
			return "", fmt.Errorf("link %q: VLAN on a VLAN", id)
		}
		if l.VLANID < 1 || l.VLANID > 4094 {
			return "", fmt.Errorf("link %q: VLAN ID %d not in 1-4094", id, l.VLANID)
		}
		p.VLAN = &VLAN{ID: l.VLANID}
		dev, err := p.walk(links, l.VLANLink, depth+1)
		if err != nil {
			return "", err
		}
		p.VLAN.Device = dev
		return dev, nil
	case "bond":
		if p.Bond != nil {
			return "", fmt.Errorf("link %q: bond of bonds", id)
		}
		mode := l.BondMode
		if mode == "" {
			mode = "active-backup"
		}
		if !slices.Contains(bondModes, mode) {
			return "", fmt.Errorf("link %q: bond_mode %q (want one of %s)", id, l.BondMode, strings.Join(bondModes, ", "))
		}
		if len(l.BondLinks) < 1 || len(l.BondLinks) > 8 {
			return "", fmt.Errorf("link %q: %d bond_links, want 1-8", id, len(l.BondLinks))
		}
		p.Bond = &Bond{Name: BondName, Mode: mode}
		for _, m := range l.BondLinks {
			ml, ok := links[m]
			if !ok {
				return "", fmt.Errorf("link %q: no bond member %q", id, m)
			}
			if ml.Type == "vlan" || ml.Type == "bond" {
				return "", fmt.Errorf("link %q: bond member %q is a %s, not a port", id, m, ml.Type)
			}
			mac, err := net.ParseMAC(ml.MAC)
			if err != nil || len(mac) != 6 {
				return "", fmt.Errorf("link %q: bond member %q has no Ethernet MAC (%q)", id, m, ml.MAC)
			}
			p.Bond.Links = append(p.Bond.Links, mac.String())
		}
		return BondName, nil
	default: // phy, ethernet, bridge, ovs, tap, vif, ...: a port, known by its MAC
		if l.MAC == "" {
			return "", nil
		}
		mac, err := net.ParseMAC(l.MAC)
		if err != nil || len(mac) != 6 {
			return "", fmt.Errorf("link %q: ethernet_mac_address %q is not a MAC", id, l.MAC)
		}
		return mac.String(), nil
	}
}

// parseNDAddress reads ip_address with netmask (or CIDR ip_address).
func parseNDAddress(ip, mask string) (*StaticIP, error) {
	if pfx, err := netip.ParsePrefix(ip); err == nil && mask == "" {
		if !pfx.Addr().Is4() {
			return nil, fmt.Errorf("ip_address %q is not IPv4", ip)
		}
		return &StaticIP{Address: pfx}, nil
	}
	a, err := netip.ParseAddr(ip)
	if err != nil || !a.Is4() {
		return nil, fmt.Errorf("ip_address %q is not IPv4", ip)
	}
	if mask == "" {
		return nil, fmt.Errorf("ip_address %s has no netmask", ip)
	}
	m, err := netip.ParseAddr(mask)
	if err != nil || !m.Is4() {
		return nil, fmt.Errorf("netmask %q is not IPv4", mask)
	}
	ones, total := net.IPMask(m.AsSlice()).Size()
	if total == 0 {
		return nil, fmt.Errorf("netmask %s is not contiguous", mask)
	}
	return &StaticIP{Address: netip.PrefixFrom(a, ones)}, nil
}

func isDefaultRoute(r ndRoute) bool {
	if pfx, err := netip.ParsePrefix(r.Network); err == nil {
		return pfx.Bits() == 0 && pfx.Addr().Is4()
	}
	return r.Network == "0.0.0.0" && (r.Netmask == "0.0.0.0" || r.Netmask == "")
}
