package erase

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/internal/directio"
	"github.com/anvil-metal/anvil/protocol"
	"golang.org/x/sys/unix"
)

// Attempt is one method tried on one device.
type Attempt struct {
	Method       Method        `json:"method"`
	Passes       int           `json:"passes,omitempty"` // overwrite: passes written
	Error        string        `json:"error,omitempty"`
	Seconds      float64       `json:"seconds"`
	Verification *Verification `json:"verification,omitempty"`
}

// Status of a device after the step.
type Status string

// Statuses.
const (
	StatusErased  Status = "erased"
	StatusSkipped Status = "skipped"
	StatusFailed  Status = "failed"
)

// DeviceResult is the outcome for one device: the plan, every attempt, and
// which method erased it (only ever set together with a passed verification).
type DeviceResult struct {
	Plan     DevicePlan `json:"plan"`
	Status   Status     `json:"status"`
	Method   Method     `json:"method,omitempty"`
	Attempts []Attempt  `json:"attempts,omitempty"`
	Bytes    uint64     `json:"bytes,omitempty"`
	Seconds  float64    `json:"seconds"`
	Error    string     `json:"error,omitempty"`
	// StartedAt and FinishedAt bound the work on this device (absent when
	// it was never started).
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// Result of erase_devices: one entry per device, in plan order.
type Result struct {
	Policy  Policy         `json:"policy"`
	Devices []DeviceResult `json:"devices"`
	Seconds float64        `json:"seconds"`
}

// Eraser runs plans. Opener is required; Prober may be nil (then only the
// generic methods are planned).
type Eraser struct {
	Opener Opener
	Prober Prober

	// applyOverride replaces a method's implementation in tests (e.g. one
	// that claims success without writing, to prove verification catches it).
	applyOverride map[Method]func(ctx context.Context, p DevicePlan) (pattern, error)
}

// Erase runs every plan with at most pol.Concurrency devices at a time. It
// refuses to start (writing nothing) when a plan says ActionRefuse. A device
// counts as erased only after the method's effect was verified by reading
// it back; otherwise the next planned method is tried. The returned error is
// a *protocol.Error of type BlockDeviceEraseError naming the failed devices;
// the Result is returned in every case.
func (e *Eraser) Erase(ctx context.Context, plans []DevicePlan, pol Policy, progress hardware.ProgressFunc) (Result, error) {
	start := time.Now()
	res := Result{Policy: pol, Devices: make([]DeviceResult, len(plans))}
	var refused []string
	typ := protocol.ErrTypeBlockDeviceErase
	for i, p := range plans {
		res.Devices[i] = DeviceResult{Plan: p, Status: StatusSkipped}
		if p.Action == ActionRefuse {
			res.Devices[i].Status, res.Devices[i].Error = StatusFailed, p.Reason
			refused = append(refused, p.Device+": "+p.Reason)
			if len(p.Shared) > 0 {
				typ = protocol.ErrTypeProtectedDevice // IPA's error for special filesystems
			}
		}
	}
	if len(refused) > 0 {
		return res, &protocol.Error{Type: typ, Code: 500,
			Message: "erase refused before writing anything", Details: strings.Join(refused, "; ")}
	}
	if e.Opener == nil {
		return res, &protocol.Error{Type: protocol.ErrTypeProtectedDevice, Code: 500, Message: "no device guard configured"}
	}
	tr := newTracker(progress)
	for _, p := range plans {
		if p.Action == ActionErase {
			tr.add(p.Device, p.Size*uint64(max(1, passesFor(p, pol))))
		}
	}
	conc := max(1, pol.Concurrency)
	sem := make(chan struct{}, conc)
	var wg sync.WaitGroup
	for i, p := range plans {
		if p.Action != ActionErase {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				res.Devices[i].Status, res.Devices[i].Error = StatusFailed, ctx.Err().Error()
				return
			}
			defer func() { <-sem }()
			res.Devices[i] = e.eraseOne(ctx, p, pol, tr)
		}()
	}
	wg.Wait()
	res.Seconds = time.Since(start).Seconds()
	var failed []string
	for _, d := range res.Devices {
		if d.Status == StatusFailed {
			failed = append(failed, d.Plan.Device+": "+d.Error)
		}
	}
	if len(failed) > 0 {
		typ := protocol.ErrTypeBlockDeviceErase
		if errors.Is(ctx.Err(), context.Canceled) {
			typ = protocol.ErrTypeAborted
		}
		return res, &protocol.Error{Type: typ, Code: 500,
			Message: fmt.Sprintf("%d of %d devices were not erased", len(failed), len(plans)), Details: strings.Join(failed, "; ")}
	}
	return res, nil
}

func passesFor(p DevicePlan, pol Policy) int {
	if len(p.Methods) > 0 && p.Methods[0] == MethodOverwrite {
		return passes(pol)
	}
	return 1
}

func (e *Eraser) eraseOne(ctx context.Context, p DevicePlan, pol Policy, tr *tracker) DeviceResult {
	start := time.Now()
	r := DeviceResult{Plan: p, Status: StatusFailed, StartedAt: &start}
	for _, m := range p.Methods {
		if err := ctx.Err(); err != nil {
			r.Error = err.Error()
			break
		}
		t0 := time.Now()
		expect, err := e.apply(ctx, m, p, pol, tr)
		a := Attempt{Method: m}
		if m == MethodOverwrite {
			a.Passes = passes(pol)
		}
		applied := err == nil
		if err == nil {
			var v Verification
			v, err = verifyPattern(ctx, p.Device, int64(p.Size), expect, pol.VerifySamples)
			if err == nil {
				a.Verification = &v
			}
		}
		a.Seconds = time.Since(t0).Seconds()
		if err != nil {
			a.Error = err.Error()
			if applied && ctx.Err() != nil {
				// An abort arrived while the method ran: a drive command
				// (ATA security erase, NVMe format) is never interrupted,
				// so it completed; only its verification was skipped.
				a.Error = fmt.Sprintf("%s completed (it cannot be interrupted); verification skipped: %v", m, ctx.Err())
			}
			r.Attempts = append(r.Attempts, a)
			r.Error = a.Error
			// what reached the device before it stopped (an abort or an error)
			r.Bytes = tr.written(p.Device)
			if errors.Is(err, hardware.ErrProtected) || ctx.Err() != nil {
				break // a refusal by the guard is final, as is an abort
			}
			continue
		}
		r.Attempts = append(r.Attempts, a)
		r.Status, r.Method, r.Error, r.Bytes = StatusErased, m, "", p.Size
		tr.finish(p.Device)
		break
	}
	end := time.Now()
	r.Seconds, r.FinishedAt = end.Sub(start).Seconds(), &end
	return r
}

// apply runs one method and returns the pattern the device must now hold.
func (e *Eraser) apply(ctx context.Context, m Method, p DevicePlan, pol Policy, tr *tracker) (pattern, error) {
	size := int64(p.Size)
	report := func(done int64) { tr.update(p.Device, uint64(done), string(m)) }
	if fn, ok := e.applyOverride[m]; ok {
		return fn(ctx, p)
	}
	switch m {
	case MethodNVMeCrypto, MethodNVMeUserData:
		f, err := e.Opener.OpenForWrite(p.Device, 0)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		ses := uint8(nvmeSESUserData)
		if m == MethodNVMeCrypto {
			ses = nvmeSESCrypto
		}
		if err := nvmeFormat(f, p.NVMeLBAFormat, ses); err != nil {
			return nil, err
		}
		_ = rereadPartitions(f)
		report(size)
		if p.NVMeReadsOnes {
			return onesPattern{}, nil
		}
		return zeroPattern{}, nil
	case MethodATAEnhanced, MethodATA:
		f, err := e.Opener.OpenForWrite(p.Device, unix.O_NONBLOCK)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		if err := ataSecureErase(ctx, sgTransport{f: f}, m == MethodATAEnhanced); err != nil {
			return nil, err
		}
		_ = rereadPartitions(f)
		report(size)
		return zeroPattern{}, nil
	case MethodSecDiscard, MethodDiscard, MethodZeroOut:
		f, err := e.Opener.OpenForWrite(p.Device, 0)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		req := map[Method]uint{MethodSecDiscard: unix.BLKSECDISCARD, MethodDiscard: unix.BLKDISCARD, MethodZeroOut: unix.BLKZEROOUT}[m]
		const step = 1 << 30
		for off := int64(0); off < size; off += step {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			n := min(step, size-off)
			if err := rangeIoctl(f, req, uint64(off), uint64(n)); err != nil {
				return nil, fmt.Errorf("%s: %w", m, err)
			}
			report(off + n)
		}
		_ = rereadPartitions(f)
		return zeroPattern{}, nil
	case MethodOverwrite:
		return e.overwrite(ctx, p, pol, tr)
	}
	return nil, fmt.Errorf("unknown erase method %q", m)
}

func (e *Eraser) overwrite(ctx context.Context, p DevicePlan, pol Policy, tr *tracker) (pattern, error) {
	f, err := openDirectForWrite(e.Opener, p.Device)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size := int64(p.Size)
	n := passes(pol)
	var last pattern
	for i := 0; i < n; i++ {
		var pat pattern = zeroPattern{}
		if i < pol.Iterations {
			sp, err := newStreamPattern()
			if err != nil {
				return nil, err
			}
			pat = sp
		}
		if err := directio.Set(f, isBlockDevice(f)); err != nil && isBlockDevice(f) {
			return nil, err
		}
		base := int64(i) * size
		msg := fmt.Sprintf("overwrite pass %d/%d (%s)", i+1, n, pat.name())
		err := writePass(ctx, f, size, pat, func(done int64) { tr.update(p.Device, uint64(base+done), msg) })
		if err != nil {
			return nil, fmt.Errorf("%s: %w", msg, err)
		}
		last = pat
	}
	_ = rereadPartitions(f)
	return last, nil
}

// openDirectForWrite opens through the guard with O_DIRECT, falling back to
// buffered I/O where O_DIRECT is not supported (regular files on tmpfs).
func openDirectForWrite(o Opener, path string) (*os.File, error) {
	f, err := o.OpenForWrite(path, unix.O_DIRECT)
	if err == nil || errors.Is(err, hardware.ErrProtected) || !errors.Is(err, unix.EINVAL) {
		return f, err
	}
	return o.OpenForWrite(path, 0)
}

// tracker aggregates per-device progress into one report stream.
type tracker struct {
	mu    sync.Mutex
	fn    hardware.ProgressFunc
	total map[string]uint64
	done  map[string]uint64
}

func newTracker(fn hardware.ProgressFunc) *tracker {
	return &tracker{fn: fn, total: map[string]uint64{}, done: map[string]uint64{}}
}

func (t *tracker) add(dev string, total uint64) {
	t.mu.Lock()
	t.total[dev] = total
	t.mu.Unlock()
}

func (t *tracker) update(dev string, done uint64, msg string) {
	t.mu.Lock()
	if done > t.total[dev] {
		done = t.total[dev]
	}
	t.done[dev] = done
	p := t.snapshot(dev, msg)
	t.mu.Unlock()
	t.fn.Report(p)
}

// written is how many bytes the device's methods have written so far.
func (t *tracker) written(dev string) uint64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.done[dev]
}

func (t *tracker) finish(dev string) {
	t.mu.Lock()
	total := t.total[dev]
	t.mu.Unlock()
	t.update(dev, total, "verified")
}

func (t *tracker) snapshot(dev, msg string) hardware.Progress {
	var all, done uint64
	devs := make([]string, 0, len(t.total))
	for d, n := range t.total {
		all += n
		done += t.done[d]
		devs = append(devs, d)
	}
	sort.Strings(devs)
	pct := 100.0
	if all > 0 {
		pct = 100 * float64(done) / float64(all)
	}
	return hardware.Progress{Percent: pct, Message: dev + ": " + msg, Device: dev, BytesDone: done, BytesTotal: all}
}
