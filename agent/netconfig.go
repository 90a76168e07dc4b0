package agent

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/u-root/u-root/pkg/dhclient"
	"github.com/vishvananda/netlink"
)

// StaticIP is a fixed IPv4 configuration for networks without DHCP, from
// the kernel command line: Ironic's ip= form or anvil.ip=.
type StaticIP struct {
	Address netip.Prefix
	Gateway netip.Addr // invalid: no default route
	// Device is an interface name or MAC; empty picks BOOTIF's MAC, else
	// the first interface that gets a carrier.
	Device string
	DNS    []netip.Addr
}

// VLAN makes the agent use an 802.1Q interface on top of the physical
// one(s) (anvil.vlan=ID[,device]).
type VLAN struct {
	ID     int
	Device string // interface name or MAC; empty: every interface used
}

// parseKernelIP reads the kernel's (and Ironic's) ip= form,
// ip=<client>:<server>:<gateway>:<netmask>:<hostname>:<device>:<autoconf>:<dns0>:<dns1>.
// Values that ask for autoconfiguration (ip=dhcp, ip=on, ...) give nil:
// DHCP is what the agent does anyway.
func parseKernelIP(v string) (*StaticIP, error) {
	switch v {
	case "", "dhcp", "on", "any", "both", "bootp", "rarp", "off", "none":
		return nil, nil
	}
	f := strings.Split(v, ":")
	for len(f) < 9 {
		f = append(f, "")
	}
	client, err := netip.ParseAddr(f[0])
	if err != nil || !client.Is4() {
		return nil, fmt.Errorf("ip=%s: client address %q is not IPv4", v, f[0])
	}
	bits := 24
	if f[3] != "" {
		mask, err := netip.ParseAddr(f[3])
		if err != nil || !mask.Is4() {
			return nil, fmt.Errorf("ip=%s: netmask %q is not IPv4", v, f[3])
		}
		ones, total := net.IPMask(mask.AsSlice()).Size()
		if total == 0 {
			return nil, fmt.Errorf("ip=%s: netmask %s is not contiguous", v, f[3])
		}
		bits = ones
	}
	s := &StaticIP{Address: netip.PrefixFrom(client, bits), Device: f[5]}
	if f[2] != "" {
		if s.Gateway, err = netip.ParseAddr(f[2]); err != nil || !s.Gateway.Is4() {
			return nil, fmt.Errorf("ip=%s: gateway %q is not IPv4", v, f[2])
		}
	}
	for _, d := range f[7:9] {
		if d == "" {
			continue
		}
		a, err := netip.ParseAddr(d)
		if err != nil {
			return nil, fmt.Errorf("ip=%s: DNS server %q: %w", v, d, err)
		}
		s.DNS = append(s.DNS, a)
	}
	return s, nil
}

// parseAnvilIP reads anvil.ip=<address>/<prefix>[,<gateway>[,<device>]].
func parseAnvilIP(v string) (*StaticIP, error) {
	f := strings.Split(v, ",")
	p, err := netip.ParsePrefix(f[0])
	if err != nil || !p.Addr().Is4() {
		return nil, fmt.Errorf("anvil.ip=%s: want <IPv4 address>/<prefix length>[,<gateway>[,<interface or MAC>]]", v)
	}
	s := &StaticIP{Address: p}
	if len(f) > 1 && f[1] != "" {
		if s.Gateway, err = netip.ParseAddr(f[1]); err != nil || !s.Gateway.Is4() {
			return nil, fmt.Errorf("anvil.ip=%s: gateway %q is not IPv4", v, f[1])
		}
	}
	if len(f) > 2 {
		s.Device = f[2]
	}
	if len(f) > 3 {
		return nil, fmt.Errorf("anvil.ip=%s: too many fields", v)
	}
	return s, nil
}

// parseVLAN reads anvil.vlan=<id>[,<device>].
func parseVLAN(v string) (*VLAN, error) {
	idStr, dev, _ := strings.Cut(v, ",")
	id, err := strconv.Atoi(idStr)
	if err != nil || id < 1 || id > 4094 {
		return nil, fmt.Errorf("anvil.vlan=%s: VLAN ID must be 1-4094", v)
	}
	return &VLAN{ID: id, Device: dev}, nil
}

// parseBootIF reads PXELINUX's/Ironic's BOOTIF=01-aa-bb-cc-dd-ee-ff (the
// 01 is the ARP hardware type) into a MAC.
func parseBootIF(v string) string {
	v = strings.ToLower(v)
	if len(v) == 20 && strings.HasPrefix(v, "01-") {
		v = v[3:]
	}
	mac, err := net.ParseMAC(strings.ReplaceAll(v, "-", ":"))
	if err != nil {
		return ""
	}
	return mac.String()
}

// LinkSetup is what static addressing and VLANs need from the kernel;
// NetlinkSetup is the real one.
type LinkSetup interface {
	// AddVLAN creates (or finds) the VLAN interface id on parent, both up,
	// and returns its name.
	AddVLAN(parent string, id int) (string, error)
	// FirstCarrier brings the interfaces up and returns the first that
	// gets a carrier.
	FirstCarrier(ctx context.Context, names []string) (string, error)
	// Static configures s on the interface.
	Static(ctx context.Context, name string, s StaticIP) error
	// AddBond creates (or finds) the bond name in mode over the member
	// interfaces, all up, and returns its name.
	AddBond(name, mode string, members []string) (string, error)
}

// NetlinkSetup is LinkSetup over netlink.
type NetlinkSetup struct {
	LinkUpTimeout time.Duration // default 10 s
	// ResolvConf is written with StaticIP.DNS when there is any
	// (default /etc/resolv.conf).
	ResolvConf string
}

var _ LinkSetup = NetlinkSetup{}

// AddVLAN implements LinkSetup.
func (s NetlinkSetup) AddVLAN(parent string, id int) (string, error) {
	p, err := netlink.LinkByName(parent)
	if err != nil {
		return "", fmt.Errorf("VLAN %d on %s: %w", id, parent, err)
	}
	if err := netlink.LinkSetUp(p); err != nil {
		return "", fmt.Errorf("VLAN %d: bring %s up: %w", id, parent, err)
	}
	name := fmt.Sprintf("%s.%d", parent, id)
	if len(name) > 15 { // IFNAMSIZ-1
		name = fmt.Sprintf("vlan%d.%d", p.Attrs().Index, id)
	}
	if _, err := netlink.LinkByName(name); err != nil {
		v := &netlink.Vlan{LinkAttrs: netlink.LinkAttrs{Name: name, ParentIndex: p.Attrs().Index}, VlanId: id}
		if err := netlink.LinkAdd(v); err != nil {
			return "", fmt.Errorf("VLAN %d on %s: %w", id, parent, err)
		}
	}
	return name, nil
}

// AddBond implements LinkSetup. The members are taken down to be
// enslaved (the kernel refuses an up interface), then the bond and they
// come up; the kernel loads the bonding driver on demand
// (rtnl-link-bond, through /sbin/modprobe). It returns the bond's name;
// its mode is the kernel's, read back.
func (s NetlinkSetup) AddBond(name, mode string, members []string) (string, error) {
	m := netlink.StringToBondMode(mode)
	if m == netlink.BOND_MODE_UNKNOWN {
		return "", fmt.Errorf("bond %s: unknown mode %q", name, mode)
	}
	l, err := bondLink(name, m)
	if err != nil {
		return "", err
	}
	for _, mem := range members {
		ml, err := netlink.LinkByName(mem)
		if err != nil {
			return "", fmt.Errorf("bond %s: member %s: %w", name, mem, err)
		}
		if ml.Attrs().MasterIndex == l.Attrs().Index {
			continue
		}
		if err := netlink.LinkSetDown(ml); err != nil {
			return "", fmt.Errorf("bond %s: take %s down: %w", name, mem, err)
		}
		if err := netlink.LinkSetMasterByIndex(ml, l.Attrs().Index); err != nil {
			return "", fmt.Errorf("bond %s: enslave %s: %w", name, mem, err)
		}
		if err := netlink.LinkSetUp(ml); err != nil {
			return "", fmt.Errorf("bond %s: bring %s up: %w", name, mem, err)
		}
	}
	if err := netlink.LinkSetUp(l); err != nil {
		return "", fmt.Errorf("bond %s: bring it up: %w", name, err)
	}
	return name, nil
}

// bondLink finds the bond name in mode m, or makes it. Loading the
// bonding driver (which the first bond's creation does) also creates a
// bond0 of the driver's default mode, balance-rr: creating bond0 then
// fails with EEXIST, and the bond found must not be kept in that mode
// (a balance-rr bond sends on both links, which a switch that expects
// active-backup does not take). A bond in another mode is replaced; the
// driver's refuses mode changes while it has members, and the agent's own
// bond in the right mode keeps them.
func bondLink(name string, m netlink.BondMode) (netlink.Link, error) {
	for range 3 {
		if l, err := netlink.LinkByName(name); err == nil {
			b, ok := l.(*netlink.Bond)
			if !ok {
				return nil, fmt.Errorf("bond %s: an interface of that name exists and is a %s", name, l.Type())
			}
			if b.Mode == m {
				return l, nil
			}
			if err := netlink.LinkDel(l); err != nil {
				return nil, fmt.Errorf("bond %s: replace the %s bond: %w", name, b.Mode, err)
			}
		}
		b := netlink.NewLinkBond(netlink.LinkAttrs{Name: name})
		b.Mode, b.Miimon = m, 100
		if err := netlink.LinkAdd(b); err != nil && !errors.Is(err, os.ErrExist) {
			return nil, fmt.Errorf("bond %s (%s): %w", name, m, err)
		}
	}
	return nil, fmt.Errorf("bond %s (%s): the kernel keeps another bond of that name", name, m)
}

// FirstCarrier implements LinkSetup.
func (s NetlinkSetup) FirstCarrier(ctx context.Context, names []string) (string, error) {
	up := s.LinkUpTimeout
	if up <= 0 {
		up = 10 * time.Second
	}
	first, errs, err := firstToSucceed(ctx, names, func(n string) error {
		if _, err := dhclient.IfUp(n, up); err != nil {
			return fmt.Errorf("%s: %w", n, err)
		}
		return nil
	})
	if err != nil || first != "" {
		return first, err
	}
	return "", fmt.Errorf("no interface got a carrier: %w", errors.Join(errs...))
}

// firstToSucceed runs try on every interface at once, so a port without a
// carrier costs only its own goroutine, and returns the first name it
// succeeds on without waiting for the rest (they go on in the background).
// When none succeeds, first is "" and errs holds every failure; err is
// ctx's, when it ends first.
func firstToSucceed(ctx context.Context, names []string, try func(name string) error) (first string, errs []error, err error) {
	type result struct {
		name string
		err  error
	}
	results := make(chan result, len(names))
	for _, name := range names {
		go func() { results <- result{name, try(name)} }()
	}
	for range names {
		select {
		case <-ctx.Done():
			return "", nil, ctx.Err()
		case r := <-results:
			if r.err == nil {
				return r.name, nil, nil
			}
			errs = append(errs, r.err)
		}
	}
	return "", errs, nil
}

// Static implements LinkSetup.
func (s NetlinkSetup) Static(ctx context.Context, name string, cfg StaticIP) error {
	up := s.LinkUpTimeout
	if up <= 0 {
		up = 10 * time.Second
	}
	l, err := dhclient.IfUp(name, up)
	if err != nil {
		return fmt.Errorf("static address on %s: %w", name, err)
	}
	addr := &netlink.Addr{IPNet: &net.IPNet{IP: cfg.Address.Addr().AsSlice(), Mask: net.CIDRMask(cfg.Address.Bits(), 32)}}
	if err := netlink.AddrReplace(l, addr); err != nil {
		return fmt.Errorf("static address %s on %s: %w", cfg.Address, name, err)
	}
	if cfg.Gateway.IsValid() {
		r := &netlink.Route{LinkIndex: l.Attrs().Index, Gw: cfg.Gateway.AsSlice()}
		if err := netlink.RouteReplace(r); err != nil {
			return fmt.Errorf("default route via %s on %s: %w", cfg.Gateway, name, err)
		}
	}
	if len(cfg.DNS) > 0 {
		file := s.ResolvConf
		if file == "" {
			file = "/etc/resolv.conf"
		}
		var b strings.Builder
		for _, d := range cfg.DNS {
			fmt.Fprintf(&b, "nameserver %s\n", d)
		}
		if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
			return fmt.Errorf("resolv.conf: %w", err)
		}
	}
	return nil
}
