package burnin

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"math"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/protocol"
)

// Known answers of the CPU work unit, computed once on a sound machine:
// a CPU that gets any of them wrong is faulty (or overheating), whatever
// its load. They cover the SHA extensions or integer pipelines, the FPU
// and the multiplier.
const (
	katSHA256 = "7486da8f1e13943fae21a0b043f1e99640d7d8ebafb25266478b5cddae1272b5"
	katBasel  = 0x3ffa50a66a52dd54 // Σ 1/k², k = 1..4096, summed in order
	katLCG    = 0xac0e7187a826eb17 // 4096 rounds of PCG's multiplier and a xorshift
)

// CPUOptions is what burnin_cpu runs.
type CPUOptions struct {
	Workers  int           // 0: one per CPU the agent may run on
	Duration time.Duration // how long to keep every worker busy
	Root     string        // sysfs root for temperatures; "" = "/"
	// unit, when set, replaces the work unit (tests inject a faulty CPU).
	unit func(cpu int, buf []byte) error
}

// CPUResult is burnin_cpu's evidence: per CPU, the work units done and
// any wrong answers.
type CPUResult struct {
	Workers      int           `json:"workers"`
	Seconds      float64       `json:"seconds"`
	Planned      float64       `json:"planned_seconds"`
	Units        uint64        `json:"units"`
	UnitsPerSec  float64       `json:"units_per_second"`
	CPUs         []CPUWorker   `json:"cpus"`
	Temperatures []Temperature `json:"temperatures,omitempty"`
	Failed       []int         `json:"failed_cpus,omitempty"`
	Stopped      string        `json:"stopped,omitempty"` // why it ended early (abort)
}

// CPUWorker is one worker, pinned to one CPU (CPU -1: pinning failed and
// the scheduler chose).
type CPUWorker struct {
	CPU        int    `json:"cpu"`
	Units      uint64 `json:"units"`
	Errors     uint64 `json:"errors"`
	FirstError string `json:"first_error,omitempty"`
}

// Summary says the outcome in one line.
func (r CPUResult) Summary() string {
	what := fmt.Sprintf("%d CPU worker(s) for %.0f s: %d work units (%.0f/s), all answers right", r.Workers, r.Seconds, r.Units, r.UnitsPerSec)
	if len(r.Failed) > 0 {
		var bad []string
		for _, w := range r.CPUs {
			if w.Errors > 0 {
				bad = append(bad, fmt.Sprintf("CPU %d: %d wrong (%s)", w.CPU, w.Errors, w.FirstError))
			}
		}
		what = fmt.Sprintf("%d CPU worker(s) for %.0f s: %s", r.Workers, r.Seconds, strings.Join(bad, "; "))
	}
	if r.Stopped != "" {
		what += "; stopped: " + r.Stopped
	}
	return what + hottest(r.Temperatures)
}

// workUnit computes the known answers; a wrong one is an error naming it.
func workUnit(_ int, buf []byte) error {
	if h := sha256.Sum256(buf); hex.EncodeToString(h[:]) != katSHA256 {
		return fmt.Errorf("sha256 %x, want %s", h, katSHA256)
	}
	s := 0.0
	for k := 1; k <= 4096; k++ {
		s += 1 / float64(k*k)
	}
	if math.Float64bits(s) != katBasel {
		return fmt.Errorf("float sum %#x, want %#x", math.Float64bits(s), uint64(katBasel))
	}
	x := uint64(0x9E3779B97F4A7C15)
	for range 4096 {
		x = x*6364136223846793005 + 1442695040888963407
		x ^= x >> 29
	}
	if x != katLCG {
		return fmt.Errorf("integer chain %#x, want %#x", x, uint64(katLCG))
	}
	return nil
}

// allowedCPUs lists the CPUs the agent may run on.
func allowedCPUs() []int {
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		out := make([]int, runtime.NumCPU())
		for i := range out {
			out[i] = i
		}
		return out
	}
	var out []int
	for i := 0; i < len(set)*int(unsafe.Sizeof(set[0]))*8; i++ {
		if set.IsSet(i) {
			out = append(out, i)
		}
	}
	return out
}

// CPU runs burnin_cpu: one worker per CPU, each pinned to its CPU and
// computing known answers until the time is up. A wrong answer fails the
// step naming the CPU. Abort (ctx) stops the workers at once.
func CPU(ctx context.Context, o CPUOptions, progress hardware.ProgressFunc) (CPUResult, error) {
	cpus := allowedCPUs()
	n := o.Workers
	if n <= 0 {
		n = len(cpus)
	}
	unit := o.unit
	if unit == nil {
		unit = workUnit
	}
	root := o.Root
	if root == "" {
		root = "/"
	}
	res := CPUResult{Workers: n, Planned: o.Duration.Seconds(), CPUs: make([]CPUWorker, n)}
	therm := newThermometer(root)
	clk := newClock(progress, o.Duration)
	runCtx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	var total atomic.Uint64
	var wg sync.WaitGroup
	for i := range n {
		cpu := cpus[i%len(cpus)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			w := &res.CPUs[i]
			w.CPU = cpu
			// The thread stays locked (and pinned) until the goroutine
			// ends; Go then discards it, so the pinning cannot leak.
			runtime.LockOSThread()
			var set unix.CPUSet
			set.Set(cpu)
			if err := unix.SchedSetaffinity(0, &set); err != nil {
				w.CPU = -1
			}
			buf := make([]byte, 4096)
			for j := range buf {
				buf[j] = byte(j*7 + 3)
			}
			for runCtx.Err() == nil {
				if err := unit(cpu, buf); err != nil {
					w.Errors++
					if w.FirstError == "" {
						w.FirstError = err.Error()
					}
				}
				w.Units++
				total.Add(1)
			}
		}()
	}
	tick := time.NewTicker(reportEvery)
	defer tick.Stop()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
loop:
	for {
		select {
		case <-done:
			break loop
		case <-tick.C:
			therm.sample()
			u := total.Load()
			clk.report("", fmt.Sprintf("cpu: %d worker(s), %d units (%.0f/s)", n, u, float64(u)/clk.elapsed().Seconds()))
		}
	}
	therm.sample()
	res.Seconds = clk.elapsed().Seconds()
	res.Units = total.Load()
	if res.Seconds > 0 {
		res.UnitsPerSec = float64(res.Units) / res.Seconds
	}
	res.Temperatures = therm.result()
	for _, w := range res.CPUs {
		if w.Errors > 0 {
			res.Failed = append(res.Failed, w.CPU)
		}
	}
	if err := ctx.Err(); err != nil {
		res.Stopped = err.Error()
		return res, stopped(ctx, "burnin_cpu", fmt.Sprintf("stopped after %.0f of %.0f s", res.Seconds, res.Planned))
	}
	if len(res.Failed) > 0 {
		return res, &protocol.Error{Type: protocol.ErrTypeInternal, Code: 500,
			Message: fmt.Sprintf("burnin_cpu: wrong answers on CPU(s) %v", res.Failed)}
	}
	return res, nil
}

// stopped is the error of a burn-in that its context ended: abort (the
// node goes to clean failed with the partial result) or the agent
// shutting down.
func stopped(ctx context.Context, step, what string) error {
	typ := protocol.ErrTypeInternal
	if ctx.Err() == context.Canceled {
		typ = protocol.ErrTypeAborted
	}
	return &protocol.Error{Type: typ, Code: 500, Message: fmt.Sprintf("%s %s: %v", step, what, ctx.Err())}
}
