package burnin

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/internal/directio"
	"github.com/anvil-metal/anvil/protocol"
)

// Opener opens a device for writing; the agent's hardware.Guard is the
// one, so burnin_disk writes only where an erase may.
type Opener interface {
	OpenForWrite(path string, flag int) (*os.File, error)
}

// DiskOptions is what burnin_disk runs.
type DiskOptions struct {
	Loops   int           // passes over each disk when Runtime is 0
	Runtime time.Duration // > 0: passes repeat until it is over (fio --time_based)
	Devices []string      // the disks to test
	// Skip gives the devices of Devices not to test, with the reason
	// (optical, read-only); they are reported as skipped.
	Skip map[string]string
	// Serials names the disks in the result and in errors, by path.
	Serials map[string]string
	Opener  Opener
	// Segment is the bytes written then read back at a time; 0 = 4 MiB.
	Segment int
}

// Disk statuses.
const (
	DiskPassed  = "passed"
	DiskFailed  = "failed"
	DiskSkipped = "skipped"
)

// DiskResult is burnin_disk's evidence, per disk.
type DiskResult struct {
	Seconds float64          `json:"seconds"`
	Loops   int              `json:"loops,omitempty"`
	Runtime float64          `json:"runtime_seconds,omitempty"`
	Devices []DiskDeviceTest `json:"devices"`
	Stopped string           `json:"stopped,omitempty"`
}

// DiskDeviceTest is one disk's burn-in.
type DiskDeviceTest struct {
	Device       string     `json:"device"`
	Serial       string     `json:"serial,omitempty"`
	Size         uint64     `json:"size"`
	Status       string     `json:"status"`
	Error        string     `json:"error,omitempty"`
	Passes       float64    `json:"passes"`
	BytesWritten uint64     `json:"bytes_written"`
	BytesRead    uint64     `json:"bytes_verified"`
	WriteMBps    float64    `json:"write_mb_per_second"`
	ReadMBps     float64    `json:"read_mb_per_second"`
	Mismatches   uint64     `json:"mismatched_blocks"`
	Direct       bool       `json:"direct_io"`
	Failures     []DiskFail `json:"failures,omitempty"`
	Seconds      float64    `json:"seconds"`
}

// name is the device with its serial, as an operator finds it in the rack.
func (d DiskDeviceTest) name() string {
	if d.Serial != "" {
		return fmt.Sprintf("%s (serial %s)", d.Device, d.Serial)
	}
	return d.Device
}

// DiskFail is one failed I/O or block that read back wrong.
type DiskFail struct {
	Op     string `json:"op"` // write, read or verify
	Offset uint64 `json:"offset"`
	Error  string `json:"error"`
}

// Summary says per disk what the burn-in saw.
func (r DiskResult) Summary() string {
	if len(r.Devices) == 0 {
		return "no disks to burn in"
	}
	parts := make([]string, len(r.Devices))
	for i, d := range r.Devices {
		switch d.Status {
		case DiskSkipped:
			parts[i] = fmt.Sprintf("%s skipped: %s", d.Device, d.Error)
		case DiskPassed:
			parts[i] = fmt.Sprintf("%s passed: %.2f passes, write %.0f MB/s, read %.0f MB/s", d.Device, d.Passes, d.WriteMBps, d.ReadMBps)
		default:
			parts[i] = fmt.Sprintf("%s failed after %.2f passes: %s", d.name(), d.Passes, d.Error)
		}
	}
	s := strings.Join(parts, "; ")
	if r.Stopped != "" {
		s += "; stopped: " + r.Stopped
	}
	return s
}

const (
	block       = 4096
	maxFailures = 16
)

// fill writes the pattern of the blocks at byte offset off in pass loop:
// each 8-byte word is a function of its own disk offset and the pass, so
// a block written to the wrong place, a stale block from an earlier pass
// and a flipped bit all read back wrong.
func fill(buf []byte, off uint64, loop int) {
	seed := uint64(loop+1) * 0x9E3779B97F4A7C15
	for i := 0; i+8 <= len(buf); i += 8 {
		binary.LittleEndian.PutUint64(buf[i:], (off+uint64(i))^seed)
	}
}

// check returns the offset of the first wrong block in buf, or -1.
func check(buf []byte, off uint64, loop int) int {
	seed := uint64(loop+1) * 0x9E3779B97F4A7C15
	for i := 0; i+8 <= len(buf); i += 8 {
		if binary.LittleEndian.Uint64(buf[i:]) != (off+uint64(i))^seed {
			return i / block * block
		}
	}
	return -1
}

// Disk runs burnin_disk: on every disk at once (as IPA runs one fio job
// per disk), each segment is written with O_DIRECT, read back and
// verified, over the whole disk, Loops times or until Runtime is over. An
// I/O error ends that disk's test (a failing disk retries for minutes per
// request); wrong data is counted and the test goes on. Abort (ctx)
// stops every disk within a segment.
func Disk(ctx context.Context, o DiskOptions, progress hardware.ProgressFunc) (DiskResult, error) {
	res := DiskResult{Loops: o.Loops, Runtime: o.Runtime.Seconds(), Devices: make([]DiskDeviceTest, len(o.Devices))}
	if o.Runtime > 0 {
		res.Loops = 0
	}
	seg := o.Segment
	if seg <= 0 {
		seg = 4 << 20
	}
	clk := newClock(nil, o.Runtime)
	var done, total atomic.Uint64
	type opened struct {
		f    *os.File
		size uint64
	}
	files := make([]opened, len(o.Devices))
	for i, dev := range o.Devices {
		d := &res.Devices[i]
		d.Device, d.Serial = dev, o.Serials[dev]
		if why, ok := o.Skip[dev]; ok {
			d.Status, d.Error = DiskSkipped, why
			continue
		}
		f, err := o.Opener.OpenForWrite(dev, 0)
		if err != nil {
			d.Status, d.Error = DiskSkipped, err.Error()
			continue
		}
		end, err := f.Seek(0, io.SeekEnd)
		if err != nil || end < block {
			f.Close()
			d.Status, d.Error = DiskFailed, fmt.Sprintf("size unknown or below %d bytes (%d): %v", block, end, err)
			continue
		}
		d.Size = uint64(end)
		files[i] = opened{f, uint64(end) / block * block}
		total.Add(files[i].size * uint64(max(o.Loops, 1)) * 2)
	}
	var wg sync.WaitGroup
	for i := range o.Devices {
		if files[i].f == nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer files[i].f.Close()
			burnDisk(ctx, files[i].f, files[i].size, o, seg, clk, &res.Devices[i], &done)
		}()
	}
	finished := make(chan struct{})
	go func() { wg.Wait(); close(finished) }()
	tick := time.NewTicker(reportEvery)
	defer tick.Stop()
loop:
	for {
		select {
		case <-finished:
			break loop
		case <-tick.C:
			reportDisk(progress, clk, o, done.Load(), total.Load())
		}
	}
	res.Seconds = clk.elapsed().Seconds()
	var failed, tested []string
	for _, d := range res.Devices {
		switch d.Status {
		case DiskFailed:
			failed = append(failed, d.name()+": "+d.Error)
			tested = append(tested, d.Device)
		case DiskPassed:
			tested = append(tested, d.Device)
		}
	}
	if err := ctx.Err(); err != nil {
		res.Stopped = err.Error()
		return res, stopped(ctx, "burnin_disk", fmt.Sprintf("stopped after %.0f s", res.Seconds))
	}
	if len(failed) > 0 {
		return res, &protocol.Error{Type: protocol.ErrTypeInternal, Code: 500,
			Message: fmt.Sprintf("burnin_disk failed on %d of %d disk(s) tested: %s", len(failed), len(tested), strings.Join(failed, "; "))}
	}
	if len(tested) == 0 {
		return res, &protocol.Error{Type: protocol.ErrTypeProtectedDevice, Code: 403, Message: "burnin_disk tested no disk: " + res.Summary()}
	}
	return res, nil
}

func reportDisk(progress hardware.ProgressFunc, clk clock, o DiskOptions, done, total uint64) {
	if o.Runtime > 0 {
		c := clk
		c.fn = progress
		c.report("", fmt.Sprintf("disks: %.0f MB written and verified", float64(done)/2e6))
		return
	}
	p := hardware.Progress{BytesDone: min(done, total), BytesTotal: total}
	el := clk.elapsed()
	msg := fmt.Sprintf("disks: %d loop(s), %.0f of %.0f MB written and verified", o.Loops, float64(done)/2e6, float64(total)/2e6)
	if total > 0 {
		p.Percent = 100 * float64(p.BytesDone) / float64(total)
		if done > 0 {
			msg += fmt.Sprintf(", %s left", remaining(time.Duration(float64(el)*float64(total-p.BytesDone)/float64(done))))
		}
	}
	p.Message = msg
	progress.Report(p)
}

// burnDisk runs the passes on one disk, recording into d.
func burnDisk(ctx context.Context, f *os.File, size uint64, o DiskOptions, seg int, clk clock, d *DiskDeviceTest, done *atomic.Uint64) {
	start := time.Now()
	var wtime, rtime time.Duration
	defer func() {
		d.Seconds = time.Since(start).Seconds()
		if wtime > 0 {
			d.WriteMBps = float64(d.BytesWritten) / 1e6 / wtime.Seconds()
		}
		if rtime > 0 {
			d.ReadMBps = float64(d.BytesRead) / 1e6 / rtime.Seconds()
		}
		d.Passes = float64(d.BytesRead) / float64(size)
		if d.Status == "" {
			d.Status = DiskPassed
			if d.Mismatches > 0 {
				d.Status = DiskFailed
				d.Error = fmt.Sprintf("%d block(s) read back wrong, first at offset %d", d.Mismatches, d.Failures[0].Offset)
			}
		}
	}()
	wbuf, freeW, err := aligned(seg)
	if err != nil {
		d.Status, d.Error = DiskFailed, err.Error()
		return
	}
	defer freeW()
	rbuf, freeR, err := aligned(seg)
	if err != nil {
		d.Status, d.Error = DiskFailed, err.Error()
		return
	}
	defer freeR()
	// O_DIRECT: the data read back comes from the disk, not the page
	// cache. Block devices take it; a file on tmpfs would not.
	d.Direct = directio.Set(f, true) == nil
	fail := func(op string, off uint64, err error) {
		d.Status = DiskFailed
		d.Error = fmt.Sprintf("%s at offset %d: %v", op, off, err)
		d.Failures = append(d.Failures, DiskFail{Op: op, Offset: off, Error: err.Error()})
	}
	for loop := 0; o.Runtime > 0 || loop < o.Loops; loop++ {
		for off := uint64(0); off < size; off += uint64(seg) {
			if ctx.Err() != nil || clk.over() {
				if ctx.Err() != nil {
					d.Status, d.Error = DiskFailed, "stopped: "+ctx.Err().Error()
				}
				return
			}
			n := int(min(uint64(seg), size-off))
			w, r := wbuf[:n], rbuf[:n]
			fill(w, off, loop)
			t := time.Now()
			if _, err := f.WriteAt(w, int64(off)); err != nil {
				fail("write", off, err)
				return
			}
			wtime += time.Since(t)
			d.BytesWritten += uint64(n)
			t = time.Now()
			if _, err := f.ReadAt(r, int64(off)); err != nil && !errors.Is(err, io.EOF) {
				fail("read", off, err)
				return
			}
			rtime += time.Since(t)
			d.BytesRead += uint64(n)
			done.Add(2 * uint64(n))
			for b := check(r, off, loop); b >= 0; {
				d.Mismatches++
				if len(d.Failures) < maxFailures {
					d.Failures = append(d.Failures, DiskFail{Op: "verify", Offset: off + uint64(b), Error: "block read back differs from what was written"})
				}
				next := check(r[b+block:], off+uint64(b+block), loop)
				if next < 0 {
					break
				}
				b += block + next
			}
		}
	}
	if err := f.Sync(); err != nil {
		fail("flush", 0, err)
	}
}

func aligned(n int) ([]byte, func(), error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, nil, fmt.Errorf("allocate %d-byte aligned buffer: %w", n, err)
	}
	return b, func() { _ = unix.Munmap(b) }, nil
}
