package main

import (
	"flag"
	"time"

	"github.com/anvil-metal/anvil/controller"
	"github.com/anvil-metal/anvil/controller/api"
	"github.com/anvil-metal/anvil/controller/boot"
	"github.com/anvil-metal/anvil/controller/boot/dhcp"
	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/vmedia"
)

// options are anvil-controller's settings. controllerFlags is their one
// registration, so that runTo and the generated docs/reference/flags.md
// (flags_doc_test.go) cannot disagree.
type options struct {
	listen, database, auth, htpasswd, publicURL      string
	insecure                                         bool
	bootDir, vmediaDir, dataDir, config, firmwareDir string
	simulate                                         bool
	simStep, bmcGap, redfishGap                      time.Duration
	prio, logLevel, logFormat                        string
	memLimitMB                                       int
	rulesFile                                        string
	usersFile, policyFile                            string
	tlsHosts, metricsAt                              string
	consoleTCP                                       string
	printFP, metricsPub                              bool
	vmediaDataMax                                    int64
	redfishConcurrent                                int

	cc conductor.Config     // the conductor's settings
	bc boot.Config          // the network-boot service (DHCP, TFTP)
	dc api.DiscoveryConfig  // discovery of unknown machines
	pl api.PublicLimit      // rate limit of the agent endpoints
	hl api.HTTPLimits       // the HTTP server's limits
	tc controller.TLSConfig // HTTPS
}

// controllerFlags registers every flag of anvil-controller on fs, with
// hostname as the default of --host (a parameter so that the generated
// docs do not show the build machine's name).
func controllerFlags(fs *flag.FlagSet, hostname string) *options {
	o := &options{cc: conductor.DefaultConfig(), dc: api.DefaultDiscovery(), pl: api.DefaultPublicLimit(), hl: api.DefaultHTTPLimits()}
	o.cc.Host = hostname
	fs.StringVar(&o.listen, "listen", "127.0.0.1:6385", "address to listen on")
	fs.StringVar(&o.database, "database", "sqlite://./anvil.db", "database URL: sqlite://PATH, sqlite://:memory: (throwaway) or postgres://USER:PASSWORD@HOST/DB (several controllers sharing a fleet)")
	fs.StringVar(&o.auth, "auth", "noauth", "auth strategy: noauth or http_basic")
	fs.StringVar(&o.htpasswd, "htpasswd", "", "htpasswd file (bcrypt) for --auth http_basic; reloaded on SIGHUP")
	fs.StringVar(&o.usersFile, "users-file", "", "with --auth http_basic: file of 'name role scope' lines giving each account a role (admin, manager, member, reader, service) and system or project:NAME scope; accounts it does not list are refused; reloaded on SIGHUP (none: every account is a system admin)")
	fs.StringVar(&o.policyFile, "policy-file", "", "YAML or JSON of Ironic policy rules (rule name: check string) in place of Ironic's defaults, e.g. baremetal:step:execute:firmware.update; reloaded on SIGHUP")
	fs.BoolVar(&o.insecure, "allow-insecure-noauth", false, "allow noauth on a non-loopback listen address")
	fs.StringVar(&o.publicURL, "public-url", "", "URL clients and agents use to reach this controller (default: from each request)")
	fs.StringVar(&o.bootDir, "boot-dir", "", "directory with vmlinuz and initramfs.cpio.zst or .gz (make image: out/image) served to PXE-booting nodes; with anvil.iso, also per-node ISOs for redfish-virtual-media")
	fs.StringVar(&o.firmwareDir, "firmware-dir", "", "directory of firmware images served to BMCs at /v1/boot/firmware/FILE for firmware.update (BMCs pull images from a URL)")
	fs.StringVar(&o.vmediaDir, "vmedia-dir", "", "where per-node virtual media ISOs (and their URLs' secrets) are kept while their nodes boot, so boots under way survive a restart (default: vmedia/ in the data directory; without one a temporary directory)")
	fs.BoolVar(&o.simulate, "simulate-agents", false, "development mode: run a simulated agent for fake-hardware nodes with deploy_interface=direct")
	fs.DurationVar(&o.simStep, "simulate-step-time", 1e9, "with --simulate-agents: how long each simulated erase or image write runs, reporting progress")
	fs.StringVar(&o.rulesFile, "inspection-rules-file", "", "YAML (or JSON) list of built-in inspection rules, run after the stored ones at the end of every inspection (Ironic's [inspection_rules]built_in_rules; negative priorities allowed)")
	fs.StringVar(&o.prio, "clean-step-priority", "", "priority overrides for automated cleaning: interface.step:N[,...] (0 disables a step)")
	fs.DurationVar(&o.bmcGap, "bmc-min-interval", 1e9, "minimum time between two commands to the same IPMI BMC (small BMCs fail when hammered)")
	fs.DurationVar(&o.redfishGap, "redfish-min-interval", 0, "minimum time between two requests to the same Redfish BMC (0: none, as Ironic; busy answers are retried)")
	fs.IntVar(&o.redfishConcurrent, "redfish-max-concurrent", 2, "most operations (and so Redfish sessions) at once against one Redfish BMC, whichever nodes they are for")
	fs.StringVar(&o.logLevel, "log-level", "info", "debug, info, warn or error")
	fs.IntVar(&o.memLimitMB, "memory-limit-mb", 256, "soft memory limit of the Go heap, MiB: above it the garbage collector works harder instead of growing the heap (it never refuses memory); GOMEMLIMIT, if set, wins (0: none)")
	fs.StringVar(&o.logFormat, "log-format", "text", "text or json")
	fs.StringVar(&o.config, "config", "", "config file of 'flag-name: value' lines")
	fs.StringVar(&o.dataDir, "data-dir", "", "directory of the key that signs sanitization records, created on first start, and of virtual-media boots under way (default: the SQLite database's directory; none: a throwaway key)")
	fs.Int64Var(&o.vmediaDataMax, "vmedia-data-max-bytes", vmedia.DefaultDataMaxTotal, "total size of the images the virtual media API downloads for image_download_source=local, all nodes together, kept in vmedia-data/ of the data directory; an attach past it is refused")
	// The conductor's settings, their defaults from the conductor's one place.
	fs.StringVar(&o.cc.Host, "host", o.cc.Host, "name written into node reservations")
	fs.IntVar(&o.cc.Workers, "workers", o.cc.Workers, "concurrent node operations")
	fs.BoolVar(&o.cc.AutomatedClean, "automated-clean", o.cc.AutomatedClean, "run automated cleaning on provide and undeploy")
	fs.DurationVar(&o.cc.CleanWaitTimeout, "clean-wait-timeout", o.cc.CleanWaitTimeout, "fail nodes waiting in clean wait longer than this (0 disables)")
	fs.DurationVar(&o.cc.DeployWaitTimeout, "deploy-wait-timeout", o.cc.DeployWaitTimeout, "fail nodes waiting in wait call-back longer than this (0 disables)")
	fs.DurationVar(&o.cc.ServiceWaitTimeout, "service-wait-timeout", o.cc.ServiceWaitTimeout, "fail nodes waiting in service wait longer than this (0 disables; Ironic's service_callback_timeout)")
	fs.DurationVar(&o.cc.Agent.HeartbeatInterval, "heartbeat-interval", o.cc.Agent.HeartbeatInterval, "how often idle agents heartbeat")
	fs.DurationVar(&o.cc.Agent.BootTimeout, "agent-boot-timeout", o.cc.Agent.BootTimeout, "fail a node whose agent ramdisk does not call back this soon after a (re)boot")
	fs.DurationVar(&o.cc.Agent.SilenceTimeout, "agent-silence-timeout", o.cc.Agent.SilenceTimeout, "fail a node whose booted agent sends no heartbeat for this long")
	fs.DurationVar(&o.cc.CheckInterval, "timeout-check-interval", o.cc.CheckInterval, "how often waiting nodes are checked against their timers")
	fs.DurationVar(&o.cc.Agent.StepTimeout, "step-timeout", o.cc.Agent.StepTimeout, "default limit of one in-band step run, for steps that declare no max_seconds (0: none)")
	fs.DurationVar(&o.cc.Agent.AbortTimeout, "abort-timeout", o.cc.Agent.AbortTimeout, "how long an aborted in-band step's agent has to report it stopped before the node is powered off")
	fs.BoolVar(&o.cc.FastTrack.Enabled, "fast-track", o.cc.FastTrack.Enabled, "keep the agent ramdisk running after cleaning and inspection, and start the next deploy, cleaning or inspection on it without a reboot (Ironic's [deploy]fast_track; a node's driver_info.fast_track overrides it)")
	fs.DurationVar(&o.cc.FastTrack.Timeout, "fast-track-timeout", o.cc.FastTrack.Timeout, "fast track uses a running agent only if its last heartbeat is this recent (Ironic's fast_track_timeout)")
	fs.DurationVar(&o.cc.FastTrack.MaxIdle, "fast-track-max-idle", o.cc.FastTrack.MaxIdle, "power off a node left running in the ramdisk (fast track) after this long without an operation (0: unbounded)")
	fs.DurationVar(&o.cc.PowerSync.Interval, "power-sync-interval", o.cc.PowerSync.Interval, "check every managed node's power state once per interval, spread over it (0 disables)")
	fs.BoolVar(&o.cc.PowerSync.Enforce, "power-sync-enforce", o.cc.PowerSync.Enforce, "restore the recorded power state of resting nodes outside maintenance when the BMC reports another")
	fs.DurationVar(&o.cc.LeaseTTL, "lease-ttl", o.cc.LeaseTTL, "node lease period: controllers sharing a PostgreSQL database take over a dead controller's nodes after this long")
	// The network-boot service (DHCP, TFTP): off unless set.
	fs.StringVar(&o.bc.DHCP, "boot-dhcp", "off", "network boot DHCP: off, proxy (boot information beside the site's DHCP server) or full (addresses from --boot-dhcp-range too); answers only enrolled ports of nodes being booted")
	fs.StringVar(&o.bc.Interface, "boot-interface", "", "provisioning network interface the boot service's DHCP (and by default TFTP) listens on")
	fs.StringVar(&o.bc.Range, "boot-dhcp-range", "", "addresses full-mode DHCP hands out: FIRST-LAST, inside --boot-interface's network")
	fs.StringVar(&o.bc.TFTPListen, "boot-tftp-listen", "", "TFTP address ADDR:PORT serving --boot-dir (default: port 69 on --boot-interface's address when --boot-dhcp is on)")
	fs.BoolVar(&o.dc.Enabled, "boot-discovery", false, "discovery: boot the agent ramdisk on MACs no port has and enrol each machine that reports back as a new node in enroll (powered off, never cleaned or deployed by itself)")
	fs.StringVar(&o.dc.Driver, "boot-discovery-driver", o.dc.Driver, "driver of discovered nodes (ipmi, redfish or fake-hardware); add the BMC's driver_info before managing them")
	fs.IntVar(&o.dc.MaxPending, "boot-discovery-max-pending", o.dc.MaxPending, "refuse discovery reports while this many discovered nodes wait in enroll (0: no cap)")
	fs.Float64Var(&o.dc.Rate, "boot-discovery-rate", o.dc.Rate, "discovery reports per second accepted over all sources (bursts of 10; 0: unlimited)")
	fs.Float64Var(&o.bc.DiscoveryDHCPShare, "boot-discovery-dhcp-share", dhcp.DefaultDiscoveryShare, "percentage of --boot-dhcp-range (its top addresses, at least one) full-mode DHCP gives to MACs no port has; enrolled nodes may use all of it")
	fs.DurationVar(&o.bc.DiscoveryDHCPLease, "boot-discovery-dhcp-lease", dhcp.DefaultDiscoveryLease, "full-mode DHCP lease of MACs no port has, until the machine reports and is a node (below the 1h lease of nodes being booted)")
	fs.Float64Var(&o.pl.Rate, "agent-rate-limit", o.pl.Rate, "requests per second one source address may make to lookup, heartbeat and boot files (0: unlimited; loopback is exempt)")
	fs.IntVar(&o.pl.Burst, "agent-rate-burst", o.pl.Burst, "requests one source address may make at once to lookup, heartbeat and boot files")
	// HTTP limits, their defaults from the API's one place.
	fs.DurationVar(&o.hl.ReadHeaderTimeout, "http-read-header-timeout", o.hl.ReadHeaderTimeout, "cut off a client whose request headers take longer than this (0: no limit)")
	fs.DurationVar(&o.hl.ReadTimeout, "http-read-timeout", o.hl.ReadTimeout, "cut off a client whose whole request, body included, takes longer than this (0: no limit)")
	fs.DurationVar(&o.hl.WriteTimeout, "http-write-timeout", o.hl.WriteTimeout, "limit from the end of a request's headers to the end of its response; boot files get 10m (0: no limit)")
	fs.DurationVar(&o.hl.IdleTimeout, "http-idle-timeout", o.hl.IdleTimeout, "close keep-alive connections idle this long (0: the read timeout)")
	fs.IntVar(&o.hl.MaxUnauthConnsPerSource, "max-unauth-conns-per-source", o.hl.MaxUnauthConnsPerSource, "connections one source IP may hold open before authenticating; more are answered 503 (0: no cap)")
	// HTTPS: plain HTTP unless set (labs), with a warning at start.
	fs.StringVar(&o.tc.CertFile, "tls-cert", "", "serve HTTPS with this PEM certificate (chain); needs --tls-key")
	fs.StringVar(&o.tc.KeyFile, "tls-key", "", "the PEM private key of --tls-cert")
	fs.BoolVar(&o.tc.SelfSigned, "tls-self-signed", false, "serve HTTPS with a self-signed ECDSA certificate created in --tls-dir on the first start and reused after")
	fs.StringVar(&o.tc.Dir, "tls-dir", "", "directory of the self-signed certificate (default: the SQLite database's directory, else the working directory)")
	fs.StringVar(&o.tlsHosts, "tls-hosts", "", "extra host names and IPs for the self-signed certificate, comma-separated (the host name, localhost, loopback and the hosts of --public-url and --listen are always in)")
	fs.BoolVar(&o.printFP, "print-fingerprint", false, "print the SHA-256 fingerprint of the controller's TLS certificate (creating the self-signed one if needed) and exit")
	fs.StringVar(&o.consoleTCP, "console-tcp-listen", "", "also serve the nodes' serial consoles on this plain TCP address (each behind its node's console token from GET /v1/nodes/{node}/states/console; plaintext: bind it to loopback or a management network)")
	fs.StringVar(&o.metricsAt, "metrics-listen", "", "serve /metrics without auth on this address of its own instead of on the API behind its auth")
	fs.BoolVar(&o.metricsPub, "metrics-public", false, "serve /metrics on the API without auth")
	return o
}
