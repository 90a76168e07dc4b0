package agent

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/internal/textlist"
	"github.com/anvil-metal/anvil/protocol"
)

// BootConfig is what the kernel command line tells the agent. Flags of the
// agent binary override it; the command line is how the ramdisk is
// configured without rebuilding it.
type BootConfig struct {
	// API is the controller URL (anvil.api=, or IPA's ipa-api-url=).
	API string
	// Token is the per-boot nonce baked into the boot config by the
	// controller (anvil.token=); optional.
	Token string
	// Fingerprint is the SHA-256 of the controller's TLS certificate
	// (anvil.api_fingerprint=sha256:<hex>): the agent talks to a server
	// presenting that certificate only. Checked by NewClient, so a
	// malformed one stops the agent instead of unpinning it.
	Fingerprint string
	// Debug turns on debug logging (anvil.debug, anvil.debug=1).
	Debug bool
	// Interfaces restricts network setup to these interfaces
	// (anvil.interface=eth0, repeatable or comma-separated).
	Interfaces []string
	// Devices is the device allow-list (anvil.devices=/dev/loop3,...).
	Devices []string
	// DevicesSet: anvil.devices was given, even empty. An empty list
	// denies every device; only an absent one leaves the ramdisk free to
	// write all disks.
	DevicesSet bool
	// Node is the node UUID, when the boot config knows it (anvil.node=).
	Node string
	// Discovery: the controller booted a machine no node has
	// (anvil.discovery); the agent reports it for enrolment.
	Discovery bool
	// LLDPWait is how long the agent listens for its switches' LLDP
	// frames (anvil.lldp_wait=<seconds>; 0 turns listening off), when
	// LLDPWaitSet; else the agent's default applies.
	LLDPWait    time.Duration
	LLDPWaitSet bool
	// IPA holds ironic-python-agent's arguments. They select the IPA
	// adapter (agent/ipa) when ipa-api-url= is given without anvil.api=:
	// the ramdisk was booted by a stock Ironic, not by anvil.
	IPA IPAArgs

	anvilAPI bool // anvil.api= was given: anvil's own arguments, not IPA mode
	// Static is a fixed address for networks without DHCP: anvil.ip=, or
	// Ironic's ip= form (anvil.ip= wins).
	Static *StaticIP
	// VLAN is anvil.vlan=ID[,device].
	VLAN *VLAN
	// Bond comes from network_data only.
	Bond *Bond
	// NetNotes are parts of network_data the agent does not configure.
	NetNotes []string
	// BootIF is the MAC the node booted from (BOOTIF=01-aa-bb-...), the
	// interface a static address goes on when ip= names none.
	BootIF string
	// Problems are parameters that did not parse; the agent logs them and
	// carries on with DHCP.
	Problems []string
}

// IPAArgs are the kernel arguments Ironic writes for ironic-python-agent.
// Empty strings mean "not given"; the adapter applies IPA's defaults.
type IPAArgs struct {
	APIURL          string // ipa-api-url
	AdvertiseHost   string // ipa-advertise-host
	AdvertisePort   string // ipa-advertise-port
	ListenHost      string // ipa-listen-host
	ListenPort      string // ipa-listen-port
	Insecure        bool   // ipa-insecure: do not verify Ironic's TLS certificate
	GlobalRequestID string // ipa-global-request-id
	LookupTimeout   string // ipa-lookup-timeout (seconds)
	Debug           bool   // ipa-debug
}

// IPAMode reports whether the command line asks for the IPA adapter: an
// ipa-api-url= and no anvil.api= (anvil's own arguments always win).
func (c BootConfig) IPAMode() bool { return c.IPA.APIURL != "" && !c.anvilAPI }

// ParseCmdline reads /proc/cmdline-style text. Unknown parameters are
// ignored (the line is shared with the kernel and init), and so is
// everything after "--", which belongs to init.
func ParseCmdline(s string) BootConfig { return parseArgs(kernelArgs(s)) }

// ParseBoot reads the kernel command line and, when the ramdisk was booted
// from a per-node ISO, the boot config its node slot put at
// protocol.BootConfigPath (nil: none): its arguments count as if they
// came after the kernel's, and its network_data replaces any ip=,
// anvil.ip= and anvil.vlan=. A boot config that does not parse is a
// problem (logged), not a failure.
func ParseBoot(cmdline string, bootConfig []byte) BootConfig {
	args := kernelArgs(cmdline)
	if bootConfig == nil {
		return parseArgs(args)
	}
	var bc protocol.BootConfig
	if err := json.Unmarshal(bootConfig, &bc); err != nil {
		c := parseArgs(args)
		c.Problems = append(c.Problems, fmt.Sprintf("%s: %v", protocol.BootConfigPath, err))
		return c
	}
	if bc.Placeholder {
		c := parseArgs(args)
		c.Problems = append(c.Problems, protocol.BootConfigPath+" is the ISO's empty node slot: the common ISO was booted, not a node's own")
		return c
	}
	c := parseArgs(append(args, splitCmdline(bc.Cmdline)...))
	if nd := strings.TrimSpace(string(bc.NetworkData)); nd == "" || nd == "null" || nd == "{}" {
		return c
	}
	plan, err := ParseNetworkData(bc.NetworkData)
	if err != nil {
		c.Problems = append(c.Problems, err.Error())
		return c
	}
	c.Static, c.VLAN, c.Bond, c.NetNotes = plan.Static, plan.VLAN, plan.Bond, plan.Notes
	return c
}

// kernelArgs are the arguments of a command line up to "--" (the rest
// belongs to init).
func kernelArgs(s string) []string {
	args := splitCmdline(s)
	for i, a := range args {
		if a == "--" {
			return args[:i]
		}
	}
	return args
}

func parseArgs(args []string) BootConfig {
	var c BootConfig
	kernelIP := false // c.Static came from ip=, so anvil.ip= may replace it
	for _, arg := range args {
		key, val, hasVal := strings.Cut(arg, "=")
		switch key {
		case "anvil.api":
			c.API, c.anvilAPI = val, true
		case "ipa-api-url":
			// IPA's name, so a PXE config written for IPA works; ours wins.
			c.IPA.APIURL = val
			if !c.anvilAPI {
				c.API = val
			}
		case "ipa-advertise-host":
			c.IPA.AdvertiseHost = val
		case "ipa-advertise-port":
			c.IPA.AdvertisePort = val
		case "ipa-listen-host":
			c.IPA.ListenHost = val
		case "ipa-listen-port":
			c.IPA.ListenPort = val
		case "ipa-insecure":
			c.IPA.Insecure = !hasVal || truthy(val)
		case "ipa-global-request-id":
			c.IPA.GlobalRequestID = val
		case "ipa-lookup-timeout":
			c.IPA.LookupTimeout = val
		case "ipa-debug":
			c.IPA.Debug = !hasVal || truthy(val)
		case protocol.CmdlineNonce:
			c.Token = val
		case protocol.CmdlineFingerprint:
			c.Fingerprint = val
		case "anvil.debug":
			c.Debug = !hasVal || truthy(val)
		case "anvil.interface":
			c.Interfaces = append(c.Interfaces, textlist.Split(val, ",")...)
		case "anvil.devices":
			c.Devices, c.DevicesSet = hardware.ParseAllowList(val), true
		case "anvil.node":
			c.Node = val
		case "anvil.discovery":
			c.Discovery = !hasVal || truthy(val)
		case "anvil.lldp_wait":
			if n, err := strconv.Atoi(val); err == nil && n >= 0 && n <= 600 {
				c.LLDPWait, c.LLDPWaitSet = time.Duration(n)*time.Second, true
			} else {
				c.Problems = append(c.Problems, fmt.Sprintf("anvil.lldp_wait=%s: not a number of seconds from 0 to 600", val))
			}
		case "ip":
			if c.Static == nil || kernelIP {
				if st, err := parseKernelIP(val); c.usable(err) && st != nil {
					c.Static, kernelIP = st, true
				}
			}
		case "anvil.ip":
			if st, err := parseAnvilIP(val); c.usable(err) {
				c.Static, kernelIP = st, false
			}
		case "anvil.vlan":
			if v, err := parseVLAN(val); c.usable(err) {
				c.VLAN = v
			}
		case "BOOTIF":
			c.BootIF = parseBootIF(val)
		}
	}
	return c
}

// usable says whether a parameter parsed (err is nil); one that did not is
// recorded as a problem, and what was set before stays.
func (c *BootConfig) usable(err error) bool {
	if err != nil {
		c.Problems = append(c.Problems, err.Error())
		return false
	}
	return true
}

func truthy(v string) bool {
	switch strings.ToLower(v) {
	case "0", "false", "no", "off":
		return false
	}
	return true
}

// splitCmdline splits on whitespace, honouring double quotes the way the
// kernel does (`key="a b"` is one parameter, quotes removed).
func splitCmdline(s string) []string {
	var out []string
	var cur strings.Builder
	inQuote, inArg := false, false
	for _, r := range s {
		switch {
		case r == '"':
			inQuote = !inQuote
			inArg = true
		case !inQuote && (r == ' ' || r == '\t' || r == '\n' || r == '\r'):
			if inArg {
				out = append(out, cur.String())
				cur.Reset()
				inArg = false
			}
		default:
			cur.WriteRune(r)
			inArg = true
		}
	}
	if inArg {
		out = append(out, cur.String())
	}
	return out
}
