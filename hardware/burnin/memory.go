package burnin

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/protocol"
)

// AgentReserve is memory a percentage leaves to the agent and the kernel:
// stress-ng's 98% runs in its own process, which the OOM killer may take;
// here the agent itself allocates, and must survive to report.
const AgentReserve = 64 << 20

// maxReported bounds the failing words kept in a result.
const maxReported = 16

// MemoryOptions is what burnin_memory runs.
type MemoryOptions struct {
	Workers  int           // 0: one per CPU
	Bytes    uint64        // memory to test, shared by the workers
	Duration time.Duration // passes repeat until it is over
	Root     string        // "/" on the node: /proc/self/pagemap, DMI and sensors
	// corrupt, when set, runs between a pattern's write and its check
	// (tests flip a bit as a bad DIMM would).
	corrupt func(words []uint64)
}

// MemoryResult is burnin_memory's evidence.
type MemoryResult struct {
	Bytes         uint64        `json:"bytes"`
	Workers       int           `json:"workers"`
	Locked        bool          `json:"locked"` // mlock held the pages in RAM
	Seconds       float64       `json:"seconds"`
	Planned       float64       `json:"planned_seconds"`
	Passes        float64       `json:"passes"` // full passes of every pattern, fractional
	BytesVerified uint64        `json:"bytes_verified"`
	MBPerSecond   float64       `json:"mb_per_second"` // written and read back
	Patterns      []string      `json:"patterns"`
	Errors        uint64        `json:"errors"`
	Failures      []MemoryError `json:"failures,omitempty"`
	Temperatures  []Temperature `json:"temperatures,omitempty"`
	Stopped       string        `json:"stopped,omitempty"`
}

// MemoryError is one word that read back wrong: where it is, physically
// and (when the firmware's DMI tables map it) on which DIMM.
type MemoryError struct {
	Pattern  string `json:"pattern"`
	Virtual  string `json:"virtual_address"`
	Physical string `json:"physical_address,omitempty"`
	DIMM     string `json:"dimm,omitempty"`
	Expected string `json:"expected"`
	Got      string `json:"got"`
}

// Summary says the outcome in one line.
func (r MemoryResult) Summary() string {
	s := fmt.Sprintf("%.0f MB with %d worker(s) for %.0f s: %.2f passes of %s, %.0f MB/s", float64(r.Bytes)/1e6, r.Workers, r.Seconds, r.Passes, strings.Join(r.Patterns, ", "), r.MBPerSecond)
	if r.Errors > 0 {
		f := r.Failures[0]
		where := f.Physical
		if where == "" {
			where = "virtual " + f.Virtual
		} else {
			where = "physical " + where
		}
		if f.DIMM != "" {
			where += " on " + f.DIMM
		}
		s += fmt.Sprintf("; %d word(s) wrong, first at %s (%s: %s, want %s)", r.Errors, where, f.Pattern, f.Got, f.Expected)
		if lo, hi, ok := r.physicalRange(); ok {
			s += fmt.Sprintf("; physical range %#x–%#x", lo, hi)
		}
	} else {
		s += ", no errors"
	}
	if r.Stopped != "" {
		s += "; stopped: " + r.Stopped
	}
	return s + hottest(r.Temperatures)
}

func (r MemoryResult) physicalRange() (lo, hi uint64, ok bool) {
	for _, f := range r.Failures {
		p, err := strconv.ParseUint(strings.TrimPrefix(f.Physical, "0x"), 16, 64)
		if err != nil {
			continue
		}
		if !ok || p < lo {
			lo = p
		}
		if !ok || p > hi {
			hi = p
		}
		ok = true
	}
	return lo, hi, ok
}

// pattern fills or checks words: value gives the word at index i of a
// worker's region starting at virtual address base.
type pattern struct {
	name  string
	value func(base uintptr, i int, pass uint64) uint64
}

func patterns() []pattern {
	return []pattern{
		// walking ones: each bit of each word is set and cleared in turn
		// across passes, and neighbours differ (stuck and coupled bits).
		{"walking-ones", func(_ uintptr, i int, pass uint64) uint64 { return 1 << ((uint64(i) + pass) % 64) }},
		// each word holds its own address: a word written somewhere else
		// (address lines) reads back wrong.
		{"own-address", func(base uintptr, i int, pass uint64) uint64 { return uint64(base) + uint64(i)*8 ^ pass }},
		// random words from a seed, regenerated to check (data-dependent faults)
		{"random", func(_ uintptr, i int, pass uint64) uint64 { return mix(uint64(i) ^ pass<<40) }},
		// the same, every bit inverted
		{"random-inverted", func(_ uintptr, i int, pass uint64) uint64 { return ^mix(uint64(i) ^ pass<<40) }},
	}
}

// mix is splitmix64's finaliser: a seeded, reproducible random word.
func mix(x uint64) uint64 {
	x += 0x9E3779B97F4A7C15
	x = (x ^ x>>30) * 0xBF58476D1CE4E5B9
	x = (x ^ x>>27) * 0x94D049BB133111EB
	return x ^ x>>31
}

// MemAvailable reads MemAvailable from /proc/meminfo under root.
func MemAvailable(root string) (uint64, error) {
	f, err := os.Open(filepath.Join(root, "proc/meminfo"))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) >= 2 && fields[0] == "MemAvailable:" {
			kb, err := strconv.ParseUint(fields[1], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("meminfo: %w", err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("%s: no MemAvailable", f.Name())
}

const chunkWords = 1 << 17 // 1 MiB: the time and abort check interval

// Memory runs burnin_memory: the requested bytes are mapped (and locked
// in RAM when the kernel allows), split between the workers, and every
// pattern is written through and read back, pass after pass, until the
// time is up. Abort (ctx) stops within a MiB.
func Memory(ctx context.Context, o MemoryOptions, progress hardware.ProgressFunc) (MemoryResult, error) {
	root := o.Root
	if root == "" {
		root = "/"
	}
	n := o.Workers
	if n <= 0 {
		n = len(allowedCPUs())
	}
	pats := patterns()
	res := MemoryResult{Workers: n, Planned: o.Duration.Seconds()}
	for _, p := range pats {
		res.Patterns = append(res.Patterns, p.name)
	}
	size := int(o.Bytes / 8 / uint64(n) * 8 * uint64(n))
	if size < 8*n {
		return res, &protocol.Error{Type: protocol.ErrTypeInvalidArgs, Code: 400, Message: fmt.Sprintf("burnin_memory: %d bytes is too little for %d worker(s)", o.Bytes, n)}
	}
	mem, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS|unix.MAP_NORESERVE)
	if err != nil {
		return res, &protocol.Error{Type: protocol.ErrTypeInternal, Code: 500, Message: fmt.Sprintf("burnin_memory: map %d bytes: %v", size, err)}
	}
	defer unix.Munmap(mem)
	res.Bytes = uint64(size)
	// Locked pages stay in RAM at fixed physical addresses, so a failing
	// address found by pagemap is still the failing one.
	res.Locked = unix.Mlock(mem) == nil
	if res.Locked {
		defer unix.Munlock(mem)
	}
	words := unsafe.Slice((*uint64)(unsafe.Pointer(&mem[0])), size/8)
	per := len(words) / n
	therm := newThermometer(root)
	clk := newClock(progress, o.Duration)
	var verified atomic.Uint64
	var mu sync.Mutex
	record := func(pat string, w []uint64, i int, want, got uint64) {
		mu.Lock()
		defer mu.Unlock()
		res.Errors++
		if len(res.Failures) >= maxReported {
			return
		}
		va := uintptr(unsafe.Pointer(&w[i]))
		e := MemoryError{Pattern: pat, Virtual: fmt.Sprintf("%#x", va), Expected: fmt.Sprintf("%#016x", want), Got: fmt.Sprintf("%#016x", got)}
		if pa, ok := physical(root, va); ok {
			e.Physical = fmt.Sprintf("%#x", pa)
			e.DIMM = DIMMAt(root, pa)
		}
		res.Failures = append(res.Failures, e)
	}
	var wg sync.WaitGroup
	for k := range n {
		region := words[k*per : (k+1)*per]
		wg.Add(1)
		go func() {
			defer wg.Done()
			base := uintptr(unsafe.Pointer(&region[0]))
			for pass := uint64(0); ; pass++ {
				for _, p := range pats {
					for c := 0; c < len(region); c += chunkWords {
						if ctx.Err() != nil || clk.over() {
							return
						}
						w := region[c:min(c+chunkWords, len(region))]
						off := c
						for i := range w {
							w[i] = p.value(base, off+i, pass)
						}
					}
					if o.corrupt != nil {
						o.corrupt(region)
					}
					for c := 0; c < len(region); c += chunkWords {
						if ctx.Err() != nil || clk.over() {
							return
						}
						w := region[c:min(c+chunkWords, len(region))]
						for i, got := range w {
							if want := p.value(base, c+i, pass); got != want {
								record(p.name, w, i, want, got)
							}
						}
						verified.Add(uint64(len(w)) * 8)
					}
				}
			}
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(reportEvery)
	defer tick.Stop()
loop:
	for {
		select {
		case <-done:
			break loop
		case <-tick.C:
			therm.sample()
			mu.Lock()
			errs := res.Errors
			mu.Unlock()
			v := verified.Load()
			clk.report("", fmt.Sprintf("memory: %.0f MB, %.2f passes verified, %d error(s)", float64(size)/1e6, float64(v)/float64(size)/float64(len(pats)), errs))
		}
	}
	therm.sample()
	res.Temperatures = therm.result()
	res.Seconds = clk.elapsed().Seconds()
	res.BytesVerified = verified.Load()
	res.Passes = float64(res.BytesVerified) / float64(size) / float64(len(pats))
	if res.Seconds > 0 {
		res.MBPerSecond = 2 * float64(res.BytesVerified) / 1e6 / res.Seconds
	}
	if err := ctx.Err(); err != nil {
		res.Stopped = err.Error()
		return res, stopped(ctx, "burnin_memory", fmt.Sprintf("stopped after %.0f of %.0f s", res.Seconds, res.Planned))
	}
	if res.Errors > 0 {
		return res, &protocol.Error{Type: protocol.ErrTypeInternal, Code: 500,
			Message: fmt.Sprintf("burnin_memory: %d word(s) read back wrong", res.Errors)}
	}
	return res, nil
}

// physical translates a virtual address of this process through
// /proc/self/pagemap (the frame number needs CAP_SYS_ADMIN, which the
// agent has; without it the kernel reports 0 and we say nothing).
func physical(root string, va uintptr) (uint64, bool) {
	f, err := os.Open(filepath.Join(root, "proc/self/pagemap"))
	if err != nil {
		return 0, false
	}
	defer f.Close()
	page := uintptr(os.Getpagesize())
	var b [8]byte
	if _, err := f.ReadAt(b[:], int64(va/page*8)); err != nil {
		return 0, false
	}
	e := uint64(b[0]) | uint64(b[1])<<8 | uint64(b[2])<<16 | uint64(b[3])<<24 | uint64(b[4])<<32 | uint64(b[5])<<40 | uint64(b[6])<<48 | uint64(b[7])<<56
	pfn := e & (1<<55 - 1)
	if e&(1<<63) == 0 || pfn == 0 {
		return 0, false
	}
	return pfn*uint64(page) + uint64(va%page), true
}
