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
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	"github.com/anvil-metal/anvil/controller"
	"github.com/anvil-metal/anvil/controller/boot"
	"github.com/anvil-metal/anvil/controller/boot/dhcp"
	"github.com/anvil-metal/anvil/controller/inspectrules"
	"github.com/anvil-metal/anvil/internal/cli"
	"github.com/anvil-metal/anvil/internal/textlist"
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
	o := controllerFlags(fs, hostname)
	// No positional arguments: a stray word (a subcommand misspelt) must
	// not start a controller.
	if _, err := cli.Parse(fs, usage, args); err != nil {
		return err
	}
	if err := applyDefaults(fs, o.config, getenv); err != nil {
		return err
	}
	overrides, err := parsePriorities(o.prio)
	if err != nil {
		return err
	}
	if err := checkDiscoveryDHCP(o.bc); err != nil {
		return err
	}
	o.cc.PriorityOverrides = overrides
	if o.rulesFile != "" {
		if o.cc.InspectionRules, err = inspectrules.LoadFile(o.rulesFile); err != nil {
			return fmt.Errorf("--inspection-rules-file: %w", err)
		}
	}
	o.tc.Hosts = append(o.tc.Hosts, textlist.Split(o.tlsHosts, ",")...)
	if o.printFP {
		if !o.tc.Enabled() {
			return errors.New("--print-fingerprint: the controller serves plain HTTP; give --tls-self-signed or --tls-cert/--tls-key")
		}
		_, fp, err := controller.ServerCertificate(controller.Config{Listen: o.listen, Database: o.database, PublicURL: o.publicURL, TLS: o.tc})
		if err != nil {
			return err
		}
		_, err = fmt.Fprintln(stdout, fp)
		return err
	}
	if o.memLimitMB < 0 {
		return errors.New("--memory-limit-mb: must not be negative")
	}
	if o.memLimitMB > 0 && getenv("GOMEMLIMIT") == "" {
		// A burst (an import, many concurrent lists) then costs GC time
		// rather than a heap that the runtime returns to the system only
		// slowly; the README's memory figures say what a fleet needs.
		debug.SetMemoryLimit(int64(o.memLimitMB) << 20)
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler = slog.NewTextHandler(os.Stderr, opts)
	if o.logFormat == "json" {
		h = slog.NewJSONHandler(os.Stderr, opts)
	}
	log := slog.New(h)

	ctx, stop := signal.NotifyContext(ctx, os.Interrupt, syscall.SIGTERM)
	defer stop()
	return controller.Run(ctx, controller.Config{Listen: o.listen, Database: o.database, Auth: o.auth, HTPasswd: o.htpasswd, UsersFile: o.usersFile, PolicyFile: o.policyFile,
		AllowInsecureNoAuth: o.insecure, PublicURL: o.publicURL, BootDir: o.bootDir, FirmwareDir: o.firmwareDir, VMediaDir: o.vmediaDir, BMCMinInterval: o.bmcGap, RedfishMinInterval: o.redfishGap, RedfishMaxConcurrent: o.redfishConcurrent,
		SimulateAgents: o.simulate, SimulateStepTime: o.simStep, Conductor: o.cc, PublicLimit: o.pl, Boot: o.bc, Discovery: o.dc, Logger: log,
		HTTP: &o.hl, MetricsListen: o.metricsAt, MetricsPublic: o.metricsPub, TLS: o.tc, DataDir: o.dataDir, VmediaDataMaxBytes: o.vmediaDataMax,
		ConsoleTCPListen: o.consoleTCP})
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
