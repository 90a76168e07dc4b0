package dhcp

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"

	"github.com/anvil-metal/anvil/controller/limits"
)

// Mode is how the service answers.
type Mode int

const (
	// ModeProxy answers network-boot clients with boot information only
	// (RFC 4578 proxyDHCP, PXE spec): the site's DHCP server gives addresses.
	ModeProxy Mode = iota + 1
	// ModeFull gives addresses from a range as well.
	ModeFull
)

// ErrUnknownMAC is what Nodes.BootTarget returns for a MAC no port has.
var ErrUnknownMAC = errors.New("dhcp: MAC not enrolled")

// Nodes finds the node behind a MAC.
type Nodes interface {
	BootTarget(ctx context.Context, mac string) (Target, error)
}

// Config configures a Responder.
type Config struct {
	Mode     Mode
	ServerIP netip.Addr // ours on the boot network: server identifier, next server (TFTP)
	Netmask  net.IPMask // of the boot network (full mode)
	Range    Range      // full mode
	// LeaseTime of full-mode addresses (default 1 h; offers are held 1 min).
	LeaseTime time.Duration
	// DiscoveryShare is the percentage of Range, its top addresses, that
	// discovery targets (MACs no port has) may get in full mode, at least
	// one address (default 25): made-up MACs can exhaust only that share,
	// and enrolled nodes may use all of the range.
	DiscoveryShare float64
	// DiscoveryLease is the lease of discovery targets' addresses (default
	// 5 min, at most LeaseTime): enough for the ramdisk to boot and
	// report, after which the machine is a node and gets LeaseTime while
	// it is being booted; made-up MACs lose theirs soon.
	DiscoveryLease time.Duration
	// Limits bound packets per MAC and new discovery targets per second;
	// zero fields take DefaultLimits'.
	Limits Limits
	// Dropped, if set, counts requests refused or ignored for a bound, by
	// a short label: rate, discovery_rate, discovery_share_full,
	// pool_full, malformed.
	Dropped func(reason string)
	// HTTPBase is the controller's URL as nodes reach it, e.g. http://10.0.0.1:6385.
	HTTPBase string
	Nodes    Nodes
	Leases   LeaseStore // full mode
	// Record writes a line into a node's history; severity INFO or WARNING.
	Record func(ctx context.Context, nodeUUID, severity, msg string)
	// Addressed, if set, learns which node now uses which address (an ACK
	// in full mode, a PXE client's request on port 4011 in proxy mode), so
	// the TFTP transfers that follow can be put into the node's history.
	Addressed func(addr netip.Addr, nodeUUID string)
	// Stage, if set, records an exchange with an enrolled node's port in
	// the node's boot timeline (never one with an unknown MAC): what was
	// offered ("offered snponly.efi to <mac> (UEFI PXE, arch ...)") and
	// the outcome ("ok", or why it was not answered).
	Stage  func(nodeUUID, detail, outcome string)
	Logger *slog.Logger
	Now    func() time.Time
}

// Responder decides what (if anything) to answer to a DHCP request.
type Responder struct {
	cfg  Config
	log  *slog.Logger
	pool *pool

	mu       sync.Mutex
	recorded *limits.Keyed // history lines written recently (one a recordInterval), to not repeat retries
	// discovering are the unknown MACs whose firmware was answered in
	// discovery mode, when: only their ramdisk's own DHCP client (a
	// non-PXE client) gets an address in full mode, not every device on
	// the network.
	discovering map[string]time.Time
	perMAC      *limits.Keyed // Limits.PerMAC, by client MAC
	newUnknown  *limits.Keyed // Limits.Discovery, over all unknown MACs (one key)
	rateNotes   *limits.Keyed // one history line a minute per MAC over its rate
}

// Defaults of Config, also those of the controller's flags.
const (
	DefaultLeaseTime      = time.Hour
	DefaultDiscoveryShare = 25.0 // percent
	DefaultDiscoveryLease = 5 * time.Minute
)

const (
	offerHold      = time.Minute
	recordInterval = time.Minute
	maxRecorded    = 4096
	// discoveryWindow is how long after its firmware was answered a
	// machine being discovered may take to boot the ramdisk and ask for
	// an address from it; maxDiscovering bounds the table.
	discoveryWindow = 30 * time.Minute
	maxDiscovering  = 4096
)

// NewResponder checks cfg.
func NewResponder(cfg Config) (*Responder, error) {
	if cfg.Mode != ModeProxy && cfg.Mode != ModeFull {
		return nil, errors.New("dhcp: mode must be proxy or full")
	}
	if !cfg.ServerIP.Is4() {
		return nil, errors.New("dhcp: the server needs an IPv4 address on the boot interface")
	}
	if cfg.Nodes == nil {
		return nil, errors.New("dhcp: no node lookup")
	}
	if cfg.LeaseTime <= 0 {
		cfg.LeaseTime = DefaultLeaseTime
	}
	if cfg.DiscoveryShare == 0 {
		cfg.DiscoveryShare = DefaultDiscoveryShare
	}
	if cfg.DiscoveryLease == 0 {
		cfg.DiscoveryLease = min(DefaultDiscoveryLease, cfg.LeaseTime)
	}
	if !(cfg.DiscoveryShare > 0 && cfg.DiscoveryShare <= 100) {
		return nil, fmt.Errorf("dhcp: discovery share %v%%: want above 0 and at most 100", cfg.DiscoveryShare)
	}
	if cfg.DiscoveryLease < 0 || cfg.DiscoveryLease > cfg.LeaseTime {
		return nil, fmt.Errorf("dhcp: discovery lease %v: want above 0 and at most the lease time %v", cfg.DiscoveryLease, cfg.LeaseTime)
	}
	cfg.Limits = cfg.Limits.withDefaults()
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Record == nil {
		cfg.Record = func(context.Context, string, string, string) {}
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	lim := cfg.Limits
	r := &Responder{cfg: cfg, log: log, discovering: map[string]time.Time{},
		recorded:   limits.NewKeyed(limits.Rate{PerSecond: 1 / recordInterval.Seconds(), Burst: 1}, maxRecorded, cfg.Now),
		perMAC:     limits.NewKeyed(limits.Rate{PerSecond: lim.PerMAC, Burst: lim.PerMACBurst}, maxClients, cfg.Now),
		newUnknown: limits.NewKeyed(limits.Rate{PerSecond: lim.Discovery, Burst: lim.DiscoveryBurst}, 1, cfg.Now),
		rateNotes:  limits.NewKeyed(limits.Rate{PerSecond: 1.0 / 60, Burst: 1}, maxClients, cfg.Now)}
	if cfg.Mode == ModeFull {
		if !cfg.Range.First.IsValid() || cfg.Leases == nil {
			return nil, errors.New("dhcp: full mode needs a range and a lease store")
		}
		if cfg.Netmask == nil {
			return nil, errors.New("dhcp: full mode needs the boot network's netmask")
		}
		main, share := splitRange(cfg.Range, cfg.DiscoveryShare, cfg.ServerIP)
		r.pool = &pool{main: main, share: share, exclude: cfg.ServerIP, st: cfg.Leases}
	}
	return r, nil
}

// Respond returns the reply to req, or nil to stay silent. pxePort says
// req came to port 4011 (a PXE client asking the proxyDHCP server for its
// boot file after the address exchange).
func (r *Responder) Respond(ctx context.Context, req *dhcpv4.DHCPv4, pxePort bool) (*dhcpv4.DHCPv4, error) {
	if req.OpCode != dhcpv4.OpcodeBootRequest || req.HWType != iana.HWTypeEthernet || len(req.ClientHWAddr) != 6 {
		return nil, nil
	}
	mac := req.ClientHWAddr.String()
	mt := req.MessageType()
	kind := classify(req)
	// Before the lookup, which costs a database read.
	if !r.allowMAC(mac) {
		r.drop("rate")
		r.log.Debug("dhcp: ignoring a MAC over its rate", "mac", mac, "type", mt)
		r.noteRate(ctx, mac)
		return nil, nil
	}
	t, err := r.cfg.Nodes.BootTarget(ctx, mac)
	if errors.Is(err, ErrUnknownMAC) {
		r.log.Debug("dhcp: ignoring an unknown MAC", "mac", mac, "kind", kind, "type", mt)
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("dhcp: look up %s: %w", mac, err)
	}
	if t.Discovery {
		if ok, why := r.discoveryAnswer(mac, kind); !ok {
			if why != "" {
				r.drop(why)
			}
			r.log.Debug("dhcp: ignoring an unknown MAC", "mac", mac, "kind", kind, "type", mt, "why", why)
			return nil, nil
		}
	}
	if !t.Booting {
		if kind != KindOther {
			r.stage(t, fmt.Sprintf("%s from %s firmware of %s", mt, kind, mac), "not answered: the node is "+t.State)
			r.record(ctx, t.NodeUUID, "WARNING", fmt.Sprintf("boot service: %s firmware of port %s asked to network-boot (DHCP %s); not answered: the node is %s, which the controller is not booting",
				kind, mac, mt, t.State))
		}
		return nil, nil
	}
	boot := chooseBoot(kind, t, r.cfg.HTTPBase)
	if kind == KindUEFIHTTP && boot.file == "" {
		r.record(ctx, t.NodeUUID, "WARNING", fmt.Sprintf("boot service: UEFI HTTP boot firmware of port %s asked to boot; Secure Boot over UEFI HTTP boot is not supported (Debian's signed network GRUB speaks TFTP only): set the port's boot to UEFI PXE", mac))
	}
	if r.cfg.Mode == ModeProxy {
		return r.proxy(ctx, req, t, kind, boot, pxePort)
	}
	return r.full(ctx, req, t, kind, boot)
}

// proxy answers DISCOVER on port 67 with a proxy OFFER and REQUEST on
// port 4011 with an ACK, both without an address.
func (r *Responder) proxy(ctx context.Context, req *dhcpv4.DHCPv4, t Target, kind Kind, boot bootInfo, pxePort bool) (*dhcpv4.DHCPv4, error) {
	if kind == KindOther || boot.file == "" {
		return nil, nil
	}
	var mt dhcpv4.MessageType
	switch {
	case !pxePort && req.MessageType() == dhcpv4.MessageTypeDiscover:
		mt = dhcpv4.MessageTypeOffer
	case pxePort && req.MessageType() == dhcpv4.MessageTypeRequest:
		mt = dhcpv4.MessageTypeAck
	default:
		return nil, nil // the site's DHCP server handles the rest
	}
	r.stage(t, received(req, kind), "")
	resp, err := r.reply(req, mt, kind, boot)
	if err != nil {
		return nil, err
	}
	if ip, ok := netip.AddrFromSlice(req.ClientIPAddr.To4()); ok && pxePort && r.cfg.Addressed != nil && !ip.IsUnspecified() {
		r.cfg.Addressed(ip, t.NodeUUID)
	}
	r.stage(t, offered(req, kind, boot, "proxyDHCP "+mt.String()), "ok")
	r.record(ctx, t.NodeUUID, "INFO", fmt.Sprintf("boot service: proxyDHCP %s to %s firmware of port %s: %s", mt, kind, macOf(req), describe(kind, boot, r.cfg.ServerIP)))
	return resp, nil
}

// full gives addresses from the range (and boot information to boot firmware).
func (r *Responder) full(ctx context.Context, req *dhcpv4.DHCPv4, t Target, kind Kind, boot bootInfo) (*dhcpv4.DHCPv4, error) {
	now := r.cfg.Now()
	m := macOf(req)
	lease := r.cfg.LeaseTime
	if t.Discovery {
		lease = r.cfg.DiscoveryLease
	}
	switch req.MessageType() {
	case dhcpv4.MessageTypeDiscover:
		r.stage(t, received(req, kind), "")
		want, _ := netip.AddrFromSlice(req.RequestedIPAddress().To4())
		addr, err := r.pool.offer(ctx, m, want, t.Discovery, now, now.Add(offerHold))
		if errors.Is(err, errPoolFull) && t.Discovery {
			r.drop("discovery_share_full")
			if !r.recently("\x00share full") {
				r.log.Warn("boot service: the DHCP range's share for unknown MACs is full: machines to discover get no address until its short leases run out (made-up MACs flooding the network?)",
					"share", fmt.Sprintf("%s-%s", r.pool.share.First, r.pool.share.Last), "lease", r.cfg.DiscoveryLease)
			}
			return nil, nil
		}
		if errors.Is(err, errPoolFull) {
			r.drop("pool_full")
			r.stage(t, fmt.Sprintf("DISCOVER from %s of %s", kind, m), "not answered: no free address in the range")
			r.record(ctx, t.NodeUUID, "WARNING", fmt.Sprintf("boot service: DHCP DISCOVER from %s firmware of port %s not answered: no free address in %s-%s", kind, m, r.cfg.Range.First, r.cfg.Range.Last))
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		resp, err := r.reply(req, dhcpv4.MessageTypeOffer, kind, boot)
		if err != nil {
			return nil, err
		}
		r.withAddress(resp, addr, lease)
		r.stage(t, offered(req, kind, boot, "OFFER of "+addr.String()), "ok")
		return resp, nil
	case dhcpv4.MessageTypeRequest:
		if sid := req.ServerIdentifier(); sid != nil && !sid.Equal(net.IP(r.cfg.ServerIP.AsSlice())) {
			return nil, nil // the client took another server's offer
		}
		r.stage(t, received(req, kind), "")
		ip := req.RequestedIPAddress()
		if ip == nil || ip.IsUnspecified() {
			ip = req.ClientIPAddr // renewing or rebinding
		}
		addr, _ := netip.AddrFromSlice(ip.To4())
		ok, err := r.pool.confirm(ctx, m, addr, t.Discovery, now, now.Add(lease))
		if err != nil {
			return nil, err
		}
		if !ok {
			resp, err := dhcpv4.NewReplyFromRequest(req, dhcpv4.WithMessageType(dhcpv4.MessageTypeNak),
				dhcpv4.WithOption(dhcpv4.OptServerIdentifier(net.IP(r.cfg.ServerIP.AsSlice()))))
			r.stage(t, fmt.Sprintf("REQUEST of %s from %s", addr, m), "NAK: not its address here")
			r.record(ctx, t.NodeUUID, "WARNING", fmt.Sprintf("boot service: DHCP NAK to port %s: it asked for %s, which is not its address here", m, addr))
			return resp, err
		}
		resp, err := r.reply(req, dhcpv4.MessageTypeAck, kind, boot)
		if err != nil {
			return nil, err
		}
		r.withAddress(resp, addr, lease)
		if r.cfg.Addressed != nil {
			r.cfg.Addressed(addr, t.NodeUUID)
		}
		r.stage(t, offered(req, kind, boot, "ACK of "+addr.String()), "ok")
		what := describe(kind, boot, r.cfg.ServerIP)
		r.record(ctx, t.NodeUUID, "INFO", fmt.Sprintf("boot service: DHCP ACK to %s of port %s: address %s; %s", kind, m, addr, what))
		return resp, nil
	}
	return nil, nil // RELEASE, DECLINE, INFORM: the lease simply runs out
}

// reply builds the common part of an answer: server identifier, next
// server and, for boot firmware, the boot file and PXE options.
func (r *Responder) reply(req *dhcpv4.DHCPv4, mt dhcpv4.MessageType, kind Kind, boot bootInfo) (*dhcpv4.DHCPv4, error) {
	sip := net.IP(r.cfg.ServerIP.AsSlice())
	mods := []dhcpv4.Modifier{
		dhcpv4.WithMessageType(mt),
		dhcpv4.WithServerIP(sip),
		dhcpv4.WithOption(dhcpv4.OptServerIdentifier(sip)),
		dhcpv4.WithYourIP(net.IPv4zero),
	}
	if kind != KindOther && boot.file != "" {
		vendor := boot.vendor
		if vendor == "" {
			vendor = "PXEClient" // iPXE recognises a proxy offer by it
		}
		mods = append(mods,
			dhcpv4.WithOption(dhcpv4.OptClassIdentifier(vendor)),
			dhcpv4.WithOption(dhcpv4.OptBootFileName(boot.file)))
		if vendor == "PXEClient" {
			// PXE discovery control 8: boot the file named here, no menus or
			// boot-server discovery (PXE spec 2.1, vendor option 6).
			mods = append(mods, dhcpv4.WithGeneric(dhcpv4.OptionVendorSpecificInformation, []byte{6, 1, 8, 255}))
			mods = append(mods, dhcpv4.WithOption(dhcpv4.OptTFTPServerName(r.cfg.ServerIP.String())))
		}
		if guid := req.Options.Get(dhcpv4.OptionClientMachineIdentifier); guid != nil {
			// Some PXE ROMs drop replies that do not echo their GUID.
			mods = append(mods, dhcpv4.WithGeneric(dhcpv4.OptionClientMachineIdentifier, guid))
		}
	}
	resp, err := dhcpv4.NewReplyFromRequest(req, mods...)
	if err != nil {
		return nil, fmt.Errorf("dhcp: build reply: %w", err)
	}
	if kind != KindOther && boot.file != "" {
		resp.BootFileName = boot.file
	}
	return resp, nil
}

func (r *Responder) withAddress(resp *dhcpv4.DHCPv4, addr netip.Addr, lease time.Duration) {
	resp.YourIPAddr = net.IP(addr.AsSlice())
	resp.UpdateOption(dhcpv4.OptSubnetMask(r.cfg.Netmask))
	resp.UpdateOption(dhcpv4.OptIPAddressLeaseTime(lease))
	resp.UpdateOption(dhcpv4.OptGeneric(dhcpv4.OptionRenewTimeValue, u32bytes(uint32(lease/2/time.Second))))
}

func u32bytes(v uint32) []byte { return []byte{byte(v >> 24), byte(v >> 16), byte(v >> 8), byte(v)} }

func macOf(req *dhcpv4.DHCPv4) string { return req.ClientHWAddr.String() }

// describe says what a reply serves, for the node's history.
func describe(kind Kind, boot bootInfo, server netip.Addr) string {
	switch {
	case boot.file == "":
		return "no boot file (not a network-boot client)"
	case kind == KindBIOS || kind == KindUEFI:
		return fmt.Sprintf("boot file %s over TFTP from %s", boot.file, server)
	}
	return "boot file " + boot.file
}

// discoveryAnswer decides whether a MAC no port has is answered in
// discovery mode: its boot firmware (and it is remembered), a non-PXE
// client only within discoveryWindow of that, so a laptop on the
// provisioning network gets no address from us. Firmware of MACs not
// remembered is answered at Limits.Discovery a second over all, so a
// flood of made-up MACs costs little. why labels a refusal for Dropped
// ("" for a stranger that is simply not ours).
func (r *Responder) discoveryAnswer(mac string, kind Kind) (ok bool, why string) {
	now := r.cfg.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	at, seen := r.discovering[mac]
	seen = seen && now.Sub(at) < discoveryWindow
	if kind == KindOther {
		return seen, ""
	}
	if !seen {
		if !r.newUnknown.Allow("") {
			return false, "discovery_rate"
		}
		makeRoom(r.discovering, maxDiscovering, func(at time.Time) bool { return now.Sub(at) >= discoveryWindow })
	}
	r.discovering[mac] = now
	return true, ""
}

// noteRate says in a node's history, at most once a minute, that its
// port's DHCP packets are being ignored for their rate: anybody can send
// packets with a node's MAC, and a flood of them would otherwise keep the
// node from booting with nothing to show for it but a wait timeout.
func (r *Responder) noteRate(ctx context.Context, mac string) {
	if !r.rateNotes.Allow(mac) {
		return
	}
	t, err := r.cfg.Nodes.BootTarget(ctx, mac)
	if err != nil || t.NodeUUID == "" {
		return
	}
	r.record(ctx, t.NodeUUID, "WARNING", fmt.Sprintf("boot service: DHCP packets of port %s are ignored: more than %v a second (a burst of %d) came with its MAC; "+
		"if the node does not boot, look for a client flooding with it", mac, r.cfg.Limits.PerMAC, r.cfg.Limits.PerMACBurst))
}

// record writes msg into the node's history unless the same line was
// written within recordInterval (firmware retries DHCP every few seconds).
// A machine being discovered has no node yet: its lines go to the log.
func (r *Responder) record(ctx context.Context, nodeUUID, severity, msg string) {
	if r.recently(nodeUUID + "\x00" + msg) {
		return
	}
	if nodeUUID == "" {
		r.log.Info(msg, "discovery", true)
		return
	}
	r.cfg.Record(ctx, nodeUUID, severity, msg)
}

// recently reports whether key was noted within recordInterval, and
// notes it if not.
func (r *Responder) recently(key string) bool { return !r.recorded.Allow(key) }

// stage records an exchange in the node's boot timeline.
func (r *Responder) stage(t Target, detail, outcome string) {
	if r.cfg.Stage != nil && t.NodeUUID != "" {
		r.cfg.Stage(t.NodeUUID, detail, outcome)
	}
}

// received describes a DISCOVER or REQUEST the responder is about to
// answer, for the boot timeline: a firmware that asks again and again
// without taking the answer shows as requests with no download after them,
// which an OFFER/ACK alone cannot tell from a lost answer.
func received(req *dhcpv4.DHCPv4, kind Kind) string {
	what := kind.String()
	if kind != KindOther {
		what += " firmware"
	}
	if archs := req.ClientArch(); len(archs) > 0 {
		return fmt.Sprintf("%s from %s of %s (arch %s)", req.MessageType(), what, macOf(req), archs[0])
	}
	return fmt.Sprintf("%s from %s of %s", req.MessageType(), what, macOf(req))
}

// offered describes an answer for the boot timeline: the boot file offered
// and to whom, with the client's architecture (option 93), and what (an
// OFFER or ACK of an address, a proxyDHCP answer).
func offered(req *dhcpv4.DHCPv4, kind Kind, boot bootInfo, what string) string {
	arch := ""
	if archs := req.ClientArch(); len(archs) > 0 {
		arch = ", arch " + archs[0].String()
	}
	if kind == KindOther || boot.file == "" {
		return fmt.Sprintf("%s to %s (%s%s)", what, macOf(req), kind, arch)
	}
	return fmt.Sprintf("offered %s to %s (%s%s; %s)", boot.file, macOf(req), kind, arch, what)
}
