package controller

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/simagent"
	"github.com/anvil-metal/anvil/controller/store"
)

// simulatedHardware is fake-hardware whose nodes run a simulated agent
// (--simulate-agents): powering a node on or rebooting it boots a simulated
// agent that speaks the real protocol to this controller over HTTP; powering
// it off stops it. It lets the whole in-band flow (lookup, heartbeats, steps
// with progress) run on a laptop without VMs.
type simulatedHardware struct {
	conductor.FakeDriver
	st       store.Store
	log      *slog.Logger
	url      func() string // the controller's URL, known once listening
	interval time.Duration
	stepRuns int // heartbeats each simulated step stays running (shows progress)

	mu     sync.Mutex
	agents map[string]context.CancelFunc
	// next is each node's boot device as last set: a node told to boot
	// from its disk boots its instance, not the ramdisk, so no agent.
	next map[string]string
	wg   sync.WaitGroup
	ctx  context.Context
	// tls is how the agents trust this controller's HTTPS (nil: plain).
	tls *tls.Config
}

func newSimulatedHardware(ctx context.Context, st store.Store, log *slog.Logger, url func() string, stepTime time.Duration, tc *tls.Config) *simulatedHardware {
	const interval = 200 * time.Millisecond
	if stepTime <= 0 {
		stepTime = time.Second
	}
	return &simulatedHardware{st: st, log: log, url: url, interval: interval, stepRuns: max(1, int(stepTime/interval)),
		agents: map[string]context.CancelFunc{}, next: map[string]string{}, ctx: ctx, tls: tc}
}

// simulatedDisks are what the simulated erase steps report, per device, as
// the real agent does.
const simulatedDisks = "/dev/sda erased by overwrite, verified (simulated, 64.0 GiB); " +
	"/dev/nvme0n1 erased by nvme_format_crypto_erase, verified (simulated, 960.2 GB)"

// SetPower boots or stops the node's simulated agent.
func (s *simulatedHardware) SetPower(ctx context.Context, n *store.Node, target string) error {
	switch target {
	case conductor.PowerOff, conductor.SoftPowerOff:
		s.stop(n.UUID)
	default:
		s.boot(ctx, n)
	}
	return nil
}

// SetBootDevice records where the node boots next.
func (s *simulatedHardware) SetBootDevice(_ context.Context, n *store.Node, device string, _ bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.next[n.UUID] = device
	return nil
}

func (s *simulatedHardware) stop(node string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if cancel, ok := s.agents[node]; ok {
		cancel()
		delete(s.agents, node)
	}
}

func (s *simulatedHardware) boot(ctx context.Context, n *store.Node) {
	if !conductor.UsesAgent(n) {
		return
	}
	s.mu.Lock()
	fromDisk := s.next[n.UUID] == "disk"
	s.mu.Unlock()
	if fromDisk {
		s.stop(n.UUID) // the deployed instance boots; its ramdisk is gone
		s.log.Info("simulated node booted its instance from disk", "node", n.UUID)
		return
	}
	ports, err := s.st.ListPorts(ctx, store.ResourceFilter{NodeUUID: &n.UUID}, store.Page{})
	if err != nil || len(ports) == 0 {
		s.log.Warn("simulated node has no port, so its agent cannot look itself up", "node", n.UUID, "err", err)
		return
	}
	var macs []string
	for _, p := range ports {
		macs = append(macs, p.Address)
	}
	s.stop(n.UUID) // a reboot replaces the running agent
	a := simagent.New(s.url(), macs...)
	if s.tls != nil {
		a.HTTP.Transport = &http.Transport{TLSClientConfig: s.tls}
	}
	a.Outcomes["deploy.erase_devices_metadata"] = simagent.Outcome{Runs: s.stepRuns,
		Summary: "/dev/sda: signatures removed: gpt (simulated); /dev/nvme0n1: signatures removed: gpt (simulated)"}
	a.Outcomes["deploy.erase_devices"] = simagent.Outcome{Runs: s.stepRuns, Bytes: 64 << 30, Device: "/dev/sda", Summary: simulatedDisks}
	a.Outcomes["deploy.write_image"] = simagent.Outcome{Runs: s.stepRuns, Bytes: 2 << 30, Device: "/dev/sda",
		Summary: "image written to /dev/sda (simulated)"}
	actx, cancel := context.WithCancel(s.ctx)
	s.mu.Lock()
	s.agents[n.UUID] = cancel
	s.mu.Unlock()
	s.log.Info("simulated agent booted", "node", n.UUID, "macs", macs)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		// a real ramdisk takes a few seconds to boot; so does this one
		select {
		case <-actx.Done():
			return
		case <-time.After(500 * time.Millisecond):
		}
		// Its firmware network-boots first: the boot script carries the
		// nonce the lookup needs when this controller serves boot scripts.
		nonce, err := simagent.FirmwareBoot(actx, a.HTTP, s.url(), macs[0])
		if err != nil {
			s.log.Warn("simulated firmware: fetching the boot script failed; booting without a nonce", "node", n.UUID, "err", err)
		}
		a.Nonce = nonce
		a.Run(actx, s.interval)
	}()
}

// shutdown stops every simulated agent.
func (s *simulatedHardware) shutdown() {
	s.mu.Lock()
	for id, cancel := range s.agents {
		cancel()
		delete(s.agents, id)
	}
	s.mu.Unlock()
	s.wg.Wait()
}
