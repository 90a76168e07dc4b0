package agent

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/u-root/u-root/pkg/dhclient"
	"github.com/vishvananda/netlink"
)

// Link is one network interface as the agent sees it.
type Link struct {
	Name     string
	MAC      string // lower-case, colon-separated
	Physical bool   // backed by a device, not a bridge, veth or tunnel
	Loopback bool
	Carrier  bool
	HasIPv4  bool
}

// LinkLister lists the machine's interfaces.
type LinkLister interface {
	Links(ctx context.Context) ([]Link, error)
}

// DHCP configures interfaces with DHCPv4 and returns those that got a
// lease. Behind an interface so tests need no NICs; the real one is
// DHCPv4Client.
type DHCP interface {
	Configure(ctx context.Context, names []string) ([]string, error)
}

// Interfaces is the real Network: it picks the interfaces to use, runs
// DHCP on those without an address (in the ramdisk only) and returns their
// MACs for the lookup.
type Interfaces struct {
	Links LinkLister
	// DHCP is nil outside the ramdisk: the agent must not reconfigure a
	// workstation's network, it only reports the MACs.
	DHCP DHCP
	// Hints restrict the interfaces used (anvil.interface=); empty means all.
	Hints []string
	// Setup, Static and VLAN: a fixed address instead of DHCP, and/or a
	// VLAN interface on top of the physical ones. Setup is nil outside
	// the ramdisk, like DHCP.
	Setup  LinkSetup
	Static *StaticIP
	VLAN   *VLAN
	// Bond is created over its ports first (network_data); Static and
	// VLAN then go on it.
	Bond   *Bond
	BootIF string // MAC; where Static goes when it names no device
	Log    *slog.Logger
}

var _ Network = (*Interfaces)(nil)

// Up implements Network. It succeeds when there are MACs to look up with
// and, when configuring, at least one interface has an IPv4 address.
func (n *Interfaces) Up(ctx context.Context) ([]string, error) {
	log := n.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	links, err := n.Links.Links(ctx)
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	use := n.pick(links)
	if len(use) == 0 {
		return nil, fmt.Errorf("no usable interface among %d (hints %v)", len(links), n.Hints)
	}
	var macs, need []string
	addressed := 0
	for _, l := range use {
		macs = append(macs, l.MAC)
		if l.HasIPv4 {
			addressed++
		} else {
			need = append(need, l.Name)
		}
	}
	if n.Setup != nil && (n.Static != nil || n.VLAN != nil || n.Bond != nil) {
		// Every MAC is still reported: the lookup needs them, whichever
		// interface carries the traffic.
		if err := n.configure(ctx, log, use); err != nil {
			return nil, err
		}
		return macs, nil
	}
	if n.DHCP != nil && len(need) > 0 {
		got, err := n.DHCP.Configure(ctx, need)
		log.InfoContext(ctx, "DHCPv4", "interfaces", need, "leased", got, "err", err)
		addressed += len(got)
		if addressed == 0 {
			if err == nil {
				err = errors.New("no lease")
			}
			return nil, fmt.Errorf("DHCPv4 on %v: %w", need, err)
		}
	}
	return macs, nil
}

// configure applies Static and/or VLAN: the VLAN interface goes on the
// named device, else on every interface (DHCP) or on the one the static
// address goes to; the static address goes on the named device, else on
// BOOTIF's, else on the first interface that gets a carrier.
func (n *Interfaces) configure(ctx context.Context, log *slog.Logger, use []Link) error {
	byDevice := func(dev string) (string, error) {
		for _, l := range use {
			if l.Name == dev || strings.EqualFold(l.MAC, dev) {
				return l.Name, nil
			}
		}
		return "", fmt.Errorf("no interface %q among %d", dev, len(use))
	}
	names := make([]string, 0, len(use))
	for _, l := range use {
		names = append(names, l.Name)
	}
	if n.Bond != nil {
		var members []string
		for _, m := range n.Bond.Links {
			name, err := byDevice(m)
			if err != nil {
				return fmt.Errorf("bond %s: %w", n.Bond.Name, err)
			}
			members = append(members, name)
		}
		bond, err := n.Setup.AddBond(n.Bond.Name, n.Bond.Mode, members)
		if err != nil {
			return err
		}
		log.InfoContext(ctx, "bond created", "bond", bond, "mode", n.Bond.Mode, "links", members)
		lookup := byDevice
		byDevice = func(dev string) (string, error) {
			if dev == n.Bond.Name {
				return bond, nil
			}
			return lookup(dev)
		}
		names = []string{bond}
	}
	if n.Static == nil && n.VLAN == nil { // bond + DHCP
		if n.DHCP == nil {
			return nil
		}
		got, err := n.DHCP.Configure(ctx, names)
		log.InfoContext(ctx, "DHCPv4 on bond", "interfaces", names, "leased", got, "err", err)
		if err != nil {
			return fmt.Errorf("DHCPv4 on %v: %w", names, err)
		}
		return nil
	}
	if n.Static == nil { // VLAN + DHCP
		parents := names
		if n.VLAN.Device != "" {
			p, err := byDevice(n.VLAN.Device)
			if err != nil {
				return fmt.Errorf("anvil.vlan: %w", err)
			}
			parents = []string{p}
		}
		var vlans []string
		for _, p := range parents {
			v, err := n.Setup.AddVLAN(p, n.VLAN.ID)
			if err != nil {
				log.WarnContext(ctx, "VLAN interface not created", "parent", p, "vlan", n.VLAN.ID, "err", err)
				continue
			}
			vlans = append(vlans, v)
		}
		if len(vlans) == 0 {
			return fmt.Errorf("VLAN %d: no interface could carry it", n.VLAN.ID)
		}
		if n.DHCP == nil {
			return nil
		}
		got, err := n.DHCP.Configure(ctx, vlans)
		log.InfoContext(ctx, "DHCPv4 on VLAN", "vlan", n.VLAN.ID, "interfaces", vlans, "leased", got, "err", err)
		if err != nil {
			return fmt.Errorf("DHCPv4 on VLAN %d (%v): %w", n.VLAN.ID, vlans, err)
		}
		return nil
	}
	dev := n.Static.Device
	if dev == "" && n.VLAN != nil {
		dev = n.VLAN.Device
	}
	if dev == "" && n.Bond != nil {
		dev = n.Bond.Name
	}
	if dev == "" {
		dev = n.BootIF
	}
	var name string
	var err error
	if dev != "" {
		name, err = byDevice(dev)
	} else {
		name, err = n.Setup.FirstCarrier(ctx, names)
	}
	if err != nil {
		return fmt.Errorf("static address %s: %w", n.Static.Address, err)
	}
	if n.VLAN != nil {
		if name, err = n.Setup.AddVLAN(name, n.VLAN.ID); err != nil {
			return err
		}
	}
	if err := n.Setup.Static(ctx, name, *n.Static); err != nil {
		return err
	}
	log.InfoContext(ctx, "static address configured", "interface", name, "address", n.Static.Address.String(), "gateway", n.Static.Gateway.String())
	return nil
}

// pick chooses the interfaces to report: the hinted ones if any, else the
// physical ones, else (a VM or container without device links) every
// non-loopback interface with a MAC.
func (n *Interfaces) pick(links []Link) []Link {
	var withMAC []Link
	for _, l := range links {
		if !l.Loopback && l.MAC != "" && l.MAC != "00:00:00:00:00:00" {
			withMAC = append(withMAC, l)
		}
	}
	slices.SortFunc(withMAC, func(a, b Link) int { return strings.Compare(a.Name, b.Name) })
	if len(n.Hints) > 0 {
		return slices.DeleteFunc(withMAC, func(l Link) bool { return !slices.Contains(n.Hints, l.Name) })
	}
	physical := slices.DeleteFunc(slices.Clone(withMAC), func(l Link) bool { return !l.Physical })
	if len(physical) > 0 {
		return physical
	}
	return withMAC
}

// SysfsLinks lists interfaces from <Root>/sys/class/net; addresses come
// from the running kernel (Addrs), so they are only meaningful for Root "/".
type SysfsLinks struct {
	Root  string
	Addrs func(name string) ([]net.Addr, error) // nil: net.InterfaceByName
}

var _ LinkLister = SysfsLinks{}

// Links implements LinkLister.
func (s SysfsLinks) Links(context.Context) ([]Link, error) {
	dir := filepath.Join(s.Root, "sys", "class", "net")
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("list interfaces: %w", err)
	}
	var out []Link
	for _, e := range entries {
		name := e.Name()
		p := filepath.Join(dir, name)
		l := Link{Name: name, MAC: strings.ToLower(readTrim(filepath.Join(p, "address")))}
		// ARPHRD_LOOPBACK is 772.
		l.Loopback = readTrim(filepath.Join(p, "type")) == "772" || name == "lo"
		if _, err := os.Stat(filepath.Join(p, "device")); err == nil {
			l.Physical = true
		}
		// carrier is unreadable (EINVAL) while the link is down.
		l.Carrier = readTrim(filepath.Join(p, "carrier")) == "1"
		l.HasIPv4 = s.hasIPv4(name)
		out = append(out, l)
	}
	return out, nil
}

func (s SysfsLinks) hasIPv4(name string) bool {
	addrs := s.Addrs
	if addrs == nil {
		addrs = func(name string) ([]net.Addr, error) {
			ifc, err := net.InterfaceByName(name)
			if err != nil {
				return nil, err
			}
			return ifc.Addrs()
		}
	}
	as, err := addrs(name)
	if err != nil {
		return false
	}
	for _, a := range as {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil && !ipn.IP.IsLoopback() && !ipn.IP.IsLinkLocalUnicast() {
			return true
		}
	}
	return false
}

func readTrim(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// DHCPv4Client is the real DHCP, u-root's dhclient: it brings each link up,
// keeps those that come up with a carrier, configures the leases
// (address, routes, resolv.conf) and keeps them: u-root configures the
// address without a lifetime and never renews, so a lease would lapse
// under a multi-hour erase and the server could hand the address to
// another machine (dnsmasq's default lease is one hour).
type DHCPv4Client struct {
	LinkUpTimeout time.Duration // default 10 s
	Timeout       time.Duration // one request; default 5 s
	Retries       int           // default 3
	// MinRenew is the shortest wait between renewals (default 30 s), so
	// a tiny or failing lease cannot make the agent flood the server.
	MinRenew time.Duration
	Log      *slog.Logger

	mu      sync.Mutex
	keeping map[string]bool // interfaces a goroutine renews the lease of
}

var _ DHCP = (*DHCPv4Client)(nil)

// Configure implements DHCP: it returns the first interface that got a
// lease. Each lease is renewed in the background at half its time until
// ctx ends.
func (d *DHCPv4Client) Configure(ctx context.Context, names []string) ([]string, error) {
	linkUp, timeout, retries := d.LinkUpTimeout, d.Timeout, d.Retries
	if linkUp <= 0 {
		linkUp = 10 * time.Second
	}
	if timeout <= 0 {
		timeout = 5 * time.Second
	}
	if retries <= 0 {
		retries = 3
	}
	log := d.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// Every interface on its own, all at once: IfUp waits for operstate
	// up, which needs a carrier, so an uncabled port only costs its own
	// goroutine, and DHCP starts on each port the moment it has a link.
	// The first lease wins: Configure returns with it while the other
	// ports keep trying in the background (and keep their leases too),
	// so a node with four NICs and only the second cabled comes up as
	// fast as one with a single NIC.
	cfg := dhclient.Config{Timeout: timeout, Retries: retries, LogLevel: dhclient.LogSummary}
	first, errs, err := firstToSucceed(ctx, names, func(name string) error {
		l, err := dhclient.IfUp(name, linkUp)
		if err != nil {
			log.InfoContext(ctx, "interface has no link; skipping", "interface", name, "err", err)
			return fmt.Errorf("%s: no link: %w", name, err)
		}
		return d.lease(ctx, log, l, cfg, linkUp)
	})
	if err != nil {
		return nil, err
	}
	if first != "" {
		return []string{first}, nil
	}
	return nil, errors.Join(errs...)
}

// lease runs DHCPv4 on one link, configures the lease and keeps it.
func (d *DHCPv4Client) lease(ctx context.Context, log *slog.Logger, link netlink.Link, cfg dhclient.Config, linkUp time.Duration) error {
	name := link.Attrs().Name
	var errs []error
	for r := range dhclient.SendRequests(ctx, []netlink.Link{link}, true, false, cfg, linkUp) {
		if r.Err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", name, r.Err))
			continue
		}
		if err := r.Lease.Configure(); err != nil {
			errs = append(errs, fmt.Errorf("%s: configure lease: %w", name, err))
			continue
		}
		lease := leaseTime(r.Lease)
		log.InfoContext(ctx, "DHCPv4 lease configured", "interface", name, "lease", r.Lease.String(), "lease_time", lease.String())
		d.keep(ctx, log, r.Interface, lease, cfg, linkUp)
		return nil
	}
	if len(errs) == 0 {
		return fmt.Errorf("%s: no DHCPv4 answer", name)
	}
	return errors.Join(errs...)
}

// leaseTime is the lease's duration; 0 when it has none or is infinite.
func leaseTime(l dhclient.Lease) time.Duration {
	p, ok := l.(*dhclient.Packet4)
	if !ok || p.P == nil {
		return 0
	}
	t := p.P.IPAddressLeaseTime(0)
	if t >= 0xffffffff*time.Second { // RFC 2131: infinite
		return 0
	}
	return t
}

// renewAfter is how long to wait before renewing a lease of the given
// time that has left remaining: half of what is left, as RFC 2131's T1
// for a fresh lease, but never less than floor. ok is false for a lease
// that needs no renewal (none, or infinite).
func renewAfter(lease, remaining, floor time.Duration) (wait time.Duration, ok bool) {
	if lease <= 0 {
		return 0, false
	}
	return max(remaining/2, floor), true
}

// keep starts, once per interface, a goroutine that renews its lease until
// ctx ends. A renewal is a new exchange with the server (the same MAC gets
// the same address from every server we know); a failed one is retried
// with the time left halving, and after expiry every MinRenew, keeping the
// address: the agent must stay reachable mid-step, and its controller
// connection is what matters.
func (d *DHCPv4Client) keep(ctx context.Context, log *slog.Logger, link netlink.Link, lease time.Duration, cfg dhclient.Config, linkUp time.Duration) {
	name := link.Attrs().Name
	floor := d.MinRenew
	if floor <= 0 {
		floor = 30 * time.Second
	}
	if _, ok := renewAfter(lease, lease, floor); !ok {
		return
	}
	d.mu.Lock()
	if d.keeping == nil {
		d.keeping = map[string]bool{}
	}
	if d.keeping[name] {
		d.mu.Unlock()
		return
	}
	d.keeping[name] = true
	d.mu.Unlock()
	go func() {
		defer func() { d.mu.Lock(); delete(d.keeping, name); d.mu.Unlock() }()
		remaining := lease
		for {
			wait, _ := renewAfter(lease, remaining, floor)
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			remaining -= wait
			renewed, err := renew(ctx, link, cfg, linkUp)
			if err != nil {
				log.WarnContext(ctx, "DHCPv4 lease renewal failed; keeping the address and retrying", "interface", name,
					"err", err, "lease_left", max(remaining, 0).String())
				continue
			}
			if renewed > 0 {
				lease = renewed
			}
			remaining = lease
			log.InfoContext(ctx, "DHCPv4 lease renewed", "interface", name, "lease_time", lease.String())
		}
	}()
}

// renew runs one exchange on link and applies the lease it gets.
func renew(ctx context.Context, link netlink.Link, cfg dhclient.Config, linkUp time.Duration) (time.Duration, error) {
	// One link asked, so the first result is the only one.
	r, ok := <-dhclient.SendRequests(ctx, []netlink.Link{link}, true, false, cfg, linkUp)
	if !ok {
		return 0, errors.New("no answer")
	}
	if r.Err != nil {
		return 0, r.Err
	}
	if err := r.Lease.Configure(); err != nil {
		return 0, fmt.Errorf("configure lease: %w", err)
	}
	return leaseTime(r.Lease), nil
}
