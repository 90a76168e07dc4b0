// Command anvil-controller is the anvil controller daemon: an OpenStack
// Ironic-compatible API with the provision state machine and its workers.
//
// Every flag can also be set with an ANVIL_* environment variable (e.g.
// --listen and ANVIL_LISTEN) or in a --config file of "key: value" lines
// with the flag names as keys. Precedence: flag, environment, file, default.
//
// "anvil-controller export" and "anvil-controller import" move a whole
// fleet between databases (SQLite and PostgreSQL) as one JSON document;
// see transfer.go.
package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/anvil-metal/anvil/controller"
	"github.com/anvil-metal/anvil/controller/api"
	"github.com/anvil-metal/anvil/controller/boot"
	"github.com/anvil-metal/anvil/controller/boot/dhcp"
	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/internal/cli"
)

func main() {
	os.Exit(cli.Exit(os.Stdout, os.Stderr, "anvil-controller", run(context.Background(), os.Args[1:], os.Getenv)))
}

const usage = `usage: anvil-controller [flags]
       anvil-controller export [--database URL] [-o FILE] [--force]
       anvil-controller import [--database URL] FILE|-

The anvil controller daemon: an OpenStack Ironic-compatible API with the
provision state machine, its workers and optionally the network-boot
service (DHCP, TFTP).

Every flag can also be set with an ANVIL_* environment variable (--listen:
ANVIL_LISTEN) or in a --config file of "flag-name: value" lines.
Precedence: flag, environment, file, default.

export and import move a whole fleet between databases (SQLite and
PostgreSQL); "anvil-controller export --help" describes them.
`

func run(ctx context.Context, args []string, getenv func(string) string) error {
	return runTo(ctx, args, getenv, os.Stdout)
}

// runTo is run writing its own output (--print-fingerprint) to stdout.
func runTo(ctx context.Context, args []string, getenv func(string) string, stdout io.Writer) error {
	if len(args) > 0 && (args[0] == "export" || args[0] == "import") {
		return runTransfer(ctx, args[0], args[1:], getenv, os.Stdin, stdout, os.Stderr)
	}
	fs := flag.NewFlagSet("anvil-controller", flag.ContinueOnError)
	hostname, _ := os.Hostname()
	var (
		listen    = fs.String("listen", "127.0.0.1:6385", "address to listen on")
		database  = fs.String("database", "sqlite://./anvil.db", "database URL: sqlite://PATH, sqlite://:memory: (throwaway) or postgres://USER:PASSWORD@HOST/DB (several controllers sharing a fleet)")
		auth      = fs.String("auth", "noauth", "auth strategy: noauth or http_basic")
		htpasswd  = fs.String("htpasswd", "", "htpasswd file (bcrypt) for --auth http_basic")
		insecure  = fs.Bool("allow-insecure-noauth", false, "allow noauth on a non-loopback listen address")
		publicURL = fs.String("public-url", "", "URL clients and agents use to reach this controller (default: from each request)")
		bootDir   = fs.String("boot-dir", "", "directory with vmlinuz and initramfs.cpio.zst or .gz (make image: out/image) served to PXE-booting nodes; with anvil.iso, also per-node ISOs for redfish-virtual-media")
		vmediaDir = fs.String("vmedia-dir", "", "where per-node virtual media ISOs (and their URLs' secrets) are kept while their nodes boot, so boots under way survive a restart (default: vmedia/ in the data directory; without one a temporary directory)")
		simulate  = fs.Bool("simulate-agents", false, "development mode: run a simulated agent for fake-hardware nodes with deploy_interface=direct")
		simStep   = fs.Duration("simulate-step-time", 1e9, "with --simulate-agents: how long each simulated erase or image write runs, reporting progress")
		prio      = fs.String("clean-step-priority", "", "priority overrides for automated cleaning: interface.step:N[,...] (0 disables a step)")
		bmcGap    = fs.Duration("bmc-min-interval", 1e9, "minimum time between two commands to the same BMC (small BMCs fail when hammered)")
		logLevel  = fs.String("log-level", "info", "debug, info, warn or error")
		logFormat = fs.String("log-format", "text", "text or json")
		config    = fs.String("config", "", "config file of 'flag-name: value' lines")
		dataDir   = fs.String("data-dir", "", "directory of the key that signs sanitization records, created on first start, and of virtual-media boots under way (default: the SQLite database's directory; none: a throwaway key)")
	)
	// The conductor's settings, their defaults from the conductor's one place.
	cc := conductor.DefaultConfig()
	cc.Host = hostname
	fs.StringVar(&cc.Host, "host", cc.Host, "name written into node reservations")
	fs.IntVar(&cc.Workers, "workers", cc.Workers, "concurrent node operations")
	fs.BoolVar(&cc.AutomatedClean, "automated-clean", cc.AutomatedClean, "run automated cleaning on provide and undeploy")
	fs.DurationVar(&cc.CleanWaitTimeout, "clean-wait-timeout", cc.CleanWaitTimeout, "fail nodes waiting in clean wait longer than this (0 disables)")
	fs.DurationVar(&cc.DeployWaitTimeout, "deploy-wait-timeout", cc.DeployWaitTimeout, "fail nodes waiting in wait call-back longer than this (0 disables)")
	fs.DurationVar(&cc.Agent.HeartbeatInterval, "heartbeat-interval", cc.Agent.HeartbeatInterval, "how often idle agents heartbeat")
	fs.DurationVar(&cc.Agent.BootTimeout, "agent-boot-timeout", cc.Agent.BootTimeout, "fail a node whose agent ramdisk does not call back this soon after a (re)boot")
	fs.DurationVar(&cc.Agent.SilenceTimeout, "agent-silence-timeout", cc.Agent.SilenceTimeout, "fail a node whose booted agent sends no heartbeat for this long")
	fs.DurationVar(&cc.CheckInterval, "timeout-check-interval", cc.CheckInterval, "how often waiting nodes are checked against their timers")
	fs.DurationVar(&cc.Agent.StepTimeout, "step-timeout", cc.Agent.StepTimeout, "default limit of one in-band step run, for steps that declare no max_seconds (0: none)")
	fs.DurationVar(&cc.Agent.AbortTimeout, "abort-timeout", cc.Agent.AbortTimeout, "how long an aborted in-band step's agent has to report it stopped before the node is powered off")
	fs.DurationVar(&cc.PowerSync.Interval, "power-sync-interval", cc.PowerSync.Interval, "check every managed node's power state once per interval, spread over it (0 disables)")
	fs.BoolVar(&cc.PowerSync.Enforce, "power-sync-enforce", cc.PowerSync.Enforce, "restore the recorded power state of resting nodes outside maintenance when the BMC reports another")
	fs.DurationVar(&cc.LeaseTTL, "lease-ttl", cc.LeaseTTL, "node lease period: controllers sharing a PostgreSQL database take over a dead controller's nodes after this long")
	// The network-boot service (DHCP, TFTP): off unless set.
	var bc boot.Config
	fs.StringVar(&bc.DHCP, "boot-dhcp", "off", "network boot DHCP: off, proxy (boot information beside the site's DHCP server) or full (addresses from --boot-dhcp-range too); answers only enrolled ports of nodes being booted")
	fs.StringVar(&bc.Interface, "boot-interface", "", "provisioning network interface the boot service's DHCP (and by default TFTP) listens on")
	fs.StringVar(&bc.Range, "boot-dhcp-range", "", "addresses full-mode DHCP hands out: FIRST-LAST, inside --boot-interface's network")
	fs.StringVar(&bc.TFTPListen, "boot-tftp-listen", "", "TFTP address ADDR:PORT serving --boot-dir (default: port 69 on --boot-interface's address when --boot-dhcp is on)")
	dc := api.DefaultDiscovery()
	fs.BoolVar(&dc.Enabled, "boot-discovery", false, "discovery: boot the agent ramdisk on MACs no port has and enrol each machine that reports back as a new node in enroll (powered off, never cleaned or deployed by itself)")
	fs.StringVar(&dc.Driver, "boot-discovery-driver", dc.Driver, "driver of discovered nodes (ipmi, redfish or fake-hardware); add the BMC's driver_info before managing them")
	fs.IntVar(&dc.MaxPending, "boot-discovery-max-pending", dc.MaxPending, "refuse discovery reports while this many discovered nodes wait in enroll (0: no cap)")
	fs.Float64Var(&dc.Rate, "boot-discovery-rate", dc.Rate, "discovery reports per second accepted over all sources (bursts of 10; 0: unlimited)")
	fs.Float64Var(&bc.DiscoveryDHCPShare, "boot-discovery-dhcp-share", dhcp.DefaultDiscoveryShare, "percentage of --boot-dhcp-range (its top addresses, at least one) full-mode DHCP gives to MACs no port has; enrolled nodes may use all of it")
	fs.DurationVar(&bc.DiscoveryDHCPLease, "boot-discovery-dhcp-lease", dhcp.DefaultDiscoveryLease, "full-mode DHCP lease of MACs no port has, until the machine reports and is a node (below the 1h lease of nodes being booted)")
	pl := api.DefaultPublicLimit()
	fs.Float64Var(&pl.Rate, "agent-rate-limit", pl.Rate, "requests per second one source address may make to lookup, heartbeat and boot files (0: unlimited; loopback is exempt)")
	fs.IntVar(&pl.Burst, "agent-rate-burst", pl.Burst, "requests one source address may make at once to lookup, heartbeat and boot files")
	// HTTP limits, their defaults from the API's one place.
	hl := api.DefaultHTTPLimits()
	fs.DurationVar(&hl.ReadHeaderTimeout, "http-read-header-timeout", hl.ReadHeaderTimeout, "cut off a client whose request headers take longer than this (0: no limit)")
	fs.DurationVar(&hl.ReadTimeout, "http-read-timeout", hl.ReadTimeout, "cut off a client whose whole request, body included, takes longer than this (0: no limit)")
	fs.DurationVar(&hl.WriteTimeout, "http-write-timeout", hl.WriteTimeout, "limit from the end of a request's headers to the end of its response; boot files get 10m (0: no limit)")
	fs.DurationVar(&hl.IdleTimeout, "http-idle-timeout", hl.IdleTimeout, "close keep-alive connections idle this long (0: the read timeout)")
	fs.IntVar(&hl.MaxUnauthConnsPerSource, "max-unauth-conns-per-source", hl.MaxUnauthConnsPerSource, "connections one source IP may hold open before authenticating; more are answered 503 (0: no cap)")
	// HTTPS: plain HTTP unless set (labs), with a warning at start.
	var tc controller.TLSConfig
	fs.StringVar(&tc.CertFile, "tls-cert", "", "serve HTTPS with this PEM certificate (chain); needs --tls-key")
	fs.StringVar(&tc.KeyFile, "tls-key", "", "the PEM private key of --tls-cert")
	fs.BoolVar(&tc.SelfSigned, "tls-self-signed", false, "serve HTTPS with a self-signed ECDSA certificate created in --tls-dir on the first start and reused after")
	fs.StringVar(&tc.Dir, "tls-dir", "", "directory of the self-signed certificate (default: the SQLite database's directory, else the working directory)")
	tlsHosts := fs.String("tls-hosts", "", "extra host names and IPs for the self-signed certificate, comma-separated (the host name, localhost, loopback and the hosts of --public-url and --listen are always in)")
	printFP := fs.Bool("print-fingerprint", false, "print the SHA-256 fingerprint of the controller's TLS certificate (creating the self-signed one if needed) and exit")
	metricsAt := fs.String("metrics-listen", "", "serve /metrics without auth on this address of its own instead of on the API behind its auth")
	metricsPub := fs.Bool("metrics-public", false, "serve /metrics on the API without auth")
	// No positional arguments: a stray word (a subcommand misspelt) must
	// not start a controller.
	if _, err := cli.Parse(fs, usage, args); err != nil {
		return err
	}
	if err := applyDefaults(fs, *config, getenv); err != nil {
		return err
	}
	overrides, err := parsePriorities(*prio)
	if err != nil {
		return err
	}
	if err := checkDiscoveryDHCP(bc); err != nil {
		return err
	}
	cc.PriorityOverrides = overrides
	for _, h := range strings.Split(*tlsHosts, ",") {
		if h = strings.TrimSpace(h); h != "" {
			tc.Hosts = append(tc.Hosts, h)
		}
	}
	if *printFP {
		if !tc.Enabled() {
			return errors.New("--print-fingerprint: the controller serves plain HTTP; give --tls-self-signed or --tls-cert/--tls-key")
		}
		_, fp, err := controller.ServerCertificate(controller.Config{Listen: *listen, Database: *database, PublicURL: *publicURL, TLS: tc})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, fp)
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(os.Stderr, opts)
	if *logFormat == "json" {
		h = slog.NewJSONHandler(os.Stderr, opts)
	}
	log := slog.New(h)

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return controller.Run(ctx, controller.Config{Listen: *listen, Database: *database, Auth: *auth, HTPasswd: *htpasswd,
		AllowInsecureNoAuth: *insecure, PublicURL: *publicURL, BootDir: *bootDir, VMediaDir: *vmediaDir, BMCMinInterval: *bmcGap,
		SimulateAgents: *simulate, SimulateStepTime: *simStep, Conductor: cc, PublicLimit: pl, Boot: bc, Discovery: dc, Logger: log,
		HTTP: &hl, MetricsListen: *metricsAt, MetricsPublic: *metricsPub, TLS: tc, DataDir: *dataDir})
}

// applyDefaults sets flags not given on the command line from ANVIL_*
// variables, then from the config file.
func applyDefaults(fs *flag.FlagSet, configPath string, getenv func(string) string) error {
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if !set["config"] {
		if v := getenv("ANVIL_CONFIG"); v != "" {
			configPath = v
		}
	}
	file := map[string]string{}
	if configPath != "" {
		var err error
		if file, err = readConfig(configPath); err != nil {
			return err
		}
		for k := range file {
			if fs.Lookup(k) == nil || k == "config" {
				return fmt.Errorf("config %s: unknown setting %q", configPath, k)
			}
		}
	}
	var err error
	fs.VisitAll(func(f *flag.Flag) {
		if set[f.Name] || err != nil {
			return
		}
		env := "ANVIL_" + strings.ToUpper(strings.ReplaceAll(f.Name, "-", "_"))
		if v := getenv(env); v != "" {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("%s=%q: %w", env, v, e)
			}
			return
		}
		if v, ok := file[f.Name]; ok {
			if e := f.Value.Set(v); e != nil {
				err = fmt.Errorf("config %s: %s: %w", configPath, f.Name, e)
			}
		}
	})
	return err
}

func readConfig(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open config: %w", err)
	}
	defer f.Close()
	out := map[string]string{}
	sc := bufio.NewScanner(f)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		k, v, ok := strings.Cut(line, ":")
		if !ok || strings.ContainsAny(strings.TrimSpace(k), " \t") {
			return nil, fmt.Errorf("config %s line %d: expected 'key: value'", path, n)
		}
		out[strings.TrimSpace(k)] = strings.Trim(strings.TrimSpace(v), `"'`)
	}
	return out, sc.Err()
}

// parsePriorities reads "deploy.erase_devices:0,deploy.erase_devices_metadata:123".
func parsePriorities(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		key, val, ok := strings.Cut(item, ":")
		iface, step, dot := strings.Cut(key, ".")
		n, err := strconv.Atoi(val)
		if !ok || !dot || iface == "" || step == "" || err != nil || n < 0 {
			return nil, fmt.Errorf("--clean-step-priority: %q is not interface.step:N with N >= 0", item)
		}
		out[key] = n
	}
	return out, nil
}

// checkDiscoveryDHCP refuses discovery DHCP bounds that bound nothing: an
// empty share or one beyond the range, a lease no shorter than a node's.
func checkDiscoveryDHCP(bc boot.Config) error {
	if s := bc.DiscoveryDHCPShare; !(s > 0 && s <= 100) {
		return fmt.Errorf("--boot-discovery-dhcp-share %v: give a percentage of --boot-dhcp-range above 0 and at most 100", s)
	}
	if l := bc.DiscoveryDHCPLease; l <= 0 || l >= dhcp.DefaultLeaseTime {
		return fmt.Errorf("--boot-discovery-dhcp-lease %v: give a duration above 0 and below the %v lease of nodes being booted", l, dhcp.DefaultLeaseTime)
	}
	return nil
}
