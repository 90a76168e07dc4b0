package kmod

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anvil-metal/anvil/internal/pause"
)

// Loader loads a kernel module, with its dependencies, by name. Load must
// be safe for concurrent use and succeed for a module already loaded.
type Loader interface {
	Load(name string) error
}

// Coldplug loads the modules the machine's devices ask for: it reads the
// modalias of every device no driver is bound to, matches
// them against Aliases and loads what matches, concurrently, then looks
// again, because a loaded driver exposes new devices (a SCSI HBA's disks
// need sd_mod, a USB host controller's hubs and sticks need theirs). It
// stops once no new device has appeared for Settle after the last load.
//
// A device nothing matches, and a module that fails to load, are logged
// and skipped: the agent boots with whatever loaded, and the inventory
// shows what has no driver.
type Coldplug struct {
	Sys     string // normally /sys
	Aliases *AliasTable
	Loader  Loader
	// Parallel loads at most this many modules at once (default 8). The
	// kernel runs module init concurrently; a driver's PCI probe (reset,
	// firmware wait) is what takes time.
	Parallel int
	// Settle is how long to keep looking for devices after the last load
	// (default 300 ms): drivers may register devices asynchronously (SCSI
	// scanning, USB enumeration).
	Settle time.Duration
	// Limit bounds one Run (default 60 s), so hardware that keeps adding
	// devices cannot hold the boot.
	Limit time.Duration
	// Background names modules that what comes next in the boot does not
	// wait for (nil: none). The agent passes storage drivers: their probes
	// (ATA link resets, SCSI scans) are the slowest of a boot, and disks
	// are needed only once the agent inventories them, while the NIC
	// drivers gate DHCP.
	Background func(module string) bool
	// Foreground, if set, is called once, by the first Run: as soon as
	// every module Background does not name has loaded and Settle has
	// passed since the last of them, while background loads may still
	// run; at the latest when that Run returns (ctx ended, Limit passed,
	// no sysfs), so a caller waiting on it is never left waiting.
	Foreground func()
	// Events, if set, are the kernel's device additions (ListenUevents).
	// Run then handles each added device as it is announced instead of
	// reading sysfs again every 50–250 ms: under TCG each look took
	// 50–60 ms of the one CPU the probes need too, about twenty looks per
	// boot. sysfs is still read in full first, after a Lost event, and
	// once more before Run returns, so a dropped event costs only time.
	Events <-chan Uevent
	Log    *slog.Logger

	mu         sync.Mutex
	seen       map[string]bool // device paths handled (bound ones too)
	tried      map[string]bool // modules loaded or failed
	foreground bool            // Foreground was called
}

// Result is what one Run did.
type Result struct {
	Rounds int
	// Devices are the modaliases of unbound devices seen.
	Devices int
	Loaded  []string
	// Failed maps a module to why it did not load.
	Failed map[string]string
	// Unmatched are modaliases of unbound devices no included module
	// claims (chipset functions, devices driven by built-in code, and
	// hardware the image has no driver for).
	Unmatched []string
	// Scans is how often sysfs was read, ScanTime how long that took in
	// all (logged, to see what rescanning costs on a given machine).
	Scans    int
	ScanTime time.Duration
	// ForegroundAt is when (since Run started) Foreground was called, if
	// this Run called it.
	ForegroundAt time.Duration
	Took         time.Duration
}

// Run loads modules until no new device appears. It returns early, with
// what it did so far, when ctx ends or Limit passes.
//
// Loads are pipelined rather than done in rounds: the devices are looked
// at again as soon as any module finishes loading, so a NIC behind
// virtio_pci gets virtio_net while a slow ATA probe is still running,
// instead of after it.
func (c *Coldplug) Run(ctx context.Context) Result {
	start := time.Now()
	log := c.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	settle, limit, par := c.Settle, c.Limit, c.Parallel
	if settle <= 0 {
		settle = 300 * time.Millisecond
	}
	if limit <= 0 {
		limit = time.Minute
	}
	if par <= 0 {
		par = 8
	}
	background := c.Background
	if background == nil {
		background = func(string) bool { return false }
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.seen == nil {
		c.seen, c.tried = map[string]bool{}, map[string]bool{}
	}
	res := Result{Failed: map[string]string{}}
	callForeground := func() {
		if c.foreground {
			return
		}
		c.foreground = true
		res.ForegroundAt = time.Since(start)
		if c.Foreground != nil {
			log.InfoContext(ctx, "coldplug: foreground drivers loaded", "after", res.ForegroundAt.Round(time.Millisecond).String())
			c.Foreground()
		}
	}
	// Whatever ends the Run, Foreground has been called when it returns.
	defer callForeground()
	type loaded struct {
		mod  string
		err  error
		took time.Duration
	}
	// Buffered for every load Run may start, so that a load finishing
	// after Run returned (ctx ended, Limit passed) never blocks.
	done := make(chan loaded, 4096)
	var queue []string // wanted, not started (more than par at once)
	inFlight, fgPending := 0, 0
	startLoads := func() {
		for len(queue) > 0 && inFlight < par {
			m := queue[0]
			if fgPending > 0 && background(m) {
				// The queue holds the foreground first. Background loads
				// wait for it: on one CPU (a TCG guest, a small VM) they
				// compete for it (a load is mostly decompression and
				// relocation), and the network's drivers are what the
				// next step of the boot waits for.
				break
			}
			queue = queue[1:]
			inFlight++
			go func() {
				t := time.Now()
				err := c.Loader.Load(m)
				done <- loaded{mod: m, err: err, took: time.Since(t)}
			}()
		}
	}
	lastLoad := start.Add(-settle) // nothing loaded yet: no reason to wait
	lastFG := lastLoad
	finish := func(l loaded) {
		inFlight--
		lastLoad = time.Now()
		if !background(l.mod) {
			fgPending--
			lastFG = lastLoad
		}
		if l.err != nil {
			res.Failed[l.mod] = l.err.Error()
			log.WarnContext(ctx, "coldplug: module failed to load", "module", l.mod, "err", l.err)
		} else {
			res.Loaded = append(res.Loaded, l.mod)
			log.InfoContext(ctx, "coldplug: loaded module", "module", l.mod, "took", l.took.Round(time.Millisecond).String())
		}
	}
	deadline := time.NewTimer(limit)
	defer deadline.Stop()
	// With events, sysfs is read first, after lost events, and to verify
	// that nothing was missed before returning; without, on every turn.
	scan, verified := true, false
	var announced []Device // devices events brought since the last turn
	for {
		var fg, bg []string
		fresh := 0
		handle := func(devs []Device) {
			for _, d := range devs {
				if c.seen[d.Path] {
					continue
				}
				c.seen[d.Path] = true
				if d.Bound {
					continue
				}
				fresh++
				res.Devices++
				mods := c.Aliases.Match(d.Modalias)
				if len(mods) == 0 {
					res.Unmatched = append(res.Unmatched, d.Modalias)
					continue
				}
				for _, m := range mods {
					if c.tried[m] {
						continue
					}
					c.tried[m] = true
					if background(m) {
						bg = append(bg, m)
					} else {
						fg = append(fg, m)
					}
				}
			}
		}
		handle(announced)
		announced = announced[:0]
		if scan || c.Events == nil {
			t := time.Now()
			devs, err := scanModaliases(c.Sys, func(path string) bool { return c.seen[path] })
			res.Scans++
			res.ScanTime += time.Since(t)
			if err != nil {
				log.WarnContext(ctx, "coldplug: cannot read devices", "sys", c.Sys, "err", err)
				break
			}
			handle(devs)
			scan = false
		}
		if fresh > 0 {
			verified = false
		}
		if len(fg)+len(bg) > 0 {
			// A round is a set of modules wanted by one look at the
			// devices; its loads overlap with earlier rounds' loads.
			res.Rounds++
			sort.Strings(fg)
			sort.Strings(bg)
			log.InfoContext(ctx, "coldplug: loading modules", "round", res.Rounds, "modules", fg, "background", bg)
			// The foreground first: with more wanted than Parallel, the
			// network's drivers must not queue behind the disks'.
			queue = append(append(fg, queue...), bg...)
			fgPending += len(fg)
		}
		startLoads()
		if fgPending == 0 && time.Since(lastFG) >= settle {
			callForeground()
		}
		if inFlight == 0 && len(queue) == 0 && fresh == 0 && time.Since(lastLoad) >= settle {
			if c.Events == nil || verified {
				break
			}
			scan, verified = true, true
			continue
		}
		tick := time.NewTimer(c.wait(inFlight, fgPending, lastLoad, lastFG, settle))
		select {
		case l := <-done:
			finish(l)
		case ev, ok := <-c.Events:
			if !ok {
				c.Events = nil // the listener stopped: poll
				break
			}
			if ev.Lost {
				scan = true
				break
			}
			announced = append(announced, c.announcedDevice(ev))
		case <-tick.C:
		case <-ctx.Done():
		case <-deadline.C:
		}
		tick.Stop()
		if ctx.Err() != nil || time.Since(start) >= limit {
			break
		}
	}
	// Loads still running when ctx ended or Limit passed are not waited
	// for; what finished is reported.
	for drained := false; !drained; {
		select {
		case l := <-done:
			finish(l)
		default:
			drained = true
		}
	}
	res.Took = time.Since(start)
	return res
}

// wait is how long Run sleeps when nothing happens. Polling, it looks
// again when a load finishes (its driver may have exposed devices) or,
// while settling, every 50 ms; while only loads run, their completion is
// what brings new devices, and a slow tick keeps the scans (most of
// coldplug's time under emulation) from competing with the probes for the
// CPU. With events there is nothing to look at: it sleeps until a settle
// period ends.
func (c *Coldplug) wait(inFlight, fgPending int, lastLoad, lastFG time.Time, settle time.Duration) time.Duration {
	if c.Events == nil {
		if inFlight > 0 && (c.foreground || fgPending > 0) {
			return 250 * time.Millisecond
		}
		return 50 * time.Millisecond
	}
	wait := time.Second
	if inFlight == 0 {
		wait = min(wait, time.Until(lastLoad.Add(settle)))
	}
	if !c.foreground && fgPending == 0 {
		wait = min(wait, time.Until(lastFG.Add(settle)))
	}
	return max(wait, time.Millisecond)
}

// announcedDevice is the device an add event names, bound or not as sysfs
// says now.
func (c *Coldplug) announcedDevice(ev Uevent) Device {
	p := filepath.Join(c.Sys, ev.DevPath)
	_, err := os.Lstat(filepath.Join(p, "driver"))
	return Device{Path: p, Modalias: ev.Modalias, Bound: err == nil}
}

// Watch runs Run again until ctx ends, so a device that shows up late
// (slow SAS discovery, a USB stick plugged in) still gets its driver: when
// the kernel announces a device (or events were lost), or, without
// events, every interval.
func (c *Coldplug) Watch(ctx context.Context, interval time.Duration) {
	log := c.Log
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	for c.next(ctx, interval) {
		if r := c.Run(ctx); len(r.Loaded) > 0 || len(r.Failed) > 0 {
			log.InfoContext(ctx, "coldplug: late devices", "loaded", r.Loaded, "failed", r.Failed)
		}
	}
}

// next waits for a reason to look at the devices again. The event that
// ends the wait is not kept: Run reads sysfs first and finds its device.
func (c *Coldplug) next(ctx context.Context, interval time.Duration) bool {
	if c.Events == nil {
		return pause.For(ctx, interval)
	}
	select {
	case <-ctx.Done():
		return false
	case _, ok := <-c.Events:
		if !ok {
			c.Events = nil // the listener stopped: poll
		}
		return true
	}
}

// Device is one device with a modalias.
type Device struct {
	Path     string // its directory under /sys/devices
	Modalias string
	Bound    bool // a driver is bound (the directory has a driver link)
}

// ScanModaliases lists the devices under sys (normally /sys) that have a
// modalias. Every such device sits on a bus, and sys/bus/*/devices/ links
// each one, so listing those directories finds the same modalias files as
// walking sys/devices/** while reading a few hundred entries instead of
// tens of thousands of attribute files (which matters under emulation,
// where the walk took seconds). Unreadable entries are skipped: a device
// may vanish while we look.
func ScanModaliases(sys string) ([]Device, error) {
	return scanModaliases(sys, nil)
}

// scanModaliases is ScanModaliases without the devices skip names (by
// their /sys/devices path): a device coldplug has handled is not read
// again, which made each rescan cost a directory listing per bus instead
// of three files per device.
func scanModaliases(sys string, skip func(path string) bool) ([]Device, error) {
	buses, err := os.ReadDir(filepath.Join(sys, "bus"))
	if err != nil {
		return nil, fmt.Errorf("scan %s: %w", sys, err)
	}
	var out []Device
	seen := map[string]bool{}
	for _, b := range buses {
		dir := filepath.Join(sys, "bus", b.Name(), "devices")
		devs, err := os.ReadDir(dir)
		if err != nil {
			continue
		}
		for _, d := range devs {
			real, err := deviceDir(dir, d.Name())
			if err != nil || seen[real] || (skip != nil && skip(real)) {
				continue
			}
			seen[real] = true
			raw, err := os.ReadFile(filepath.Join(real, "modalias"))
			if err != nil {
				continue
			}
			alias := strings.TrimSpace(string(raw))
			if alias == "" {
				continue
			}
			_, berr := os.Lstat(filepath.Join(real, "driver"))
			out = append(out, Device{Path: real, Modalias: alias, Bound: berr == nil})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// deviceDir is the /sys/devices directory a bus's devices/ entry links to.
// sysfs links are one hop ("../../../devices/pci0000:00/..."), so one
// readlink does what EvalSymlinks does with an lstat per path component.
// An entry that is not a link (a tree that is not sysfs) is resolved in
// full.
func deviceDir(dir, name string) (string, error) {
	p := filepath.Join(dir, name)
	link, err := os.Readlink(p)
	if err != nil {
		return filepath.EvalSymlinks(p)
	}
	if filepath.IsAbs(link) {
		return filepath.Clean(link), nil
	}
	return filepath.Join(dir, link), nil // Join cleans
}

// ReadAliases parses a modules.alias file.
func ReadAliases(file string) (*AliasTable, error) {
	f, err := os.Open(file)
	if err != nil {
		return nil, fmt.Errorf("modules.alias: %w", err)
	}
	defer f.Close()
	return ParseAliases(f)
}
