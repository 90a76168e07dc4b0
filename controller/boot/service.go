// Package boot is the controller's network-boot service: DHCP (proxy or
// full) and TFTP on the provisioning network, so a rack's servers PXE- or
// HTTP-boot into the agent without a hand-written dnsmasq setup. Off by
// default; switched on by the --boot-* flags.
package boot

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anvil-metal/anvil/controller/boot/dhcp"
	"github.com/anvil-metal/anvil/controller/boot/tftp"
	"github.com/anvil-metal/anvil/controller/limits"
	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
)

// Config is the boot service's part of the controller's configuration.
type Config struct {
	DHCP       string // off | proxy | full
	Interface  string // where DHCP listens (and TFTP by default)
	Range      string // FIRST-LAST, full mode
	TFTPListen string // ADDR:PORT; "" = port 69 on the interface's address when DHCP is on, else no TFTP
	BootDir    string // what TFTP serves
	// Discovery answers MACs no port has too (--boot-discovery): they
	// boot the agent ramdisk in discovery mode and are enrolled by the API.
	Discovery bool
	// DiscoveryDHCPShare is the percentage of Range, its top addresses,
	// that full-mode DHCP gives to MACs no port has
	// (--boot-discovery-dhcp-share; 0: dhcp.DefaultDiscoveryShare), and
	// DiscoveryDHCPLease their lease until they report
	// (--boot-discovery-dhcp-lease; 0: dhcp.DefaultDiscoveryLease).
	DiscoveryDHCPShare float64
	DiscoveryDHCPLease time.Duration
	// HTTPBase is the controller's URL as nodes reach it (--public-url);
	// "" = http://<interface address>:<APIPort>.
	HTTPBase string
	APIPort  int
	// GrubConfig renders a node's GRUB configuration (the API's
	// GET /v1/boot/{mac}/grub, with its per-boot nonce) for the node whose
	// port has mac, as asked over TFTP by client; base is the URL nodes
	// use. The client's address binds the nonce's delivery as for the iPXE
	// script, so it is passed in-process rather than relayed over HTTP.
	GrubConfig func(ctx context.Context, mac, client, base string) ([]byte, error)
	// TFTPMaxLifetime ends a TFTP transfer that runs longer (0: the tftp
	// package's default, 10 minutes).
	TFTPMaxLifetime time.Duration
	Logger          *slog.Logger
	// Record writes a line into a node's history.
	Record func(ctx context.Context, nodeUUID, severity, msg string)
	// Timeline, if set, records the DHCP exchanges and TFTP transfers of
	// enrolled nodes in their boot timelines (controller/timeline); it
	// also learns which node boots from which address, for the HTTP
	// downloads that follow.
	Timeline Timeline
	// Dropped, if set, counts requests the service refused or ignored:
	// service "dhcp" or "tftp", reason a short label (dhcp's reasons, or
	// one of tftp's Drop* constants: "rate", "busy", "per_source",
	// "unknown_share", "silent", "stalled", "lifetime", "not_regular").
	// Meant for a counter with both as labels.
	Dropped func(service, reason string)
}

// Timeline is what the service records boot stages into.
type Timeline interface {
	Record(nodeUUID, stage, detail, outcome string)
	Learn(addr netip.Addr, nodeUUID string)
}

// Store is what the service reads: ports and nodes to decide whom to
// answer, and the DHCP lease table.
type Store interface {
	ListPorts(ctx context.Context, f store.ResourceFilter, p store.Page) ([]*store.Port, error)
	GetNode(ctx context.Context, ident string) (*store.Node, error)
	dhcp.LeaseStore
}

// Service is a configured, listening boot service.
type Service struct {
	log   *slog.Logger
	dhcp  *dhcp.Responder
	conns []*net.UDPConn
	tftp  *tftp.Server
	tconn *net.UDPConn
}

// Enabled reports whether cfg sets any part of the service (New then
// says what is missing or wrong).
func (c Config) Enabled() bool {
	return (c.DHCP != "" && c.DHCP != "off") || c.TFTPListen != "" || c.Interface != "" || c.Range != ""
}

// New checks cfg and opens the sockets, so that a wrong interface or a
// port in use fails the controller's start rather than later.
func New(cfg Config, st Store) (*Service, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	s := &Service{log: log}
	var mode dhcp.Mode
	switch cfg.DHCP {
	case "", "off":
	case "proxy":
		mode = dhcp.ModeProxy
	case "full":
		mode = dhcp.ModeFull
	default:
		return nil, fmt.Errorf("--boot-dhcp %q: use off, proxy or full", cfg.DHCP)
	}
	if mode == 0 && (cfg.Range != "" || cfg.Interface != "") && cfg.TFTPListen == "" {
		return nil, errors.New("--boot-interface and --boot-dhcp-range need --boot-dhcp proxy or full")
	}
	var ifAddr netip.Prefix
	if mode != 0 {
		var err error
		if ifAddr, err = interfaceAddr(cfg.Interface); err != nil {
			return nil, err
		}
	}
	tftpAddr := cfg.TFTPListen
	if tftpAddr == "" && mode != 0 {
		tftpAddr = net.JoinHostPort(ifAddr.Addr().String(), "69")
	}
	if tftpAddr != "" && cfg.BootDir == "" {
		return nil, errors.New("the boot service needs --boot-dir (make image: out/image) for the files it serves")
	}
	base := strings.TrimRight(cfg.HTTPBase, "/")
	if base == "" && ifAddr.IsValid() {
		base = "http://" + net.JoinHostPort(ifAddr.Addr().String(), strconv.Itoa(cfg.APIPort))
	}
	hosts := &hostBook{record: cfg.Record, timeline: cfg.Timeline, nodes: map[netip.Addr]string{}}
	if mode != 0 {
		r, err := newResponder(cfg, mode, ifAddr, base, hosts.learn, st, log)
		if err != nil {
			return nil, err
		}
		s.dhcp = r
		if s.conns, err = dhcp.Listen(cfg.Interface, mode); err != nil {
			return nil, err
		}
	}
	if tftpAddr != "" {
		t, err := tftp.New(tftpConfig(cfg, mode != 0, base, hosts, log))
		if err != nil {
			s.Close()
			return nil, err
		}
		s.tftp = t
		ua, err := net.ResolveUDPAddr("udp4", tftpAddr)
		if err == nil {
			s.tconn, err = net.ListenUDP("udp4", ua)
		}
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("--boot-tftp-listen %s: %w", tftpAddr, err)
		}
		_ = s.tconn.SetReadBuffer(4 << 20) // a burst of RRQs from a rack booting at once
	}
	return s, nil
}

// tftpConfig configures the TFTP server; withDHCP says whether the
// service's DHCP fills hosts.
func tftpConfig(cfg Config, withDHCP bool, base string, hosts *hostBook, log *slog.Logger) tftp.Config {
	grub := grubRelay{config: cfg.GrubConfig, base: base, rate: limits.NewKeyed(grubRate, 1, nil)}
	tc := tftp.Config{Root: cfg.BootDir, Logger: log.With("component", "tftp"), MaxLifetime: cfg.TFTPMaxLifetime,
		Files: grubFiles(), OnTransfer: hosts.transfer}
	if withDHCP {
		// Addresses DHCP gave to (or saw at) nodes being booted keep a
		// share of the TFTP slots that forged sources cannot take.
		// Without DHCP the book stays empty: no source would be known,
		// so all share every slot.
		tc.Known = hosts.known
	}
	if cfg.Dropped != nil {
		tc.Dropped = func(reason string) { cfg.Dropped("tftp", reason) }
		grub.dropped = tc.Dropped
	}
	tc.Dynamic = grub.file
	return tc
}

// grubFiles is the GRUB configuration served over TFTP. Debian's signed
// network GRUB (grubx64.efi, loaded by shim on Secure Boot nodes) reads
// $prefix/grub.cfg from its TFTP server, prefix /grub; this one hands over
// to the node's own configuration, relayed by grubRelay.
func grubFiles() map[string][]byte {
	cfg := []byte("# anvil boot service: hand over to this node's configuration\n" +
		"echo \"anvil: loading the configuration of $net_default_mac\"\n" +
		"configfile $prefix/nodes/$net_default_mac.cfg\n" +
		"echo \"anvil: no configuration for $net_default_mac: see the node's history on the controller\"\n")
	// GRUB's built-in script asks for x86_64-efi/grub.cfg first (and
	// sources it if there): serve the same, so no boot logs a TFTP miss.
	return map[string][]byte{"grub/grub.cfg": cfg, "grub/x86_64-efi/grub.cfg": cfg}
}

// grubRelay serves grub/nodes/<mac>.cfg over TFTP: the node's GRUB
// configuration (which carries the per-boot nonce), from the API in this
// process. Debian's signed GRUB speaks TFTP only.
type grubRelay struct {
	config func(ctx context.Context, mac, client, base string) ([]byte, error)
	base   string // the URL nodes use, for anvil.api=
	// rate bounds the configurations rendered per second over all
	// clients: each costs database reads, and TFTP requests are easily
	// forged from any number of addresses (nil: no bound).
	rate    *limits.Keyed
	dropped func(reason string)
}

// grubRate is how many GRUB configurations the service renders a second,
// bursts of 40: a rack of Secure Boot nodes booting at once asks for one
// (two with a size probe) each.
var grubRate = limits.Rate{PerSecond: 20, Burst: 40}

func (g grubRelay) file(ctx context.Context, name string, client netip.Addr) ([]byte, bool, error) {
	rest, ok := strings.CutPrefix(name, "grub/nodes/")
	mac, ok2 := strings.CutSuffix(rest, ".cfg")
	if !ok || !ok2 {
		return nil, false, nil
	}
	hw, err := net.ParseMAC(mac)
	if err != nil || len(hw) != 6 || g.config == nil {
		return nil, false, fmt.Errorf("grub configuration for %q: not a MAC, or no API to ask", mac)
	}
	if g.rate != nil && !g.rate.Allow("") {
		if g.dropped != nil {
			g.dropped("grub_rate")
		}
		return nil, false, fmt.Errorf("grub configuration for %s: more than %v a second asked for; try again", hw, grubRate.PerSecond)
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	body, err := g.config(ctx, hw.String(), client.String(), g.base)
	if err != nil {
		return nil, false, fmt.Errorf("grub configuration for %s: %w", hw, err)
	}
	return body, true, nil
}

func newResponder(cfg Config, mode dhcp.Mode, ifAddr netip.Prefix, base string, addressed func(netip.Addr, string),
	st Store, log *slog.Logger) (*dhcp.Responder, error) {
	dc := dhcp.Config{Mode: mode, ServerIP: ifAddr.Addr(), Netmask: net.CIDRMask(ifAddr.Bits(), 32), HTTPBase: base,
		Nodes: storeNodes{st: st, discovery: cfg.Discovery}, Leases: st, Record: cfg.Record, Addressed: addressed, Logger: log.With("component", "dhcp"),
		DiscoveryShare: cfg.DiscoveryDHCPShare, DiscoveryLease: cfg.DiscoveryDHCPLease}
	if tl := cfg.Timeline; tl != nil {
		dc.Stage = func(nodeUUID, detail, outcome string) { tl.Record(nodeUUID, store.StageDHCP, detail, outcome) }
	}
	if cfg.Dropped != nil {
		dc.Dropped = func(reason string) { cfg.Dropped("dhcp", reason) }
	}
	if mode == dhcp.ModeFull {
		if cfg.Range == "" {
			return nil, errors.New("--boot-dhcp full needs --boot-dhcp-range FIRST-LAST")
		}
		r, err := dhcp.ParseRange(cfg.Range)
		if err != nil {
			return nil, fmt.Errorf("--boot-dhcp-range: %w", err)
		}
		if !ifAddr.Contains(r.First) || !ifAddr.Contains(r.Last) {
			return nil, fmt.Errorf("--boot-dhcp-range %s is not inside %s's network %s", cfg.Range, cfg.Interface, ifAddr.Masked())
		}
		dc.Range = r
	}
	return dhcp.NewResponder(dc)
}

// interfaceAddr is the first IPv4 address of the named interface.
func interfaceAddr(name string) (netip.Prefix, error) {
	if name == "" {
		return netip.Prefix{}, errors.New("--boot-dhcp needs --boot-interface NAME (the provisioning network's interface)")
	}
	ifc, err := net.InterfaceByName(name)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("--boot-interface %s: %w", name, err)
	}
	addrs, err := ifc.Addrs()
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("--boot-interface %s: %w", name, err)
	}
	for _, a := range addrs {
		if ipn, ok := a.(*net.IPNet); ok && ipn.IP.To4() != nil {
			addr, _ := netip.AddrFromSlice(ipn.IP.To4())
			ones, _ := ipn.Mask.Size()
			return netip.PrefixFrom(addr, ones), nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("--boot-interface %s has no IPv4 address: give it one on the provisioning network", name)
}

// Run serves until ctx ends.
func (s *Service) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	errs := make(chan error, 2)
	if s.dhcp != nil {
		wg.Go(func() { errs <- s.dhcp.ServeAll(ctx, s.conns) })
		s.log.Info("boot service: DHCP listening", "sockets", len(s.conns))
	}
	if s.tftp != nil {
		wg.Go(func() { errs <- s.tftp.Serve(ctx, s.tconn) })
		s.log.Info("boot service: TFTP listening", "addr", s.tconn.LocalAddr().String())
	}
	wg.Wait()
	close(errs)
	s.Close()
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Close releases what New opened (Run does it itself when it ends).
func (s *Service) Close() {
	for _, c := range s.conns {
		c.Close()
	}
	if s.tconn != nil {
		s.tconn.Close()
	}
	if s.tftp != nil {
		s.tftp.Close()
	}
}

// hostBook remembers which node DHCP gave (or saw at) an address, so a
// TFTP transfer to that address goes into the node's history: what it
// fetched, or why it failed (e.g. a file missing from --boot-dir).
type hostBook struct {
	record   func(ctx context.Context, nodeUUID, severity, msg string)
	timeline Timeline // nil: none
	mu       sync.Mutex
	nodes    map[netip.Addr]string
}

// maxHosts bounds the book; it is refilled by the next DHCP answers.
const maxHosts = 16384

func (h *hostBook) learn(addr netip.Addr, nodeUUID string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(h.nodes) >= maxHosts {
		clear(h.nodes)
	}
	h.nodes[addr] = nodeUUID
	if h.timeline != nil {
		h.timeline.Learn(addr, nodeUUID)
	}
}

// known reports whether DHCP gave out or saw addr for a node.
func (h *hostBook) known(addr netip.Addr) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.nodes[addr] != ""
}

func (h *hostBook) transfer(tr tftp.Transfer) {
	h.mu.Lock()
	node := h.nodes[tr.Remote.Addr()]
	h.mu.Unlock()
	if node == "" || errors.Is(tr.Err, tftp.ErrSizeProbe) {
		return
	}
	h.stage(node, tr)
	if h.record == nil {
		return
	}
	if tr.Err != nil {
		h.record(context.Background(), node, "WARNING", fmt.Sprintf("boot service: TFTP of %s to %s failed: %v", tr.File, tr.Remote.Addr(), tr.Err))
		return
	}
	h.record(context.Background(), node, "INFO", fmt.Sprintf("boot service: TFTP sent %s (%d bytes, %v) to %s", tr.File, tr.Bytes, tr.Duration.Round(time.Millisecond), tr.Remote.Addr()))
}

// storeNodes answers dhcp's question "who is behind this MAC?" from the
// store: the port with that address, and its node's state. With discovery
// on, a MAC no port has is a machine to discover.
type storeNodes struct {
	st        Store
	discovery bool
}

func (n storeNodes) unknown(mac string) (dhcp.Target, error) {
	if n.discovery {
		return dhcp.Target{MAC: mac, Discovery: true, Booting: true, State: "unknown (discovery)"}, nil
	}
	return dhcp.Target{}, dhcp.ErrUnknownMAC
}

func (n storeNodes) BootTarget(ctx context.Context, mac string) (dhcp.Target, error) {
	ports, err := n.st.ListPorts(ctx, store.ResourceFilter{Address: &mac}, store.Page{Limit: 1})
	if err != nil {
		return dhcp.Target{}, err
	}
	if len(ports) == 0 {
		return n.unknown(mac)
	}
	p := ports[0]
	node, err := n.st.GetNode(ctx, p.NodeUUID)
	if errors.Is(err, store.ErrNotFound) {
		return n.unknown(mac)
	}
	if err != nil {
		return dhcp.Target{}, err
	}
	t := dhcp.Target{NodeUUID: node.UUID, MAC: mac, State: node.ProvisionState,
		Booting: state.LookupAllowed(state.State(node.ProvisionState)), SecureBoot: SecureBootRequested(node)}
	if !p.PXEEnabled {
		// Ironic boots only ports with pxe_enabled; say so in the history.
		t.Booting, t.State = false, node.ProvisionState+" (port "+mac+" has pxe_enabled false)"
	}
	return t, nil
}

// SecureBootRequested reads Ironic's ways of asking for UEFI Secure Boot:
// the secure_boot capability in instance_info or properties, or
// driver_info secure_boot, each with boot_mode uefi where a mode is given.
func SecureBootRequested(n *store.Node) bool {
	for _, src := range []map[string]any{n.InstanceInfo, n.Properties} {
		if caps := capabilities(src["capabilities"]); caps["secure_boot"] == "true" && caps["boot_mode"] != "bios" {
			return true
		}
	}
	if v, ok := n.DriverInfo["secure_boot"]; ok && truthy(v) {
		return true
	}
	return false
}

// capabilities reads Ironic's capabilities, a "k:v,k:v" string or an object.
func capabilities(v any) map[string]string {
	out := map[string]string{}
	switch c := v.(type) {
	case string:
		for _, kv := range strings.Split(c, ",") {
			if k, val, ok := strings.Cut(strings.TrimSpace(kv), ":"); ok {
				out[k] = strings.ToLower(val)
			}
		}
	case map[string]any:
		for k, val := range c {
			out[k] = strings.ToLower(fmt.Sprint(val))
		}
	}
	return out
}

func truthy(v any) bool {
	switch b := v.(type) {
	case bool:
		return b
	case string:
		ok, _ := strconv.ParseBool(b)
		return ok
	}
	return false
}

// stage records a transfer in the node's boot timeline: the file, to
// whom, bytes and duration, or why it failed ("not found": a file
// missing from --boot-dir).
func (h *hostBook) stage(node string, tr tftp.Transfer) {
	if h.timeline == nil {
		return
	}
	to := tr.File + " to " + tr.Remote.Addr().String()
	switch {
	case tftp.IsNotFound(tr.Err):
		h.timeline.Record(node, store.StageTFTP, to, store.OutcomeNotFound)
	case tr.Err != nil:
		h.timeline.Record(node, store.StageTFTP, fmt.Sprintf("%s (%d bytes sent, %v)", to, tr.Bytes, tr.Duration.Round(time.Millisecond)),
			store.OutcomeFailed+": "+tr.Err.Error())
	default:
		h.timeline.Record(node, store.StageTFTP, fmt.Sprintf("%s (%d bytes, %v)", to, tr.Bytes, tr.Duration.Round(time.Millisecond)), store.OutcomeOK)
	}
}
