// Command anvil is the operator CLI for anvil-controller's REST API.
//
//	anvil node list [--state S]          nodes with state, current step, last error
//	anvil node show NODE                 one node in detail, its last hardware verification and burn-in
//	anvil node steps NODE                the cached clean steps, their age and fingerprint
//	anvil node events NODE               the node's history
//	anvil node step-results NODE         each step run's outcome and per-device result, newest first
//	anvil node timeline NODE             the node's latest boot, stage by stage: where did it stop?
//	anvil node bios NODE                 the cached BIOS settings, pending values too
//	anvil node firmware NODE             the firmware versions per component
//	anvil node vmedia attach|detach|show NODE     virtual media through the BMC (API 1.89, 1.93)
//	anvil node subscription create|delete|list NODE   the BMC's event subscriptions
//	anvil node manage|provide|inspect|deploy|undeploy|abort NODE [--wait]
//	anvil node clean NODE --steps FILE|- [--wait]
//	anvil rule list|show|create|delete|import|export   the inspection rules (API 1.96)
//	anvil erase-records NODE [--format json|text]   the node's signed sanitization records
//	anvil erase-records verify FILE [--key KEY]     check exported records offline
//	anvil erase-records public-key                  the key records are signed with
//
// The controller URL comes from --url or ANVIL_URL (default
// http://127.0.0.1:6385); http_basic credentials from ANVIL_USERNAME and
// ANVIL_PASSWORD. An https controller is trusted by the system roots,
// --ca-file (ANVIL_CA_FILE) or --fingerprint (ANVIL_FINGERPRINT, the
// sha256:<hex> the controller prints).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/anvil-metal/anvil/controller/client"
	"github.com/anvil-metal/anvil/internal/cli"
	"github.com/anvil-metal/anvil/protocol"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdin, os.Stdout, os.Getenv)
	stop()
	os.Exit(cli.Exit(os.Stdout, os.Stderr, "anvil", err))
}

const usage = `usage: anvil [--url URL] [--ca-file FILE|--fingerprint sha256:HEX] COMMAND ...

commands:
  node ...            list nodes, show one, act on one (anvil node --help)
  rule ...            the inspection rules: list, show, create, delete, import, export (anvil rule --help)
  erase-records ...   the signed sanitization records (anvil erase-records --help)
  whoami [--json]     who the controller takes these credentials for: role and scope

The controller URL comes from --url or ANVIL_URL; http_basic credentials
from ANVIL_USERNAME and ANVIL_PASSWORD. An https controller is trusted by
the system roots, --ca-file (ANVIL_CA_FILE) or --fingerprint
(ANVIL_FINGERPRINT, the sha256:<hex> the controller prints).
`

const nodeUsage = `usage: anvil node COMMAND ...

commands:
  list [--state S]                nodes with state, current step, last error
  show NODE                       one node in detail, its last hardware verification and burn-in
  steps NODE                      the cached clean steps, their age and fingerprint
  events NODE                     the node's history
  step-results NODE [--limit N] [--json]
                                  each step run's outcome and per-device result, newest first
  timeline NODE [--all] [--json]  the node's latest boot stage by stage (DHCP, TFTP, HTTP,
                                  lookup, heartbeat, steps): where did it stop?
  sel NODE [--json]               the BMC's System Event Log, read live
  nmi NODE                        have the BMC send the node an NMI (a hung kernel panics and dumps)
  console NODE [--read-only]      the node's serial console, live (Ctrl-] quits)
  console-log NODE                what the serial console printed (the controller's scrollback)
  bios NODE [--json]              the BIOS settings cached from the BMC, pending values too
  firmware NODE [--json]          the firmware versions per component (API 1.86)
  vmedia attach|detach|show NODE ...
                                  attach a data image through the BMC, eject it, read the slots
  subscription create|delete|list NODE ...
                                  the BMC's event subscriptions (redfish)
  manage|provide|inspect|deploy|undeploy|abort NODE [--wait] [--timeout D]
                                  move the node on; --wait shows progress until it rests
  clean NODE --steps FILE|- [--wait] [--timeout D]
                                  manual cleaning with the steps in FILE (JSON)
  service NODE --steps FILE|-|JSON [--disable-ramdisk] [--wait] [--timeout D]
                                  run service steps on the active node (API 1.87)
  unhold NODE [--wait]            continue a flow held by a hold step (API 1.85)

NODE is a node's name or UUID. "anvil node COMMAND --help" describes one.
`

// verbs maps CLI verbs to provision targets and the state --wait expects.
var verbs = map[string]struct{ target, want string }{
	"manage": {"manage", "manageable"}, "provide": {"provide", "available"}, "inspect": {"inspect", "manageable"},
	"clean": {"clean", "manageable"}, "deploy": {"active", "active"}, "undeploy": {"deleted", "available"},
	"abort": {"abort", ""}, "service": {"service", "active"}, "unhold": {"unhold", ""},
}

// connect makes the API client; commands call it only once their own
// arguments parsed, so help and usage errors never need a good --ca-file.
type connect func() (*client.Client, error)

func run(ctx context.Context, args []string, stdin io.Reader, out io.Writer, getenv func(string) string) error {
	fs := flag.NewFlagSet("anvil", flag.ContinueOnError)
	def := getenv("ANVIL_URL")
	if def == "" {
		def = "http://127.0.0.1:6385"
	}
	url := fs.String("url", def, "controller URL")
	var trust client.TrustConfig
	fs.StringVar(&trust.CAFile, "ca-file", getenv("ANVIL_CA_FILE"), "PEM CA bundle to verify an https controller with (e.g. its anvil-tls.crt)")
	fs.StringVar(&trust.Fingerprint, "fingerprint", getenv("ANVIL_FINGERPRINT"), "trust only the controller certificate with this SHA-256 fingerprint (sha256:<hex>, from anvil-controller --print-fingerprint)")
	rest, err := cli.Flags(fs, usage, args)
	if err != nil {
		return err
	}
	dial := func() (*client.Client, error) {
		hc, err := trust.HTTPClient()
		if err != nil {
			return nil, err
		}
		c := client.New(*url, hc)
		if u := getenv("ANVIL_USERNAME"); u != "" {
			c.WithBasicAuth(u, getenv("ANVIL_PASSWORD"))
		}
		return c, nil
	}
	top := cli.Usage(fs, usage)
	switch {
	case len(rest) == 0:
		return cli.Errorf(top, "missing command")
	case cli.IsHelp(rest[0]):
		return cli.Help(top)
	case rest[0] == "node":
		return node(ctx, dial, rest[1:], stdin, out)
	case rest[0] == "rule":
		return ruleCmd(ctx, dial, rest[1:], stdin, out)
	case rest[0] == "erase-records":
		return eraseRecords(ctx, dial, rest[1:], out)
	case rest[0] == "whoami":
		return whoami(ctx, dial, rest[1:], out)
	}
	return cli.Errorf(top, "unknown command %q", rest[0])
}

// node is "anvil node COMMAND ...".
func node(ctx context.Context, dial connect, args []string, stdin io.Reader, out io.Writer) error {
	if len(args) == 0 {
		return cli.Errorf(nodeUsage, "missing command")
	}
	cmd, rest := args[0], args[1:]
	switch cmd {
	case "list":
		return list(ctx, dial, rest, out)
	case "step-results":
		return stepResults(ctx, dial, rest, out)
	case "bios":
		return biosCmd(ctx, dial, rest, out)
	case "timeline":
		return timelineCmd(ctx, dial, rest, out)
	case "sel":
		return selCmd(ctx, dial, rest, out)
	case "nmi":
		return nmiCmd(ctx, dial, rest, out)
	case "console":
		return consoleCmd(ctx, dial, rest, stdin, out)
	case "console-log":
		return consoleLogCmd(ctx, dial, rest, out)
	case "firmware":
		return firmwareCmd(ctx, dial, rest, out)
	case "vmedia":
		return vmediaCmd(ctx, dial, rest, out)
	case "subscription":
		return subscriptionCmd(ctx, dial, rest, out)
	case "show", "steps", "events":
		fs := flag.NewFlagSet(cmd, flag.ContinueOnError)
		pos, err := cli.Parse(fs, nodeReadUsage(cmd), rest, "NODE")
		if err != nil {
			return err
		}
		c, err := dial()
		if err != nil {
			return err
		}
		switch cmd {
		case "show":
			return show(ctx, c, pos[0], out)
		case "steps":
			return steps(ctx, c, pos[0], out)
		}
		return events(ctx, c, pos[0], out)
	}
	if cli.IsHelp(cmd) {
		return cli.Help(nodeUsage)
	}
	v, ok := verbs[cmd]
	if !ok {
		return cli.Errorf(nodeUsage, "unknown command %q", cmd)
	}
	return verb(ctx, dial, cmd, v.target, v.want, rest, stdin, out)
}

// nodeReadUsage is the usage of the node commands that only read one node.
func nodeReadUsage(cmd string) string {
	what := map[string]string{
		"show":   "The node in detail (JSON), then warnings: second agent claimants, missing disks,\nthe inspection's warnings, and for a retired node its sanitization records; and\nwhether its agent is kept running between operations (fast track).",
		"steps":  "The clean steps the node's agent last reported (cached by the controller),\ntheir age and fingerprint.",
		"events": "The node's history: state changes, step outcomes, refusals and alarms.",
	}[cmd]
	return "usage: anvil node " + cmd + " NODE\n\n" + what + "\n"
}

func list(ctx context.Context, dial connect, args []string, out io.Writer) error {
	fs := flag.NewFlagSet("list", flag.ContinueOnError)
	st := fs.String("state", "", "only nodes in this provision state")
	if _, err := cli.Parse(fs, "usage: anvil node list [--state S]\n\nEvery node with its state, current step and last error.\n", args); err != nil {
		return err
	}
	c, err := dial()
	if err != nil {
		return err
	}
	q := ""
	if *st != "" {
		q = "provision_state=" + strings.ReplaceAll(*st, " ", "%20")
	}
	nodes, err := c.ListNodes(ctx, q, true)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tUUID\tSTATE\tPOWER\tSTEP\tLAST ERROR")
	for _, n := range nodes {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", deref(n.Name, "-"), n.UUID, stateText(&n), deref(n.PowerState, "-"),
			stepText(&n), trim(deref(n.LastError, ""), 60))
	}
	return tw.Flush()
}

func stateText(n *client.Node) string {
	s := n.ProvisionState
	if n.TargetProvisionState != nil && !strings.HasSuffix(s, "failed") {
		s += " -> " + *n.TargetProvisionState
	}
	if n.Maintenance {
		s += " (maintenance)"
	}
	return s
}

// stepText shows the current step with index/total and progress.
func stepText(n *client.Node) string {
	step := client.CurrentStep(n)
	if step == "" {
		return "-"
	}
	key, idxKey := "clean_steps", "clean_step_index"
	switch {
	case len(n.ServiceStep) > 0:
		key, idxKey = "service_steps", "service_step_index"
	case len(n.CleanStep) == 0:
		key, idxKey = "deploy_steps", "deploy_step_index"
	}
	if list, ok := n.DriverInternalInfo[key].([]any); ok {
		if i, ok := n.DriverInternalInfo[idxKey].(float64); ok {
			step += fmt.Sprintf(" (%d/%d)", int(i)+1, len(list))
		}
	}
	if st, ok := n.DriverInternalInfo["agent_command_status"].(map[string]any); ok && st["state"] == "RUNNING" {
		if p, ok := st["progress"].(map[string]any); ok {
			step += fmt.Sprintf(" %.0f%%", p["percent"])
			if m, _ := p["message"].(string); m != "" {
				step += " " + m
			}
		}
	}
	return step
}

func show(ctx context.Context, c *client.Client, node string, out io.Writer) error {
	var raw map[string]any
	if err := c.Do(ctx, "GET", "/v1/nodes/"+node, nil, &raw); err != nil {
		return err
	}
	b, _ := json.MarshalIndent(raw, "", "  ")
	if _, err := fmt.Fprintln(out, string(b)); err != nil {
		return err
	}
	if err := claimWarnings(raw, out); err != nil {
		return err
	}
	if line := fastTrackLine(raw); line != "" {
		if _, err := fmt.Fprintln(out, line); err != nil {
			return err
		}
	}
	if err := powerHealthLines(ctx, c, node, out); err != nil {
		return err
	}
	var inv struct {
		Inventory struct {
			Disks []protocol.Disk `json:"disks"`
		} `json:"inventory"`
		PluginData struct {
			Warnings []string `json:"warnings"`
		} `json:"plugin_data"`
	}
	// no inventory (never inspected, older API) is no error here
	_ = c.Do(ctx, "GET", "/v1/nodes/"+node+"/inventory", nil, &inv)
	for _, w := range append(diskCheckWarnings(raw), inv.PluginData.Warnings...) {
		if _, err := fmt.Fprintln(out, "WARNING:", w); err != nil {
			return err
		}
	}
	if raw["retired"] == true {
		var recs struct {
			Records []json.RawMessage `json:"erase_records"`
		}
		// a controller that signs no records lists none
		_ = c.Do(ctx, "GET", "/v1/nodes/"+node+"/erase-records", nil, &recs)
		for _, line := range retirementLines(raw, recs.Records, inv.Inventory.Disks) {
			if _, err := fmt.Fprintln(out, line); err != nil {
				return err
			}
		}
	}
	return showEvidence(ctx, c, node, out)
}

// healthVersion is the microversion of node health (1.109), which also
// shows disable_power_off (1.95).
const healthVersion = "1.109"

// powerHealthLines adds the node's health and disable_power_off, newer
// than the client's version, after the node: nothing from a controller
// that does not know them.
func powerHealthLines(ctx context.Context, c *client.Client, node string, out io.Writer) error {
	var n struct {
		DisablePowerOff bool    `json:"disable_power_off"`
		Health          *string `json:"health"`
	}
	if c.DoVersion(ctx, healthVersion, "GET", "/v1/nodes/"+node+"?fields=disable_power_off,health", nil, &n) != nil {
		return nil
	}
	if _, err := fmt.Fprintln(out, "HEALTH:", deref(n.Health, "unknown (the BMC reports none)")); err != nil {
		return err
	}
	if n.DisablePowerOff {
		_, err := fmt.Fprintln(out, "DISABLE POWER OFF: the node is never powered off; reboots replace power-offs")
		return err
	}
	return nil
}

// claimWarnings repeats, after the node, the second agent claimants that
// made the controller stop the node's operation (possible takeover
// attempts): an operator must not miss them in the JSON.
func claimWarnings(node map[string]any, out io.Writer) error {
	dii, _ := node["driver_internal_info"].(map[string]any)
	claims, _ := dii["agent_claims"].([]any)
	for _, c := range claims {
		m, _ := c.(map[string]any)
		if _, err := fmt.Fprintf(out, "SECURITY: second agent claimant at %v: %v from %v (boot %v) after the boot's secret went to %v (boot %v); the operation was stopped\n",
			m["at"], m["via"], m["address"], m["boot_id"], m["holder_address"], m["holder_boot_id"]); err != nil {
			return err
		}
	}
	return nil
}

// fastTrackLine says that the node's agent is kept running between
// operations (driver_internal_info.agent_fast_track), since when and when
// it last heartbeated; "" when it is not.
func fastTrackLine(node map[string]any) string {
	dii, _ := node["driver_internal_info"].(map[string]any)
	ft, _ := dii["agent_fast_track"].(map[string]any)
	if ft == nil {
		return ""
	}
	since := ft["agent_since"]
	if since == nil {
		since = ft["since"]
	}
	last := dii["agent_last_heartbeat"]
	if last == nil {
		last = "never"
	}
	return fmt.Sprintf("fast track: agent running since %v, last heartbeat %v (boot %v, idle since %v)", since, last, ft["boot_id"], ft["since"])
}

// diskCheckWarnings reads the last disk check (driver_internal_info.disk_check)
// and names each missing disk and each storage controller without a driver.
func diskCheckWarnings(node map[string]any) []string {
	dii, _ := node["driver_internal_info"].(map[string]any)
	check, _ := dii["disk_check"].(map[string]any)
	if check == nil || check["ok"] == true {
		return nil
	}
	var out []string
	missing, _ := check["missing"].([]any)
	for _, m := range missing {
		d, _ := m.(map[string]any)
		var parts []string
		for _, k := range []string{"serial", "wwn", "model", "size", "from"} {
			switch v := d[k].(type) {
			case nil, string:
				if v != nil && v != "" {
					parts = append(parts, k+" "+v.(string))
				}
			case float64:
				parts = append(parts, fmt.Sprintf("%s %.0f bytes", k, v))
			default:
				parts = append(parts, fmt.Sprintf("%s %v", k, v))
			}
		}
		out = append(out, fmt.Sprintf("disk check before %v: disk missing: %s", check["step"], strings.Join(parts, ", ")))
	}
	if check["no_disks"] == true {
		out = append(out, fmt.Sprintf("disk check before %v: no disks found", check["step"]))
	}
	return out
}

func steps(ctx context.Context, c *client.Client, node string, out io.Writer) error {
	var body struct {
		Message      string `json:"message"`
		Fingerprint  string `json:"fingerprint"`
		AgentVersion string `json:"agent_version"`
		AgeSeconds   int    `json:"age_seconds"`
		Steps        []struct {
			Interface string         `json:"interface"`
			Step      string         `json:"step"`
			Priority  int            `json:"priority"`
			Abortable bool           `json:"abortable"`
			Args      map[string]any `json:"args"`
		} `json:"steps"`
	}
	if err := c.Do(ctx, "GET", "/v1/nodes/"+node+"/cleaning/steps", nil, &body); err != nil {
		return err
	}
	if body.Steps == nil && body.Message != "" {
		_, err := fmt.Fprintln(out, body.Message)
		return err
	}
	if body.Fingerprint != "" {
		fmt.Fprintf(out, "cached from %s, %s ago, fingerprint %s\n", body.AgentVersion, time.Duration(body.AgeSeconds)*time.Second, body.Fingerprint)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tPRIORITY\tABORTABLE\tARGS")
	for _, s := range body.Steps {
		var args []string
		for k := range s.Args {
			args = append(args, k)
		}
		fmt.Fprintf(tw, "%s.%s\t%d\t%v\t%s\n", s.Interface, s.Step, s.Priority, s.Abortable, strings.Join(args, ","))
	}
	return tw.Flush()
}

func events(ctx context.Context, c *client.Client, node string, out io.Writer) error {
	evs, err := c.History(ctx, node)
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TIME\tSEVERITY\tTYPE\tEVENT")
	for _, e := range evs {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", e.CreatedAt, e.Severity, e.EventType, e.Event)
	}
	return tw.Flush()
}

// verbUsage is the usage of "anvil node VERB".
func verbUsage(name, want string) string {
	what := map[string]string{
		"manage":   "Take the node to manageable (its BMC credentials are checked on the way).",
		"provide":  "Make the node available (automated cleaning first, when enabled).",
		"inspect":  "Inspect the node's hardware; it returns to manageable.",
		"clean":    "Run the clean steps of FILE (- for standard input), a JSON list of\n{interface, step, args}, on the manageable node; it returns to manageable.",
		"deploy":   "Write the node's instance_info image; the node ends active.",
		"undeploy": "Tear the node's instance down (cleaning it when enabled); it ends available.",
		"abort":    "Stop the node's operation while it waits (e.g. in clean wait or inspect wait).",
		"service": "Run the service steps of FILE (- for standard input, or the JSON itself), a JSON\n" +
			"list of {interface, step, args}, on the active node; it returns to active with its\n" +
			"instance. In-band steps boot the agent ramdisk first; --disable-ramdisk allows\n" +
			"out-of-band steps (bios, firmware) only.",
		"unhold": "Continue the cleaning, deployment or service held by a hold step (clean hold,\ndeploy hold, service hold).",
	}[name]
	flags := "[--wait] [--timeout D]"
	switch name {
	case "clean":
		flags = "--steps FILE|- " + flags
	case "service":
		flags = "--steps FILE|-|JSON [--disable-ramdisk] " + flags
	}
	if want != "" {
		what += "\nWith --wait, shows progress until the node rests in " + want + "."
	} else {
		what += "\n--wait returns at once: an abort ends in no single state."
	}
	return fmt.Sprintf("usage: anvil node %s NODE %s\n\n%s\n", name, flags, what)
}

func verb(ctx context.Context, dial connect, name, target, want string, args []string, stdin io.Reader, out io.Writer) error {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	wait := fs.Bool("wait", false, "wait until the node rests in the expected state, showing progress")
	timeout := fs.Duration("timeout", time.Hour, "give up waiting after this long")
	var stepsFile *string
	var noRamdisk *bool
	switch name {
	case "clean":
		stepsFile = fs.String("steps", "", "clean steps as JSON, from a file or - for standard input")
	case "service":
		stepsFile = fs.String("steps", "", "service steps as JSON: a file, - for standard input, or the JSON list itself")
		noRamdisk = fs.Bool("disable-ramdisk", false, "run out-of-band steps only, without booting the agent ramdisk (API 1.108)")
	}
	usage := verbUsage(name, want)
	pos, err := cli.Parse(fs, usage, args, "NODE")
	if err != nil {
		return err
	}
	node := pos[0]
	if stepsFile != nil && *stepsFile == "" {
		return cli.Errorf(cli.Usage(fs, usage), "%s needs --steps FILE|-", name)
	}
	c, err := dial()
	if err != nil {
		return err
	}
	extra := map[string]any{}
	if stepsFile != nil {
		var r io.Reader = stdin
		switch {
		case name == "service" && strings.HasPrefix(strings.TrimSpace(*stepsFile), "["):
			r = strings.NewReader(*stepsFile)
		case *stepsFile != "-":
			f, err := os.Open(*stepsFile)
			if err != nil {
				return err
			}
			defer f.Close()
			r = f
		}
		var cs []map[string]any
		if err := json.NewDecoder(r).Decode(&cs); err != nil {
			return fmt.Errorf("%s steps: expected a JSON list of {interface, step, args}: %w", name, err)
		}
		extra[name+"_steps"] = cs
	}
	if noRamdisk != nil && *noRamdisk {
		extra["disable_ramdisk"] = true
	}
	if err := c.Provision(ctx, node, target, extra); err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: %s accepted\n", node, name)
	if !*wait || want == "" {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	start := time.Now()
	last := ""
	n, err := c.WaitForState(ctx, node, want, time.Second, func(n *client.Node) {
		line := fmt.Sprintf("[%6.1fs] %s  %s", time.Since(start).Seconds(), stateText(n), stepText(n))
		if line != last {
			fmt.Fprintln(out, line)
			last = line
		}
	})
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "%s: %s after %.1fs\n", node, n.ProvisionState, time.Since(start).Seconds())
	return nil
}

func deref(s *string, def string) string {
	if s == nil {
		return def
	}
	return *s
}

func trim(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n-3] + "..."
}
