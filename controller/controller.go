// Package controller assembles the anvil controller daemon: store,
// conductor and API behind one HTTP listener.
package controller

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	neturl "net/url"
	"os"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/controller/api"
	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/postgres"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/controller/ui"
)

// Config is the daemon's configuration, filled by cmd/anvil-controller.
type Config struct {
	Listen              string        // address to listen on
	Database            string        // sqlite://PATH, sqlite://:memory: or postgres://...
	Auth                string        // noauth | http_basic
	HTPasswd            string        // htpasswd file for http_basic
	AllowInsecureNoAuth bool          // allow noauth on a non-loopback address
	PublicURL           string        // URL clients and agents use to reach us
	BootDir             string        // vmlinuz and initramfs.cpio.gz served to PXE-booting nodes
	BMCMinInterval      time.Duration // minimum spacing of commands to one BMC
	// PublicLimit bounds lookups, heartbeats and boot files per source.
	PublicLimit api.PublicLimit
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
	Logger           *slog.Logger
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
	if auth != nil {
		// bcrypt costs tens of milliseconds per request; the dashboard
		// makes a few requests a second.
		if auth, err = newCachedAuth(auth, time.Minute); err != nil {
			return err
		}
	}
	cc := cfg.Conductor.WithDefaults()
	cc.Logger, cc.SoleController = log, strings.HasPrefix(cfg.Database, "sqlite://")
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
	bmcs := bmc.New(bmc.Config{Logger: log.With("component", "bmc"), MinInterval: cfg.BMCMinInterval})
	// note records what the BMC did (which provider answered) in the node's
	// history; a failure to record is logged, never fatal.
	note := func(ctx context.Context, nodeUUID, severity, msg string) {
		e := &store.Event{UUID: uuid.NewString(), NodeUUID: nodeUUID, CreatedAt: time.Now().UTC(), Severity: severity,
			EventType: "bmc", Event: msg, Conductor: cc.Host}
		if err := st.AppendEvent(ctx, e); err != nil {
			log.Warn("recording BMC event failed", "node", nodeUUID, "err", err)
		}
	}
	var fake conductor.Driver = conductor.FakeDriver{}
	var listenURL string
	var sim *simulatedHardware
	if cfg.SimulateAgents {
		sim = newSimulatedHardware(ctx, st, log.With("component", "simagent"), func() string { return listenURL }, cfg.SimulateStepTime)
		defer sim.shutdown()
		fake = sim
		log.Warn("simulating agents for fake-hardware nodes with deploy_interface=direct (development mode)")
	}
	cond := conductor.New(st, cc,
		fake, conductor.NewBMCDriver(bmc.HardwareIPMI, bmcs, note),
		conductor.NewBMCDriver(bmc.HardwareRedfish, bmcs, note))
	srv := api.New(api.Config{Store: apiStore, Conductor: cond, Logger: log, PublicURL: cfg.PublicURL, Auth: auth, BootDir: cfg.BootDir,
		PublicLimit: cfg.PublicLimit,
		Metrics:     api.NewMetrics(apiStore)})

	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", cfg.Listen, err)
	}
	listenURL = "http://" + ln.Addr().String()
	dash := ui.New(ui.Config{API: srv, Counts: apiStore, Auth: auth, Logger: log.With("component", "ui")})
	root := http.NewServeMux()
	root.Handle("/ui", dash)
	root.Handle("/ui/", dash)
	root.Handle("/", ui.Protect(srv)) // browsers must show the dashboard's CSRF token to change anything
	hs := &http.Server{Handler: root, ReadHeaderTimeout: 10 * time.Second, IdleTimeout: 120 * time.Second}
	hs.RegisterOnShutdown(dash.Close)
	log.Info("anvil-controller listening", "addr", ln.Addr().String(), "database", redactURL(cfg.Database), "auth", cfg.Auth,
		"host", cond.Host(), "lease_holder", cond.Holder())
	if cfg.Ready != nil {
		cfg.Ready(ln.Addr())
	}

	condCtx, stopCond := context.WithCancel(context.WithoutCancel(ctx))
	condDone := make(chan error, 1)
	go func() { condDone <- cond.Run(condCtx) }()
	serveErr := make(chan error, 1)
	go func() { serveErr <- hs.Serve(ln) }()

	select {
	case <-ctx.Done():
	case err := <-serveErr:
		stopCond()
		<-condDone
		return fmt.Errorf("http server: %w", err)
	}
	log.Info("shutting down: draining requests and workers")
	shutCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = hs.Shutdown(shutCtx)
	stopCond()
	<-condDone
	return err
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
