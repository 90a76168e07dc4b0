package controller

// The nodes' serial consoles (controller/console): which controller holds
// which console-enabled node's SOL session, the loop that makes this
// controller hold exactly its share, and the TCP console port.

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"time"

	"github.com/anvil-metal/anvil/controller/api"
	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/console"
	"github.com/anvil-metal/anvil/controller/store"
)

// consoleReconcileEvery is how often the enabled consoles are compared
// with the sessions held: it picks up a console enabled or disabled
// through another controller, a deleted node, and a change in the group
// of live controllers.
const consoleReconcileEvery = 15 * time.Second

// consoleOwner is the rule that gives each console-enabled node's session
// to exactly one controller of a group sharing a store: rendezvous hashing
// of the node over the live controllers' host names. Every controller
// computes the same answer from the same registrations, with no state of
// its own; when a controller dies its nodes' consoles move to the
// survivors at the next reconcile, and the others' stay put. A viewer who
// reaches a controller that does not hold the console is told which one
// does (409 naming it, and console_info.controller): the simplest choice,
// as proxying would carry every keystroke through two controllers.
func consoleOwner(cond *conductor.Conductor, sole bool) api.ConsoleOwner {
	if sole {
		return nil
	}
	return func(ctx context.Context, nodeUUID string) (string, bool, error) {
		cs, err := cond.Conductors(ctx)
		if err != nil {
			return "", false, fmt.Errorf("console: listing controllers: %w", err)
		}
		host := rendezvous(cs, cond.Host(), nodeUUID)
		return host, host == cond.Host(), nil
	}
}

// consoleOwners is consoleOwner for a whole reconcile: the live controllers
// are listed once, not once per node.
func consoleOwners(cond *conductor.Conductor, sole bool) func(ctx context.Context) (func(nodeUUID string) bool, error) {
	if sole {
		return nil
	}
	return func(ctx context.Context) (func(string) bool, error) {
		cs, err := cond.Conductors(ctx)
		if err != nil {
			return nil, fmt.Errorf("console: listing controllers: %w", err)
		}
		return func(nodeUUID string) bool { return rendezvous(cs, cond.Host(), nodeUUID) == cond.Host() }, nil
	}
}

// rendezvous is the live controller with the highest hash of (its host
// name, the node); self when none is live.
func rendezvous(cs []store.Controller, self, nodeUUID string) string {
	best, bestScore := self, uint64(0)
	for _, c := range cs {
		if !c.Alive {
			continue
		}
		h := sha256.Sum256([]byte(c.Hostname + "\x00" + nodeUUID))
		if s := binary.BigEndian.Uint64(h[:8]); s >= bestScore {
			best, bestScore = c.Hostname, s
		}
	}
	return best
}

// reconcileConsoles makes m hold the sessions of the console-enabled nodes
// owner gives this controller, and no others.
func reconcileConsoles(ctx context.Context, st store.Nodes, m *console.Manager, owners func(context.Context) (func(string) bool, error), log *slog.Logger) {
	mine := func(string) bool { return true }
	if owners != nil {
		var err error
		if mine, err = owners(ctx); err != nil {
			log.Warn("console: reconcile", "error", err)
			return
		}
	}
	want, exists := map[string]bool{}, map[string]bool{}
	page := store.Page{Limit: 500}
	for {
		nodes, err := st.ListNodes(ctx, store.NodeFilter{}, page)
		if err != nil {
			log.Warn("console: listing nodes", "error", err)
			return
		}
		for _, n := range nodes {
			exists[n.UUID] = true
			if !n.ConsoleEnabled || n.Interfaces.Console != api.ConsoleInterface {
				continue
			}
			if !mine(n.UUID) {
				continue
			}
			want[n.UUID] = true
			if err := m.Enable(n); err != nil {
				log.Warn("console: enabling", "node", n.UUID, "error", err)
			}
		}
		if len(nodes) < page.Limit {
			break
		}
		page.Marker = nodes[len(nodes)-1].UUID
	}
	for _, id := range m.Held() {
		if !want[id] {
			m.Disable(id)
		}
	}
	for _, id := range m.Known() {
		if !exists[id] {
			m.Forget(id) // the node was deleted: its scrollback goes too
		}
	}
}

// runConsoles reconciles at once (resuming the consoles that were enabled
// before a restart) and then periodically, until ctx ends; then it closes
// every session.
func runConsoles(ctx context.Context, st store.Nodes, m *console.Manager, owners func(context.Context) (func(string) bool, error), log *slog.Logger) {
	defer m.Close()
	t := time.NewTicker(consoleReconcileEvery)
	defer t.Stop()
	for {
		reconcileConsoles(ctx, st, m, owners, log)
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// listenConsoleTCP opens the TCP console port; the address it returns is
// what console_info advertises (the listen address, or with an
// unspecified host, the public URL's host).
func listenConsoleTCP(addr, publicHost string) (net.Listener, string, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("listen on %s for the TCP console: %w", addr, err)
	}
	host, port, _ := net.SplitHostPort(ln.Addr().String())
	if ip := net.ParseIP(host); ip == nil || ip.IsUnspecified() {
		if publicHost != "" {
			host = publicHost
		}
	}
	return ln, net.JoinHostPort(host, port), nil
}

// publicHost is the host of the public URL ("" if it has none).
func publicHost(publicURL string) string {
	u, err := url.Parse(publicURL)
	if err != nil {
		return ""
	}
	return u.Hostname()
}
