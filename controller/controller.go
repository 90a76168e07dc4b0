// Package controller assembles the anvil controller daemon: store,
// conductor and API behind one HTTP listener.
package controller

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/controller/api"
	"github.com/anvil-metal/anvil/controller/boot"
	"github.com/anvil-metal/anvil/controller/boot/dhcp"
	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/console"
	"github.com/anvil-metal/anvil/controller/erasure"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/postgres"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/controller/timeline"
	"github.com/anvil-metal/anvil/controller/ui"
	"github.com/anvil-metal/anvil/controller/vmedia"
	"github.com/anvil-metal/anvil/internal/tempdir"
	"github.com/anvil-metal/anvil/protocol"
)

// Config is the daemon's configuration, filled by cmd/anvil-controller.
type Config struct {
	Listen   string // address to listen on
	Database string // sqlite://PATH, sqlite://:memory: or postgres://...
	Auth     string // noauth | http_basic
	HTPasswd string // htpasswd file for http_basic
	// UsersFile gives http_basic accounts their roles and scopes; ""
	// makes every account a system admin. Reloaded on SIGHUP.
	UsersFile string
	// PolicyFile overrides Ironic's default policy rules ("": none).
	// Reloaded on SIGHUP.
	PolicyFile          string
	AllowInsecureNoAuth bool   // allow noauth on a non-loopback address
	PublicURL           string // URL clients and agents use to reach us
	BootDir             string // vmlinuz and initramfs.cpio.gz served to PXE-booting nodes
	FirmwareDir         string // firmware images served to BMCs for firmware.update
	// VMediaDir keeps the per-node ISOs of redfish-virtual-media boots
	// and the secrets of their URLs (default: vmedia/ in the data
	// directory; without one a temporary directory, removed at exit).
	VMediaDir          string
	BMCMinInterval     time.Duration // minimum spacing of commands to one IPMI BMC
	RedfishMinInterval time.Duration // the same for Redfish BMCs (0: none)
	// RedfishMaxConcurrent caps operations (and Redfish sessions) at once
	// per Redfish BMC (0: bmc's default, 2).
	RedfishMaxConcurrent int
	// Boot is the network-boot service (DHCP, TFTP); off unless set.
	// BootDir, the public URL and the API port are filled in by Run.
	Boot boot.Config
	// PublicLimit bounds lookups, heartbeats and boot files per source.
	PublicLimit api.PublicLimit
	// Discovery enrols machines no node knows when they boot the ramdisk
	// (the boot service answers their MACs too); off unless Enabled.
	Discovery api.DiscoveryConfig
	// Conductor is the conductor's configuration (conductor.DefaultConfig
	// for a production controller); its store-dependent settings and
	// logger are set here.
	Conductor conductor.Config
	// SimulateAgents runs a simulated agent for every fake-hardware node
	// with the direct deploy interface (a development mode).
	SimulateAgents bool
	// SimulateStepTime is how long a simulated erase or image write runs
	// (0 = 1s); the dashboard's tests slow it down to watch progress.
	SimulateStepTime time.Duration
	// HTTP bounds clients' connections (timeouts, unauthenticated
	// connections per source); nil means api.DefaultHTTPLimits.
	HTTP *api.HTTPLimits
	// MetricsListen serves /metrics on an address of its own, without
	// auth, instead of on the API behind its auth; MetricsPublic serves it
	// on the API to anyone.
	MetricsListen string
	MetricsPublic bool
	// DataDir holds the key that signs sanitization records (created on
	// first start) and, unless VMediaDir says otherwise, the per-node ISOs
	// of virtual-media boots under way (vmedia/); "" means the SQLite
	// database's directory, and with a database that has none (:memory:,
	// PostgreSQL) a throwaway key and a temporary directory.
	DataDir string
	// VmediaDataMaxBytes bounds the images the vmedia API downloads for
	// image_download_source "local", all nodes together (0: the default,
	// vmedia.DefaultDataMaxTotal); an attach past it is refused.
	VmediaDataMaxBytes int64
	// TLS makes the controller serve HTTPS (the zero value: plain HTTP).
	TLS    TLSConfig
	Logger *slog.Logger
	// ConsoleTCPListen serves the nodes' serial consoles on a plain TCP
	// port too, each behind its node's token (consoles.go); "" = off.
	ConsoleTCPListen string
	// Ready, if set, receives the bound address once the listener is up.
	Ready func(addr net.Addr)
}

// OpenStore opens the store named by a database URL.
func OpenStore(ctx context.Context, url string) (store.Store, error) {
	switch {
	case strings.HasPrefix(url, "sqlite://"):
		return sqlite.Open(ctx, strings.TrimPrefix(url, "sqlite://"))
	case isPostgres(url):
		s, err := postgres.Open(ctx, url)
		if err != nil {
			return nil, err // not s: a nil *postgres.Store would be a non-nil store.Store
		}
		return s, nil
	}
	return nil, fmt.Errorf("unsupported database URL %q: use sqlite://PATH, sqlite://:memory: or postgres://USER:PASSWORD@HOST/DB", redactURL(url))
}

func isPostgres(url string) bool {
	return strings.HasPrefix(url, "postgres://") || strings.HasPrefix(url, "postgresql://")
}

// withPoolSize sets a PostgreSQL URL's pool size unless the operator did
// (pool_max_conns); other URLs are returned unchanged.
func withPoolSize(url string, n int) string {
	if !isPostgres(url) || strings.Contains(url, "pool_max_conns=") {
		return url
	}
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	return fmt.Sprintf("%s%spool_max_conns=%d", url, sep, n)
}

// authenticator builds the configured auth, refusing unsafe combinations.
func authenticator(cfg Config) (api.Authenticator, error) {
	switch cfg.Auth {
	case "", "noauth":
		if !cfg.AllowInsecureNoAuth && !isLoopback(cfg.Listen) {
			return nil, fmt.Errorf("refusing noauth on non-loopback address %s: use --auth http_basic --htpasswd FILE, or --allow-insecure-noauth", cfg.Listen)
		}
		return nil, nil
	case "http_basic":
		if cfg.HTPasswd == "" {
			return nil, errors.New("--auth http_basic needs --htpasswd FILE")
		}
		f, err := os.Open(cfg.HTPasswd)
		if err != nil {
			return nil, fmt.Errorf("open htpasswd: %w", err)
		}
		defer f.Close()
		return api.ParseHTPasswd(f)
	}
	return nil, fmt.Errorf("unknown auth strategy %q: use noauth or http_basic", cfg.Auth)
}

func isLoopback(listen string) bool {
	host, _, err := net.SplitHostPort(listen)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

// Run serves until ctx ends, then drains requests and workers.
func Run(ctx context.Context, cfg Config) error {
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	auth, err := authenticator(cfg)
	if err != nil {
		return err
	}
	authz, err := loadAuthz(cfg)
	if err != nil {
		return err
	}
	metricsRoute := api.MetricsAuthed
	switch {
	case cfg.MetricsListen != "" && cfg.MetricsPublic:
		return errors.New("--metrics-listen and --metrics-public exclude each other: metrics go to their own address or to the API's")
	case cfg.MetricsListen != "":
		metricsRoute = api.MetricsElsewhere
	case cfg.MetricsPublic:
		metricsRoute = api.MetricsPublic
	}
	limits := api.DefaultHTTPLimits()
	if cfg.HTTP != nil {
		limits = *cfg.HTTP
	}
	var passwords *swapAuth // the htpasswd file, swapped on SIGHUP
	var cached *cachedAuth
	if auth != nil {
		passwords = newSwapAuth(auth)
		// bcrypt costs tens of milliseconds per request; the dashboard
		// makes a few requests a second.
		if cached, err = newCachedAuth(passwords, time.Minute); err != nil {
			return err
		}
		auth = cached
	}
	var tlsConf *tls.Config  // the server's; nil = plain HTTP
	var agentTLS *tls.Config // simulated agents pin the certificate as real ones do
	var pin string
	if cfg.TLS.Enabled() {
		cert, fp, err := ServerCertificate(cfg)
		if err != nil {
			return err
		}
		tlsConf, pin = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}, fp.String()
		agentTLS = protocol.PinnedTLSConfig(fp)
		log.Info("serving HTTPS; agents are told to pin this certificate", "tls_fingerprint", pin, "self_signed", cfg.TLS.SelfSigned)
		if cfg.TLS.SelfSigned {
			log.Info("self-signed certificate", "dir", tlsDir(cfg), "cert", SelfSignedCert, "fingerprint_file", SelfSignedFingerprint)
			if miss := missingHosts(cert, selfSignedHosts(cfg)); len(miss) > 0 {
				log.Warn("the self-signed certificate (kept from an earlier start so agents' pins stay valid) does not name these hosts; clients verifying names will refuse them",
					"hosts", miss, "fix", "remove "+SelfSignedCert+" and "+SelfSignedKey+" to create a new one")
			}
		}
	} else {
		log.Warn("serving plain HTTP: anyone on the network can read credentials and agent tokens, and a rogue server can pose as the controller to the ramdisk; use --tls-self-signed or --tls-cert/--tls-key outside labs")
	}
	cc := cfg.Conductor.WithDefaults()
	cc.Logger, cc.SoleController = log, strings.HasPrefix(cfg.Database, "sqlite://")
	signer, err := recordSigner(cfg, log)
	if err != nil {
		return err
	}
	cc.Records = signer
	cc.RamdiskSHA256 = func() string { return ramdiskSHA256(cfg.BootDir, log) }
	// The conductor's workers, its BMC pool and its loops get a database
	// pool of their own; API requests get another, so a busy fleet never
	// makes an operator's list or show wait for a connection. (SQLite has
	// one writer whatever we do, and reads on their own connections.)
	st, err := OpenStore(ctx, withPoolSize(cfg.Database, cc.Workers+12))
	if err != nil {
		return err
	}
	defer st.Close()
	apiStore := st
	if isPostgres(cfg.Database) {
		if apiStore, err = OpenStore(ctx, withPoolSize(cfg.Database, 16)); err != nil {
			return err
		}
		defer apiStore.Close()
	}
	bmcs := bmc.New(bmc.Config{Logger: log.With("component", "bmc"), MinInterval: cfg.BMCMinInterval, RedfishMinInterval: cfg.RedfishMinInterval,
		RedfishMaxConcurrent: cfg.RedfishMaxConcurrent})
	// Kept Redfish sessions are logged out on the way out, after
	// everything that uses the BMCs (defers run last-in first-out).
	defer bmcs.Close(context.WithoutCancel(ctx))
	// note records what the BMC did (which provider answered) in the node's
	// history.
	note := recorder(st, log, cc.Host, "bmc")
	var fake conductor.Driver = conductor.FakeDriver{}
	var listenURL string
	var sim *simulatedHardware
	if cfg.SimulateAgents {
		sim = newSimulatedHardware(ctx, st, log.With("component", "simagent"), func() string { return listenURL }, cfg.SimulateStepTime, agentTLS)
		defer sim.shutdown()
		fake = sim
		log.Warn("simulating agents for fake-hardware nodes with deploy_interface=direct (development mode)")
	}
	media, closeMedia, err := openVirtualMedia(cfg, log, pin != "", func() string {
		if cfg.PublicURL != "" {
			return cfg.PublicURL
		}
		return listenURL
	})
	if err != nil {
		return err
	}
	var apiMedia api.VirtualMedia
	if media != nil {
		cc.Media, apiMedia = media, media
		defer closeMedia()
	}
	data, closeData, err := openDataImages(cfg, log, pin != "", func() string {
		if cfg.PublicURL != "" {
			return cfg.PublicURL
		}
		return listenURL
	})
	if err != nil {
		return err
	}
	defer closeData()
	cc.DataImages = data
	// Images kept from the last run whose node was deleted meanwhile go.
	data.Sweep(ctx, func(ctx context.Context, uuid string) (bool, error) {
		_, err := st.GetNode(ctx, uuid)
		if errors.Is(err, store.ErrNotFound) {
			return false, nil
		}
		return err == nil, err
	})
	metrics := api.NewMetrics(apiStore)
	cc.BootScripts, cc.Suppressed, cc.DeployTimed = cfg.BootDir != "", metrics.Suppressed, metrics.DeployTimed
	if cfg.Boot.DHCP == "full" {
		ls, ok := st.(interface {
			ListDHCPLeases(context.Context) ([]store.DHCPLease, error)
		})
		if !ok {
			return fmt.Errorf("--boot-dhcp full needs a database that keeps DHCP leases; %T does not", st)
		}
		cc.Leases = leaseBook{st: ls, now: time.Now, term: dhcp.DefaultLeaseTime}
	}
	// Boot timelines are written by one goroutine of their own, off the
	// paths that record them (heartbeats, DHCP, downloads).
	tl := timeline.New(timeline.Config{Store: st, Logger: log.With("component", "timeline")})
	tlCtx, stopTL := context.WithCancel(context.WithoutCancel(ctx))
	tlDone := make(chan struct{})
	go func() { tl.Run(tlCtx); close(tlDone) }()
	defer func() { stopTL(); <-tlDone }()
	cc.Timeline = tl
	cond := conductor.New(st, cc,
		fake, conductor.NewBMCDriver(bmc.HardwareIPMI, bmcs, note),
		conductor.NewBMCDriver(bmc.HardwareRedfish, bmcs, note))
	consoles := console.New(console.Config{Opener: console.SOL{}, Logger: log.With("component", "console")})
	owner := consoleOwner(cond, cc.SoleController)
	var consoleLn net.Listener
	var consoleTCP string
	if cfg.ConsoleTCPListen != "" {
		if consoleLn, consoleTCP, err = listenConsoleTCP(cfg.ConsoleTCPListen, publicHost(cfg.PublicURL)); err != nil {
			return err
		}
		defer consoleLn.Close()
	}
	srv := api.New(api.Config{Store: apiStore, Conductor: cond, Logger: log, PublicURL: cfg.PublicURL, Auth: auth, BootDir: cfg.BootDir, FirmwareDir: cfg.FirmwareDir, Media: apiMedia, DataImages: data,
		PublicLimit: cfg.PublicLimit, Metrics: metrics, MetricsRoute: metricsRoute, TLSFingerprint: pin, Discovery: cfg.Discovery,
		RecordsKey: signer.PublicKey(), Timeline: tl, Authz: authz, Consoles: consoles, ConsoleOwner: owner, ConsoleTCP: consoleTCP})
	stopReload := reloadAuthzOnHUP(ctx, cfg, srv, passwords, cached, log)
	defer stopReload()

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	listenURL = "http://" + ln.Addr().String()
	if tlsConf != nil {
		listenURL = "https://" + ln.Addr().String()
	}
	var bootSvc *boot.Service
	if cfg.Boot.Enabled() {
		bc := cfg.Boot
		// Boot loaders fetch in plain HTTP (see api.SplitTLS), also from
		// a controller serving HTTPS; so does the GRUB relay.
		bc.BootDir, bc.HTTPBase, bc.APIPort = cfg.BootDir, plainURL(cfg.PublicURL), ln.Addr().(*net.TCPAddr).Port
		bc.Discovery = cfg.Discovery.Enabled
		bc.GrubConfig = srv.GrubConfig
		bc.Logger = log.With("component", "boot")
		bc.Record = bootRecorder(recorder(st, log, cc.Host, "boot"), func(n int) { metrics.Suppressed("boot", n) })
		bc.Dropped = metrics.Dropped
		bc.Timeline = tl
		bs, ok := st.(boot.Store)
		if !ok {
			ln.Close()
			return fmt.Errorf("the boot service needs a database that keeps DHCP leases; %T does not", st)
		}
		if bootSvc, err = boot.New(bc, bs); err != nil {
			ln.Close()
			return err
		}
	}
	dash := ui.New(ui.Config{API: srv, Counts: apiStore, BIOS: apiStore, Auth: auth, Policy: srv, Logger: log.With("component", "ui")})
	root := http.NewServeMux()
	root.Handle("/ui", dash)
	root.Handle("/ui/", dash)
	root.Handle("/", ui.Protect(srv)) // browsers must show the dashboard's CSRF token to change anything
	hs := api.NewHTTPServer(root, limits, log)
	hs.RegisterOnShutdown(dash.Close)
	servers := []*http.Server{hs}
	listeners := []net.Listener{api.Listen(ln, limits, log)}
	if tlsConf != nil {
		tl, pl := api.SplitTLS(listeners[0], tlsConf, limits.ReadHeaderTimeout)
		listeners[0] = tl
		servers = append(servers, api.NewHTTPServer(srv.PlainBootOnly(), limits, log))
		listeners = append(listeners, pl)
	}
	if cfg.MetricsListen != "" {
		mln, err := net.Listen("tcp", cfg.MetricsListen)
		if err != nil {
			ln.Close()
			return fmt.Errorf("listen on %s for metrics: %w", cfg.MetricsListen, err)
		}
		mux := http.NewServeMux()
		mux.Handle("GET /metrics", metrics.Handler())
		servers = append(servers, api.NewHTTPServer(mux, limits, log))
		listeners = append(listeners, mln)
		log.Info("serving metrics", "addr", mln.Addr().String())
	}
	log.Info("anvil-controller listening", "addr", ln.Addr().String(), "url", listenURL, "database", redactURL(cfg.Database), "auth", cfg.Auth,
		"host", cond.Host(), "lease_holder", cond.Holder(), "metrics", metricsRoute.String())
	if cfg.Ready != nil {
		cfg.Ready(ln.Addr())
	}

	condCtx, stopCond := context.WithCancel(context.WithoutCancel(ctx))
	condDone := make(chan error, 1)
	go func() { condDone <- cond.Run(condCtx) }()
	consolesDone := make(chan struct{})
	go func() {
		runConsoles(condCtx, st, consoles, consoleOwners(cond, cc.SoleController), log)
		close(consolesDone)
	}()
	defer func() { stopCond(); <-consolesDone }()
	if consoleLn != nil {
		log.Info("serving the TCP console port", "addr", consoleLn.Addr().String(), "advertised", consoleTCP)
		go func() {
			if err := consoles.ServeTCP(condCtx, consoleLn); err != nil {
				log.Error("TCP console port stopped", "error", err)
			}
		}()
	}
	serveErr := make(chan error, len(servers))
	for i, s := range servers {
		go func() { serveErr <- s.Serve(listeners[i]) }()
	}
	// bootDone stays nil (never ready) without a boot service; with one it
	// delivers Run's result once, and waitBoot collects it at shutdown.
	var bootDone chan error
	waitBoot := func() {}
	if bootSvc != nil {
		bootDone = make(chan error, 1)
		go func() { bootDone <- bootSvc.Run(condCtx) }()
		waitBoot = func() { <-bootDone }
	}

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		for _, s := range servers {
			s.Close()
		}
		stopCond()
		<-condDone
		waitBoot()
		return fmt.Errorf("http server: %w", err)
	case err := <-bootDone:
		for _, s := range servers {
			s.Close()
		}
		stopCond()
		<-condDone
		return fmt.Errorf("boot service stopped: %w", err)
	}
	log.Info("shutting down: draining requests and workers")
	shutCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, s := range servers[1:] {
		_ = s.Shutdown(shutCtx)
	}
	err = hs.Shutdown(shutCtx)
	stopCond()
	<-condDone
	waitBoot()
	return err
}

// plainURL is an https:// URL as http://, for the boot loaders.
func plainURL(u string) string {
	if rest, ok := strings.CutPrefix(u, "https://"); ok {
		return "http://" + rest
	}
	return u
}

// recorder returns a function that writes a line of eventType into a
// node's history; a failure to record is logged, never fatal.
func recorder(st store.History, log *slog.Logger, host, eventType string) func(ctx context.Context, nodeUUID, severity, msg string) {
	return func(ctx context.Context, nodeUUID, severity, msg string) {
		e := &store.Event{UUID: uuid.NewString(), NodeUUID: nodeUUID, CreatedAt: time.Now().UTC(), Severity: severity,
			EventType: eventType, Event: msg, Conductor: host}
		if err := st.AppendEvent(ctx, e); err != nil {
			log.Warn("recording a history event failed", "node", nodeUUID, "type", eventType, "err", err)
		}
	}
}

// redactURL hides the password of a database URL for logs and errors.
func redactURL(raw string) string {
	u, err := neturl.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	if _, has := u.User.Password(); has {
		u.User = neturl.UserPassword(u.User.Username(), "xxxxx")
	}
	return u.String()
}

// vmediaTempPrefix names the temporary virtual-media directories in
// os.TempDir(), of every controller on the machine.
const vmediaTempPrefix = "anvil-vmedia-"

// openVirtualMedia sets up per-node ISOs when --boot-dir has the agent
// ISO (nil when it has none: redfish-virtual-media boots then fail with a
// message saying why), and returns what closes them.
func openVirtualMedia(cfg Config, log *slog.Logger, plainHTTP bool, publicURL func() string) (*vmedia.Builder, func(), error) {
	if cfg.BootDir == "" {
		return nil, nil, nil
	}
	if _, err := os.Stat(filepath.Join(cfg.BootDir, vmedia.ISOName)); err != nil {
		log.Info("no agent ISO in --boot-dir: redfish-virtual-media boots are off", "boot_dir", cfg.BootDir)
		return nil, nil, nil
	}
	// In the data directory, boots under way survive a restart of the
	// controller (controller/vmedia); in a temporary one they do not.
	dir := cfg.VMediaDir
	if dir == "" && dataDir(cfg) != "" {
		dir = filepath.Join(dataDir(cfg), "vmedia")
	}
	var temp *tempdir.Dir
	if dir == "" {
		log.Warn("no --data-dir or --vmedia-dir: virtual-media boots under way do not survive a restart of the controller")
		// A controller killed outright (SIGKILL) leaves its directory,
		// ISOs and all: those of controllers that are gone go now.
		removed, err := tempdir.Sweep("", vmediaTempPrefix)
		if err != nil {
			log.Warn("could not remove every virtual-media directory of controllers that are gone", "err", err)
		}
		if len(removed) > 0 {
			log.Info("removed the virtual-media directories of controllers that are gone", "dirs", removed)
		}
		if temp, err = tempdir.New("", vmediaTempPrefix); err != nil {
			return nil, nil, fmt.Errorf("virtual media: %w", err)
		}
		dir = temp.Path
	}
	b, err := vmedia.New(vmedia.Config{BootDir: cfg.BootDir, CacheDir: dir, PublicURL: publicURL, Logger: log.With("component", "vmedia"),
		RemoveDir: temp != nil, PlainHTTP: plainHTTP})
	if err != nil {
		if temp != nil {
			_ = temp.Remove()
		}
		return nil, nil, err
	}
	return b, func() {
		b.Close()
		if temp != nil {
			// the directory is gone with b; this lets go of it
			_ = temp.Remove()
		}
	}, nil
}

// openDataImages keeps the images the vmedia API downloads (its
// image_download_source "local") in the data directory's vmedia-data/,
// or in a temporary directory removed at the end.
func openDataImages(cfg Config, log *slog.Logger, plainHTTP bool, publicURL func() string) (*vmedia.DataImages, func(), error) {
	dir, remove := "", func() {}
	if d := dataDir(cfg); d != "" {
		dir = filepath.Join(d, "vmedia-data")
	} else {
		tmp, err := os.MkdirTemp("", "anvil-vmedia-data-")
		if err != nil {
			return nil, nil, fmt.Errorf("data images: %w", err)
		}
		dir, remove = tmp, func() { _ = os.RemoveAll(tmp) }
	}
	d, err := vmedia.NewDataImages(vmedia.DataConfig{Dir: dir, PublicURL: publicURL, PlainHTTP: plainHTTP, MaxTotalBytes: cfg.VmediaDataMaxBytes,
		Logger: log.With("component", "vmedia-data")})
	if err != nil {
		remove()
		return nil, nil, err
	}
	return d, remove, nil
}

// dataDir is where the controller keeps what must survive a restart
// besides the database: --data-dir, else the SQLite database's directory,
// else "" (none: an in-memory or PostgreSQL database).
func dataDir(cfg Config) string {
	if cfg.DataDir != "" {
		return cfg.DataDir
	}
	if path, ok := strings.CutPrefix(cfg.Database, "sqlite://"); ok && path != ":memory:" {
		return filepath.Dir(path)
	}
	return ""
}

// recordSigner loads (or creates) the key that signs sanitization records.
func recordSigner(cfg Config, log *slog.Logger) (*erasure.Signer, error) {
	dir := dataDir(cfg)
	if dir == "" {
		_, key, err := ed25519.GenerateKey(rand.Reader)
		if err != nil {
			return nil, fmt.Errorf("generate a signing key: %w", err)
		}
		log.Warn("no --data-dir: sanitization records are signed with a throwaway key that dies with this process; give --data-dir to keep one",
			"fingerprint", erasure.Fingerprint(key.Public().(ed25519.PublicKey)))
		return erasure.NewSigner(key), nil
	}
	key, err := erasure.LoadOrCreateKey(dir)
	if err != nil {
		return nil, err
	}
	signer := erasure.NewSigner(key)
	log.Info("sanitization records are signed", "key", filepath.Join(dir, erasure.KeyFile), "fingerprint", erasure.Fingerprint(signer.PublicKey()))
	return signer, nil
}

// ramdiskSHA256 hashes the initramfs served from bootDir ("" without one):
// read when a record is signed, so a rebuilt image is the one named.
func ramdiskSHA256(bootDir string, log *slog.Logger) string {
	f, _ := api.OpenBootFile(bootDir, "initramfs")
	if f == nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		log.Warn("hashing the ramdisk for a sanitization record failed", "err", err)
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}
