package main

// What the agent learns from inside the server beside the hardware
// inventory, in the background from boot: the BMC's LAN addresses over
// in-band IPMI (/dev/ipmi0) and, per NIC, the first LLDP frame its switch
// sends. Both are bounded; the inventory waits for what is still being
// collected, never longer than those bounds, and says why a part is
// missing rather than failing.

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"github.com/anvil-metal/anvil/hardware/ipmi"
	"github.com/anvil-metal/anvil/hardware/kmod"
	hwlldp "github.com/anvil-metal/anvil/hardware/lldp"
	"github.com/anvil-metal/anvil/protocol"
)

const (
	// defaultLLDPWait is how long a discovery boot listens for LLDP:
	// switches send every 30 s by default. Other boots do not listen
	// unless anvil.lldp_wait= says so, since each inventory would wait
	// that long on a network without LLDP.
	defaultLLDPWait = 30 * time.Second
	// ipmiRequestTimeout bounds each in-band request; ipmiBudget the whole
	// BMC read, module loading included.
	ipmiRequestTimeout = 2 * time.Second
	ipmiBudget         = 20 * time.Second
)

// inband is the background collection.
type inband struct {
	bmcDone  chan struct{}
	lldpDone chan struct{}
	bmc      ipmi.LAN
	bmcNote  string
	lldp     map[string][]protocol.LLDPTLV
}

// startInband starts reading the BMC at once and listening for LLDP on
// every physical NIC once network drivers are loaded (networkGate), in
// parallel with DHCP. lldpWait 0 does not listen.
func startInband(ctx context.Context, log *slog.Logger, networkGate <-chan struct{}, lldpWait time.Duration, loadModules bool) *inband {
	b := &inband{bmcDone: make(chan struct{}), lldpDone: make(chan struct{})}
	go func() {
		defer close(b.bmcDone)
		ctx, cancel := context.WithTimeout(ctx, ipmiBudget)
		defer cancel()
		b.bmc, b.bmcNote = readBMC(ctx, log, loadModules)
	}()
	go func() {
		defer close(b.lldpDone)
		if lldpWait <= 0 || wait(ctx, networkGate) != nil {
			return
		}
		names, err := hwlldp.PhysicalInterfaces("/sys/class/net")
		if err != nil {
			log.Info("lldp: no interfaces to listen on", "err", err)
			return
		}
		start := time.Now()
		got := hwlldp.Collect(ctx, names, hwlldp.Options{Window: lldpWait, Log: log})
		b.lldp = got
		log.Info("lldp: listened", "interfaces", names, "heard", len(got), "took", time.Since(start).Round(time.Millisecond).String())
	}()
	return b
}

// readBMC loads the in-band IPMI drivers (as IPA: ipmi_msghandler,
// ipmi_devintf, ipmi_si) and reads the BMC's LAN configuration. The note
// says why nothing was read.
func readBMC(ctx context.Context, log *slog.Logger, loadModules bool) (ipmi.LAN, string) {
	if loadModules {
		for _, m := range []string{"ipmi_msghandler", "ipmi_devintf", "ipmi_si"} {
			if err := kmod.Modprobe([]string{m}); err != nil {
				log.Debug("in-band IPMI: module not loaded", "module", m, "err", err)
			}
		}
	}
	settle := time.Duration(0)
	if loadModules {
		settle = 3 * time.Second
	}
	dev, err := openIPMI(ctx, settle)
	if errors.Is(err, ipmi.ErrNoDevice) {
		log.Info("no in-band IPMI: the BMC's address is not reported", "err", err)
		return ipmi.LAN{}, "no in-band IPMI"
	}
	if err != nil {
		log.Warn("in-band IPMI unusable", "err", err)
		return ipmi.LAN{}, err.Error()
	}
	defer dev.Close()
	start := time.Now()
	lan, err := ipmi.ReadLAN(ctx, dev)
	log.Info("in-band IPMI: BMC LAN configuration", "address", lan.Address, "v6address", lan.V6Address, "mac", lan.MAC,
		"channel", lan.Channel, "took", time.Since(start).Round(time.Millisecond).String(), "err", err)
	if err != nil && lan == (ipmi.LAN{}) {
		return lan, "in-band IPMI: " + err.Error()
	}
	if lan.Address == "" && lan.V6Address == "" {
		return lan, "in-band IPMI: the BMC has no address set on channels 1-11"
	}
	return lan, ""
}

// openIPMI opens /dev/ipmi0, waiting up to settle for it: ipmi_si
// registers the interface after the module has loaded.
func openIPMI(ctx context.Context, settle time.Duration) (*ipmi.Device, error) {
	deadline := time.Now().Add(settle)
	for {
		dev, err := ipmi.Open(ipmiRequestTimeout)
		if !errors.Is(err, ipmi.ErrNoDevice) || time.Now().After(deadline) {
			return dev, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// fill adds what was collected to inv, waiting (bounded by ctx and the
// collections' own limits) for what is still running.
func (b *inband) fill(ctx context.Context, inv *protocol.Inventory) {
	if b == nil {
		return
	}
	if wait(ctx, b.bmcDone) == nil {
		inv.BMCAddress, inv.BMCV6Address, inv.BMCMAC = b.bmc.Address, b.bmc.V6Address, b.bmc.MAC
		if b.bmcNote != "" {
			if inv.Extra == nil {
				inv.Extra = map[string]any{}
			}
			inv.Extra["bmc"] = b.bmcNote
		}
	}
	if wait(ctx, b.lldpDone) == nil {
		for i := range inv.Interfaces {
			if tlvs, ok := b.lldp[inv.Interfaces[i].Name]; ok {
				inv.Interfaces[i].LLDP = tlvs
			}
		}
	}
}
