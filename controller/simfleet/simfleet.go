// Package simfleet is a fleet of simulated machines for tests and load
// tests: each machine is a virtual Redfish BMC (bmc/vbmc, in memory) whose
// power actions boot, reboot or stop a simulated agent (controller/simagent)
// that speaks the real protocol to a controller. A controller drives them
// exactly as it drives real servers: through bmclib, then the agent's
// lookup and heartbeats; a reboot gives the agent a new boot id, as a real
// ramdisk gets.
package simfleet

import (
	"context"
	"fmt"
	"net/http/httptest"
	"sync"
	"time"

	"github.com/anvil-metal/anvil/bmc/vbmc"
	"github.com/anvil-metal/anvil/controller/simagent"
)

// Credentials of every simulated BMC.
const (
	Username = "admin"
	Password = "password"
)

// Machine is one simulated server: its BMC and the agent its ramdisk runs.
type Machine struct {
	Name  string
	MAC   string
	Agent *simagent.Agent
	BMC   *httptest.Server

	interval  time.Duration
	bootDelay time.Duration
	parent    context.Context

	mu     sync.Mutex
	on     bool
	boots  int
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Config shapes a fleet.
type Config struct {
	// API is the URL the agents talk to (a controller or a balancer).
	API string
	// Interval between heartbeats of an agent until the controller says
	// otherwise.
	Interval time.Duration
	// BootDelay is how long a ramdisk takes from power on to its first
	// lookup.
	BootDelay time.Duration
	// Prepare, if set, scripts each machine's agent (step outcomes).
	Prepare func(m *Machine)
}

// Fleet is a set of machines.
type Fleet struct {
	Machines []*Machine
}

// New starts n powered-off machines named prefix-NN, each with its own BMC
// on a loopback port (one BMC per machine, so the controller's per-BMC
// serialisation applies per machine as on real hardware). Agents run under
// ctx; Close stops everything.
func New(ctx context.Context, cfg Config, prefix string, n int) *Fleet {
	f := &Fleet{}
	for i := 0; i < n; i++ {
		name := fmt.Sprintf("%s-%02d", prefix, i)
		mac := fmt.Sprintf("52:54:%02x:%02x:%02x:%02x", (i>>24)&0xff, (i>>16)&0xff, (i>>8)&0xff, i&0xff)
		m := &Machine{Name: name, MAC: mac, Agent: simagent.New(cfg.API, mac), interval: cfg.Interval,
			bootDelay: cfg.BootDelay, parent: ctx}
		if cfg.Prepare != nil {
			cfg.Prepare(m)
		}
		m.BMC = httptest.NewServer(vbmc.NewServer(nil, Username, Password, vbmc.NewNode(name, m)).Handler())
		f.Machines = append(f.Machines, m)
	}
	return f
}

// Close stops every agent and BMC.
func (f *Fleet) Close() {
	for _, m := range f.Machines {
		_ = m.Close()
		m.BMC.Close()
	}
}

// DriverInfo is the Ironic driver_info of the machine's BMC.
func (m *Machine) DriverInfo() map[string]any {
	return map[string]any{"redfish_address": m.BMC.URL, "redfish_system_id": "/redfish/v1/Systems/" + m.Name,
		"redfish_username": Username, "redfish_password": Password}
}

// Boots is how many times the machine was powered on or reset.
func (m *Machine) Boots() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.boots
}

// boot starts the ramdisk: a new boot id, then lookup and heartbeats.
// Called with mu held.
func (m *Machine) boot() {
	m.stop()
	m.boots++
	m.Agent.Boot()
	ctx, cancel := context.WithCancel(m.parent)
	m.cancel = cancel
	m.wg.Add(1)
	go func() {
		defer m.wg.Done()
		select {
		case <-ctx.Done():
			return
		case <-time.After(m.bootDelay):
		}
		// The firmware's network boot: the script's nonce, if the
		// controller serves boot scripts, is what the lookup presents.
		m.Agent.Nonce, _ = simagent.FirmwareBoot(ctx, m.Agent.HTTP, m.Agent.API, m.MAC)
		m.Agent.Run(ctx, m.interval)
	}()
}

// stop halts the running agent. Called with mu held.
func (m *Machine) stop() {
	if m.cancel != nil {
		m.cancel()
		m.cancel = nil
		m.wg.Wait()
	}
}

// PowerOn implements vbmc.Backend.
func (m *Machine) PowerOn(_ context.Context, _ string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.on {
		m.on = true
		m.boot()
	}
	return nil
}

// PowerOff implements vbmc.Backend.
func (m *Machine) PowerOff(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.on = false
	m.stop()
	return nil
}

// Shutdown implements vbmc.Backend: the ramdisk obeys ACPI at once.
func (m *Machine) Shutdown(ctx context.Context) error { return m.PowerOff(ctx) }

// Reset implements vbmc.Backend.
func (m *Machine) Reset(_ context.Context, _ string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.on {
		return fmt.Errorf("reset: machine is off")
	}
	m.boot()
	return nil
}

// On implements vbmc.Backend.
func (m *Machine) On(context.Context) (bool, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.on, nil
}

// Close implements vbmc.Backend.
func (m *Machine) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.stop()
	return nil
}

var _ vbmc.Backend = (*Machine)(nil)
