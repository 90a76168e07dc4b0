// Command anvil-vbmc is a virtual BMC for development and tests: a Redfish
// service in front of in-memory or QEMU virtual nodes, plus the
// chassis-control program that lets ipmi_sim drive the same nodes over IPMI.
//
//	anvil-vbmc [--listen 127.0.0.1:8000] [--config nodes.json] [--node name]... [--username u] [--password p]
//	anvil-vbmc chassis-control --url http://127.0.0.1:8000/control/<node> <mc> get|set <param> [value]
//
// See bmc/vbmc/README.md.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"io"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/anvil-metal/anvil/bmc/vbmc"
	"github.com/anvil-metal/anvil/internal/cli"
)

func main() {
	if len(os.Args) > 1 && os.Args[1] == "chassis-control" {
		os.Exit(cli.Exit(os.Stdout, os.Stderr, "chassis-control", chassisControl(os.Args[2:], os.Stdout)))
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := serve(ctx, os.Args[1:], os.Stderr)
	stop()
	os.Exit(cli.Exit(os.Stdout, os.Stderr, "anvil-vbmc", err))
}

const usage = `usage: anvil-vbmc [--listen ADDR] [--config FILE] [--node NAME]... [flags]
       anvil-vbmc chassis-control --url URL MC get|set PARAM [VALUE]

A virtual BMC for development and tests: a Redfish service in front of
in-memory or QEMU virtual nodes (bmc/vbmc/README.md). chassis-control is the
program ipmi_sim runs to drive the same nodes over IPMI
("anvil-vbmc chassis-control --help").
`

const chassisUsage = `usage: anvil-vbmc chassis-control --url URL [--username U] [--password P] MC get|set PARAM [VALUE]

ipmi_sim's chassis-control program: prints PARAM:VALUE of the virtual node
at URL (get) or sets PARAM (set). URL must be on loopback.
`

type nodeList []string

func (n *nodeList) String() string     { return strings.Join(*n, ",") }
func (n *nodeList) Set(v string) error { *n = append(*n, v); return nil }

// serve runs the virtual BMC until ctx is done.
func serve(ctx context.Context, args []string, stderr io.Writer) error {
	fs := flag.NewFlagSet("anvil-vbmc", flag.ContinueOnError)
	listen := fs.String("listen", "", "address to serve Redfish and the control endpoint on (default 127.0.0.1:8000)")
	config := fs.String("config", "", "JSON file describing nodes (see bmc/vbmc/README.md)")
	username := fs.String("username", "", "BMC user name (default admin)")
	password := fs.String("password", "", "BMC password (default $ANVIL_VBMC_PASSWORD, else password)")
	debug := fs.Bool("debug", false, "log every request")
	tlsCert := fs.String("tls-cert", "", "serve HTTPS with this certificate (PEM; needs --tls-key)")
	tlsKey := fs.String("tls-key", "", "private key for --tls-cert (PEM)")
	selfSigned := fs.String("tls-self-signed", "", "serve HTTPS with a fresh self-signed certificate, written to this PEM file for clients to trust")
	busyAfterOff := fs.Duration("fault-busy-after-power-off", 0, "answer 409 to Reset actions for this long after a power off")
	ignoreBoot := fs.Bool("fault-ignore-boot-override", false, "accept boot override PATCHes without applying them")
	ignoreMedia := fs.Bool("fault-ignore-media-insert", false, "answer 204 to InsertMedia and mount nothing")
	emptyMedia := fs.Bool("fault-media-inserted-without-image", false, "answer 204 to InsertMedia, mount nothing, and report the slot Inserted with no Image")
	sessionLimit := fs.Int("fault-session-limit", 0, "refuse new Redfish sessions with 503 while this many are open (0: no limit)")
	quirkUUID := fs.Bool("quirk-system-id-uuid", false, "serve every system at /redfish/v1/Systems/<uuid> instead of its name")
	quirkApplyTime := fs.Bool("quirk-bios-apply-time-required", false, "leave BIOS settings PATCHed without @Redfish.SettingsApplyTime pending for ever (iDRAC without a job)")
	var fw vbmc.FirmwareOptions
	fs.DurationVar(&fw.UpdateDuration, "firmware-update-duration", 10*time.Second, "how long a firmware update task flashes after downloading")
	fs.DurationVar(&fw.BMCRestart, "bmc-restart-time", 20*time.Second, "how long the BMC is unreachable after a BMC update (with --fault-bmc-offline-after-update)")
	fs.BoolVar(&fw.OfflineAfterBMCUpdate, "fault-bmc-offline-after-update", false, "answer 503 to every request for --bmc-restart-time after a BMC update")
	fs.BoolVar(&fw.PurgeCompletedTasks, "fault-purge-completed-tasks", false, "answer 404 for a task once it has completed")
	fs.BoolVar(&fw.StallTasks, "fault-stall-tasks", false, "leave firmware update tasks Running for ever")
	fs.BoolVar(&fw.PushOnly, "quirk-firmware-push-only", false, "offer firmware updates through MultipartHttpPushUri only, without SimpleUpdate (Supermicro X12, OpenBMC)")
	var extra nodeList
	fs.Var(&extra, "node", "add an in-memory node with this name (repeatable)")
	if _, err := cli.Parse(fs, usage, args); err != nil {
		return err
	}

	log := cli.Logger(stderr, *debug)

	var cfg vbmc.Config
	if *config != "" {
		var err error
		if cfg, err = vbmc.LoadConfig(*config); err != nil {
			return err
		}
	}
	for _, n := range extra {
		cfg.Nodes = append(cfg.Nodes, vbmc.NodeConfig{Name: n})
	}
	// Quirk flags add to every node's quirks from the file.
	for i := range cfg.Nodes {
		cfg.Nodes[i].Quirks.SystemIDIsUUID = cfg.Nodes[i].Quirks.SystemIDIsUUID || *quirkUUID
		cfg.Nodes[i].Quirks.BiosApplyTimeRequired = cfg.Nodes[i].Quirks.BiosApplyTimeRequired || *quirkApplyTime
	}
	// Flags beat the file; the environment supplies a password kept off
	// the command line; defaults last.
	cfg.Listen = firstNonEmpty(*listen, cfg.Listen, "127.0.0.1:8000")
	cfg.Username = firstNonEmpty(*username, cfg.Username, "admin")
	cfg.Password = firstNonEmpty(*password, os.Getenv("ANVIL_VBMC_PASSWORD"), cfg.Password, "password")
	if len(cfg.Nodes) == 0 {
		return errors.New("no nodes: use --node NAME or --config FILE")
	}

	nodes, err := vbmc.BuildNodes(log, cfg)
	if err != nil {
		return err
	}
	defer vbmc.CloseNodes(nodes)

	srv := vbmc.NewServer(log, cfg.Username, cfg.Password, nodes...)
	srv.SetFaults(vbmc.Faults{BusyAfterPowerOff: *busyAfterOff, IgnoreBootPatch: *ignoreBoot, IgnoreMediaInsert: *ignoreMedia,
		MediaInsertedWithoutImage: *emptyMedia, SessionLimit: *sessionLimit})
	srv.SetFirmwareOptions(fw)
	defer srv.Close()
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv.Handler(), ReadHeaderTimeout: 10 * time.Second}
	scheme := "http"
	switch {
	case *selfSigned != "":
		host, _, _ := net.SplitHostPort(cfg.Listen)
		tc, certPEM, err := vbmc.SelfSignedTLS(host, "localhost")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*selfSigned, certPEM, 0o644); err != nil {
			return err
		}
		ln = tls.NewListener(ln, tc)
		scheme = "https"
	case *tlsCert != "" || *tlsKey != "":
		cert, err := tls.LoadX509KeyPair(*tlsCert, *tlsKey)
		if err != nil {
			return err
		}
		ln = tls.NewListener(ln, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
		scheme = "https"
	}
	names := make([]string, len(nodes))
	for i, n := range nodes {
		names[i] = n.Name
	}
	log.Info("anvil-vbmc: serving", "redfish", scheme+"://"+ln.Addr().String()+"/redfish/v1", "nodes", strings.Join(names, ","), "username", cfg.Username)

	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("anvil-vbmc: shutting down")
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return hs.Shutdown(sctx)
}

func firstNonEmpty(vals ...string) string {
	for _, v := range vals {
		if v != "" {
			return v
		}
	}
	return ""
}

// chassisControl is run by ipmi_sim for every chassis_control call; it
// prints "param:value" for gets and must finish quickly.
func chassisControl(args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("chassis-control", flag.ContinueOnError)
	url := fs.String("url", "", "node control URL, e.g. http://127.0.0.1:8000/control/node-1")
	username := fs.String("username", "", "BMC user name (default $ANVIL_VBMC_USERNAME, else admin)")
	password := fs.String("password", "", "BMC password (default $ANVIL_VBMC_PASSWORD, else password)")
	pos, err := cli.Parse(fs, chassisUsage, args, "MC", "get|set", "PARAM", "[VALUE...]")
	if err != nil {
		return err
	}
	if *url == "" {
		return cli.Errorf(cli.Usage(fs, chassisUsage), "--url is required")
	}
	user := firstNonEmpty(*username, os.Getenv("ANVIL_VBMC_USERNAME"), "admin")
	pass := firstNonEmpty(*password, os.Getenv("ANVIL_VBMC_PASSWORD"), "password")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	hc := &http.Client{Transport: &http.Transport{Proxy: nil}}
	return vbmc.ChassisControl(ctx, hc, *url, user, pass, pos, stdout)
}
