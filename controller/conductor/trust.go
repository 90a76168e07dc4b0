package conductor

// Agent trust: who may act as a node's agent during a boot the controller
// started. The rules, and what they leave to an attacker on the
// provisioning network, are in docs/operator/agent-trust.md.
//
//   - A boot whose path the controller serves (its iPXE script or GRUB
//     configuration, or the node's virtual-media ISO) gets a nonce when the
//     controller starts it, before the node is powered on. While the nonce
//     is set, a lookup without it gets nothing: there is no window in which
//     the first stranger to ask wins.
//   - The boot script carries the nonce to one address: in full-DHCP mode
//     only one the boot service leased to the node's ports (none leased:
//     nobody); the same address may fetch it again until the agent looked
//     up (a firmware retry). The ISO is fetched by the BMC under a key only
//     the BMC has.
//   - Anybody who shows up with this boot's secret after somebody else
//     used it (a second script fetch from elsewhere, a second lookup with
//     the nonce, the token from another boot or address) is a second
//     claimant. The controller cannot tell which of the two is the real
//     machine, so it trusts neither: the token is revoked at once and the
//     operation stops (failed, powered off, a security alarm in last_error,
//     history and metrics). A stranger can make an operation fail loudly;
//     it cannot quietly take it over.
//   - A request without the secret proves nothing and costs the node at
//     most a bounded number of history lines.

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/controller/limits"
	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
)

// ErrSecondClaimant marks the refusal of a lookup, heartbeat or boot-script
// fetch that brought this boot's secret after somebody else had used it:
// the operation is stopped (see trust.go's rules).
var ErrSecondClaimant = errors.New("second agent claimant")

// ErrNotTrusted marks a lookup or boot-script fetch refused because it
// lacks what this boot requires (the nonce, the leased address): nothing
// was given away and the operation goes on.
var ErrNotTrusted = errors.New("agent request not trusted")

// LeaseBook tells which addresses the controller's own DHCP server leased
// to MACs (full mode) since a time: a lease given before the boot started
// is the previous boot's, and a stranger who takes its address while the
// node is off must not be taken for the node. nil when the controller
// leases none, and then the boot script is not bound to an address.
type LeaseBook interface {
	LeasedTo(ctx context.Context, macs []string, since time.Time) ([]netip.Addr, error)
}

// BootFetch is a fetch of the node's boot configuration (the iPXE script,
// the GRUB configuration, the ISO) that may carry the boot's nonce.
type BootFetch struct {
	Via     string // "ipxe", "grub" or "vmedia"
	Address string // where the request came from (the relay's client for GRUB over TFTP)
}

// Refusal messages of unauthenticated requests: they name no node and no
// state, so a stranger learns nothing from them. The details go into the
// controller's log and, bounded, the node's history.
const (
	msgNoAgentExpected = "No node expects an agent at these addresses now: no port has them, or its node is not being cleaned, deployed, inspected or rescued by the controller (its history and the controller's log say which)."
	msgNotAllowed      = "Not allowed: this request does not carry what this boot requires (the nonce on the ramdisk's kernel command line, anvil.token=); nothing was issued."
	msgSecondClaimant  = "Not allowed: this boot's agent secret was already used by another party; the operation was stopped and the node is being powered off. An operator must look at the node's history before it is used again."
)

// nonceVia decides how a boot the controller starts now delivers its
// nonce: through the ISO for virtual media, through the boot script when
// the controller serves boot scripts and the node does not opt out
// (driver_info anvil_boot_nonce false: it boots the ramdisk from a
// configuration of the operator's), else not at all.
func (c *core) nonceVia(n *store.Node) string {
	switch {
	case usesVirtualMedia(n):
		return store.NonceVirtualMedia
	case c.cfg.BootScripts && !optedOutOfNonce(n):
		return store.NonceNetboot
	}
	return ""
}

// optedOutOfNonce reads driver_info anvil_boot_nonce (false, "false", "no", "0").
func optedOutOfNonce(n *store.Node) bool {
	switch v := n.DriverInfo["anvil_boot_nonce"].(type) {
	case bool:
		return !v
	case string:
		switch strings.ToLower(strings.TrimSpace(v)) {
		case "false", "no", "0", "off":
			return true
		}
	}
	return false
}

// newBoot starts the agent session of a new boot of the node at now: no
// token is issued yet, and the boot's nonce (if its path carries one) is
// minted. The agent of the previous boot is remembered, so its lookups
// while the node reboots are refused rather than taken for this boot's.
func newBoot(a *store.AgentSession, via string, now time.Time) {
	if a.BootID != "" {
		a.PreviousBootID = a.BootID
	}
	a.Token, a.BootID, a.Address, a.BootNonce, a.NonceVia, a.NonceServedTo, a.NonceLegacyServed = "", "", "", "", via, "", false
	a.VoidTokenSum = ""
	a.BootStartedAt = now
	a.LeftRamdisk = false
	if via != "" {
		a.BootNonce = newToken()
	}
}

// leaveRamdisk records, before a driver step reboots an agent node, that
// the node leaves its ramdisk: the agent's token is revoked (its boot
// becomes the previous one) and lookups are refused until the controller
// boots the ramdisk again (bootRamdisk). Booted stays: the operation's
// end still tears the ramdisk boot down (power off).
func leaveRamdisk(a *store.AgentSession, now time.Time) {
	newBoot(a, "", now)
	a.LeftRamdisk = true
}

// bootAgain starts a new boot of a node that boots again outside the
// controller's own reboot (an operator's token reset or power action): a
// new session and nonce, except that a virtual-media node keeps its nonce,
// since the ISO its BMC serves is made once per boot and already holds it.
func (c *core) bootAgain(n *store.Node) {
	a := &n.Operation.Agent
	kept := ""
	if a.NonceVia == store.NonceVirtualMedia {
		kept = a.BootNonce
	}
	newBoot(a, c.nonceVia(n), c.now())
	if kept != "" && a.NonceVia == store.NonceVirtualMedia {
		a.BootNonce = kept
	}
}

// BootNonce returns the nonce to put on the kernel command line of the
// boot configuration a node fetches now ("" for none), and binds its
// delivery: see trust.go's rules. A refusal is an *Error wrapping
// ErrNotTrusted (nothing given, the operation goes on) or
// ErrSecondClaimant (the operation is stopped).
func (c *sessions) BootNonce(ctx context.Context, nodeUUID string, f BootFetch) (string, error) {
	f.Address = canonicalAddr(f.Address)
	// With the controller's DHCP server giving the addresses (full mode),
	// the node's firmware fetches its script from an address leased to
	// one of its ports, and nothing else gets the nonce.
	bound := f.Via != "vmedia" && c.cfg.Leases != nil
	var leased []netip.Addr
	if bound {
		n, err := c.st.GetNode(ctx, nodeUUID)
		if err != nil {
			return "", notFoundOr(err)
		}
		macs, err := c.nodeMACs(ctx, n.UUID)
		if err != nil {
			return "", err
		}
		if leased, err = c.cfg.Leases.LeasedTo(ctx, macs, n.Operation.Agent.BootStartedAt); err != nil {
			return "", fmt.Errorf("leases of node %s: %w", nodeUUID, err)
		}
	}
	var nonce, refused string
	var alarm *store.Claim
	_, err := store.MutateNodeEvents(ctx, c.st, nodeUUID, func(n *store.Node) ([]*store.Event, error) {
		nonce, refused, alarm = "", "", nil
		a := &n.Operation.Agent
		switch {
		case !state.LookupAllowed(state.State(n.ProvisionState)) || a.BootNonce == "" || a.NonceLegacyServed:
			return nil, errUnchanged // no nonce to give (the caller serves what fits the state)
		case a.Alarm != nil:
			refused = "the operation is being stopped after a second claimant"
			return nil, errUnchanged
		case f.Via == "vmedia":
			if a.NonceVia == store.NonceVirtualMedia {
				nonce = a.BootNonce // the BMC reads the ISO again and again
			}
			return nil, errUnchanged
		case a.NonceVia != store.NonceNetboot:
			refused = "the node boots from virtual media, so its boot script carries no nonce"
			return nil, errUnchanged
		case bound && len(leased) == 0:
			refused = "the boot service has leased no address to the node's ports, and only the address it leases gets the nonce"
			return nil, errUnchanged
		case bound && !leasedTo(leased, f.Address):
			refused = fmt.Sprintf("the boot service leased the node's port %s, not %s", joinAddrs(leased), f.Address)
			return nil, errUnchanged
		case a.Token == "" && (a.NonceServedTo == "" || a.NonceServedTo == f.Address):
			nonce = a.BootNonce
			if a.NonceServedTo != "" {
				return nil, errUnchanged // the same address again: a firmware retry
			}
			a.NonceServedTo = f.Address
			return []*store.Event{c.newEvent(n.UUID, "INFO", "agent", fmt.Sprintf("boot %s with this boot's nonce served to %s", f.Via, f.Address))}, nil
		case a.NonceServedTo == f.Address:
			// The address the script went to, after the lookup: the
			// machine booted again by itself, or a request forged with its
			// address (one UDP datagram does it over TFTP). Neither gets
			// anything, and a forgery must not be able to stop the
			// operation.
			refused = "the script of this boot was served to this address already and its agent has looked up"
			return nil, errUnchanged
		}
		holder := a.NonceServedTo
		if a.Token != "" {
			holder = a.Address
		}
		alarm = &store.Claim{At: c.now(), Via: "boot " + f.Via, Address: f.Address, HolderAddress: holder, HolderBootID: a.BootID}
		return c.raiseAlarm(n, alarm), nil
	})
	if err != nil && !errors.Is(err, errUnchanged) {
		return "", notFoundOr(err)
	}
	if alarm != nil {
		c.kick(nodeUUID)
		return "", Wrap(CodeForbidden, ErrSecondClaimant, msgSecondClaimant)
	}
	if refused != "" {
		c.refusedEvent(ctx, nodeUUID, fmt.Sprintf("boot %s from %s refused: %s", f.Via, f.Address, refused))
		return "", Wrap(CodeForbidden, ErrNotTrusted, msgNotAllowed)
	}
	return nonce, nil
}

// canonicalAddr writes an IP address one way (an IPv4 address seen as
// ::ffff:a.b.c.d is a.b.c.d), so the addresses a boot's requests come
// from compare equal when they are the same; anything else is kept.
func canonicalAddr(s string) string {
	if a, err := netip.ParseAddr(s); err == nil {
		return a.Unmap().String()
	}
	return s
}

// notFoundOr is err as a caller without credentials sees a missing node.
func notFoundOr(err error) error {
	if errors.Is(err, store.ErrNotFound) {
		return NotFound("Boot configuration not found.")
	}
	return err
}

func leasedTo(leased []netip.Addr, addr string) bool {
	a, err := netip.ParseAddr(addr)
	return err == nil && slices.Contains(leased, a.Unmap())
}

func joinAddrs(as []netip.Addr) string {
	s := make([]string, len(as))
	for i, a := range as {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}

// nodeMACs are the MACs of the node's ports.
func (c *sessions) nodeMACs(ctx context.Context, nodeUUID string) ([]string, error) {
	ports, err := c.st.ListPorts(ctx, store.ResourceFilter{NodeUUID: &nodeUUID}, store.Page{})
	if err != nil {
		return nil, err
	}
	macs := make([]string, len(ports))
	for i, p := range ports {
		macs[i] = p.Address
	}
	return macs, nil
}

// raiseAlarm ends this boot's trust in n: the token is revoked in the same
// write, the claim is kept on the node, and the engine stops the
// operation when it sees the alarm (securityStop). It returns the history
// entry.
func (c *sessions) raiseAlarm(n *store.Node, cl *store.Claim) []*store.Event {
	a := &n.Operation.Agent
	a.Alarm = cl
	a.AddClaim(*cl)
	a.Token, a.Command = "", nil
	return []*store.Event{c.newEvent(n.UUID, "ERROR", "agent", "SECURITY: "+alarmText(cl)+"; the agent token is revoked and the operation stops")}
}

// alarmText says what a second claimant did, for last_error and history.
func alarmText(cl *store.Claim) string {
	return fmt.Sprintf("second agent claimant: %s from %s after this boot's secret went to %s; "+
		"either the machine booted again outside the controller or somebody else is posing as it",
		cl.Via, whoIs(cl.Address, cl.BootID), whoIs(cl.HolderAddress, cl.HolderBootID))
}

// whoIs names a claimant by its address and, once it has one, its boot.
func whoIs(addr, bootID string) string {
	if bootID == "" {
		return orUnknown(addr)
	}
	return orUnknown(addr) + " (boot " + bootID + ")"
}

// refusalNote says how many refusals a node's budget left out of its
// history.
func refusalNote(left int) string {
	return fmt.Sprintf(" (%d more refusals since the last recorded one were not recorded)", left)
}

// refusalBudget bounds the history lines of refused agent requests per
// node: a burst of 5, then one a minute.
var refusalBudget = limits.Rate{PerSecond: 1.0 / 60, Burst: 5}

// refusedEvent records a request refused for lacking this boot's secret,
// within the node's budget (sessions.refusals): a stranger polling cannot
// fill a history.
func (c *sessions) refusedEvent(ctx context.Context, nodeUUID, msg string) {
	c.log.InfoContext(ctx, "agent request refused", "node", nodeUUID, "reason", msg)
	c.refusals(ctx, nodeUUID, "WARNING", msg)
}

// alarmPending reports whether n's boot had a second claimant and its
// operation is still to be stopped (securityStop).
func alarmPending(n *store.Node) bool {
	return n.Operation.Agent.Alarm != nil && state.LookupAllowed(state.State(n.ProvisionState))
}
