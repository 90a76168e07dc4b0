package main

import (
	"context"
	"log/slog"
	"time"

	"github.com/anvil-metal/anvil/agent"
	"github.com/anvil-metal/anvil/hardware/kmod"
)

// bootGates say how far the ramdisk's start-up has come. Coldplug runs
// beside the agent instead of before it: the network waits only for the
// drivers that are not storage, and what reads disks (the guard's
// allow-list, mdadm, the inventory, the hardware managers) waits for all
// of them. On a QEMU TCG boot the storage probes (ata_piix, NVMe) took
// 1–2 s that DHCP and the lookup now overlap.
type bootGates struct {
	network <-chan struct{} // closed once the network's drivers are loaded
	disks   <-chan struct{} // closed once coldplug has finished
}

// openGates are gates with nothing to wait for: no ramdisk powers, so the
// agent loads no modules.
func openGates() bootGates {
	c := make(chan struct{})
	close(c)
	return bootGates{network: c, disks: c}
}

// startBoot starts coldplug in the background and returns its gates; after
// the first pass it keeps watching for devices that appear late.
func startBoot(ctx context.Context, log *slog.Logger) bootGates {
	c, err := kmod.ForRunningKernel(log)
	if err != nil {
		log.Warn("coldplug: no module loading by modalias", "err", err)
		return openGates()
	}
	network, disks := make(chan struct{}), make(chan struct{})
	if k, ok := c.Loader.(*kmod.KernelLoader); ok {
		c.Background = k.StorageOnly
	}
	c.Foreground = func() { close(network) }
	listen(ctx, log, c)
	go func() {
		defer close(disks)
		logColdplug(log, c.Run(ctx))
		go c.Watch(ctx, 5*time.Second)
	}()
	return bootGates{network: network, disks: disks}
}

// wait blocks until gate is closed or ctx ends.
func wait(ctx context.Context, gate <-chan struct{}) error {
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// gatedNetwork brings the network up once its drivers are loaded.
type gatedNetwork struct {
	agent.Network
	gate <-chan struct{}
}

// Up implements agent.Network.
func (g gatedNetwork) Up(ctx context.Context) ([]string, error) {
	if err := wait(ctx, g.gate); err != nil {
		return nil, err
	}
	return g.Network.Up(ctx)
}

// coldplug is the ramdisk's /bin/coldplug: one pass, everything waited for
// (scripts and VM tests that run without the agent use it).
func coldplug(ctx context.Context, log *slog.Logger) {
	c, err := kmod.ForRunningKernel(log)
	if err != nil {
		log.Warn("coldplug: no module loading by modalias", "err", err)
		return
	}
	listen(ctx, log, c)
	logColdplug(log, c.Run(ctx))
}

// listen has coldplug follow the kernel's device events rather than poll
// sysfs. Opened before the first look at sysfs, so no device falls between.
func listen(ctx context.Context, log *slog.Logger, c *kmod.Coldplug) {
	ev, err := kmod.ListenUevents(ctx, log, kmod.WantsDriver)
	if err != nil {
		log.Info("coldplug: no device events; polling sysfs", "err", err)
		return
	}
	c.Events = ev
}

// logColdplug logs what a pass did. Nothing there stops the boot: without a
// module tree or with unknown hardware the agent carries on with what the
// kernel already drives.
func logColdplug(log *slog.Logger, res kmod.Result) {
	log.Info("coldplug done", "took", res.Took.Round(time.Millisecond).String(), "network_after", res.ForegroundAt.Round(time.Millisecond).String(),
		"rounds", res.Rounds, "devices", res.Devices, "loaded", res.Loaded, "failed", res.Failed, "unmatched", len(res.Unmatched),
		"scans", res.Scans, "scan_time", res.ScanTime.Round(time.Millisecond).String())
	if len(res.Unmatched) > 0 {
		log.Debug("coldplug: devices no included module claims", "modaliases", res.Unmatched)
	}
}
