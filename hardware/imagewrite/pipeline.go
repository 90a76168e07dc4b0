package imagewrite

import (
	"context"
	"fmt"
	"hash"
	"io"
	"os"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/anvil-metal/anvil/hardware/internal/directio"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// The write path is a pipeline of goroutines joined by channels of blocks:
//
//	download ──┬──> hash                       (bytes as downloaded)
//	           └──> [decode] ──> device write  (raw: the same blocks)
//
// so the network (and decompression), the checksum and the device work at
// the same time instead of adding up. Memory is bounded by two small pools
// of reusable 4 MiB buffers aligned for O_DIRECT; a downloaded block goes
// back to its pool when both the hasher and its consumer are done with it.

// chunk is the unit of reading and writing. 4 MiB O_DIRECT writes keep a
// device queue full (the benchmark compares with dd bs=4M oflag=direct).
const chunk = 4 << 20

// Buffers per pool: enough for every stage to hold one while the next is
// queued, so no stage waits for a buffer while another is idle.
const poolBuffers = 6

// arenas keeps a Writer's buffer memory from one write to the next. Fresh
// memory costs a page fault per 4 KiB page on first touch: the 24 MiB of a
// raw write are ~6,000 faults, measured at 60–80 ms of CPU on this
// project's VMs (the host backs guest memory lazily), a fixed cost paid
// again on every write when the memory went back to the OS in between.
// Memory is handed back only after every stage of a write has stopped.
type arenas struct {
	mu   sync.Mutex
	free [][]byte
}

// take returns n bytes of aligned memory, reused when a previous write
// gave back a region of that size.
func (a *arenas) take(n int) []byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	for i, m := range a.free {
		if len(m) == n {
			a.free = append(a.free[:i], a.free[i+1:]...)
			return m
		}
	}
	// Go memory (aligned by hand), not an mmap: a goroutine still inside a
	// Read when the pipeline fails must never touch unmapped memory.
	return alignedHeap(n)
}

// give keeps m for the next write. At most maxArenas regions are kept
// (one write's worth: download and decode pools), so concurrent writes
// cannot grow what stays allocated.
func (a *arenas) give(m []byte) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.free) < maxArenas {
		a.free = append(a.free, m)
	}
}

const maxArenas = 2

// pool hands out reusable aligned buffers.
type pool struct{ free chan []byte }

// newPool cuts mem into len(mem)/size buffers.
func newPool(mem []byte, size int) *pool {
	n := len(mem) / size
	p := &pool{free: make(chan []byte, n)}
	for i := 0; i < n; i++ {
		p.free <- mem[i*size : (i+1)*size : (i+1)*size]
	}
	return p
}

func (p *pool) get(ctx context.Context) ([]byte, error) {
	select {
	case b := <-p.free:
		return b, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// block is a piece of the image in a pooled buffer: downloaded bytes, or
// bytes for the device at off.
type block struct {
	buf  []byte
	n    int
	off  int64
	refs atomic.Int32 // consumers still using buf
	pool *pool
}

func (b *block) data() []byte { return b.buf[:b.n] }

// release returns the buffer to its pool once every consumer is done.
func (b *block) release() {
	if b.refs.Add(-1) == 0 {
		b.pool.free <- b.buf
	}
}

// send delivers b on ch unless the pipeline stopped.
func send(ctx context.Context, ch chan<- *block, b *block) error {
	select {
	case ch <- b:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// download reads body into blocks of the pool (the first one already
// read by the caller to detect the format) and hands each to the hasher
// (when hashCh is not nil) and to next. It closes both channels, and
// checks the body's length against the announced one.
func download(ctx context.Context, body io.Reader, first *block, p *pool, total int64, counted *atomic.Int64, hashCh, next chan<- *block) error {
	defer close(next)
	if hashCh != nil {
		defer close(hashCh)
	}
	var off int64
	b := first
	for {
		if b == nil {
			buf, err := p.get(ctx)
			if err != nil {
				return err
			}
			b = &block{buf: buf, pool: p}
			n, err := io.ReadFull(body, buf)
			b.n = n
			counted.Add(int64(n))
			if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
				b.refs.Store(1)
				b.release()
				return fmt.Errorf("download: %w", err)
			}
		}
		if b.n == 0 {
			b.refs.Store(1)
			b.release()
			break
		}
		b.off = off
		off += int64(b.n)
		last := b.n < len(b.buf)
		consumers := int32(1)
		if hashCh != nil {
			consumers++
		}
		b.refs.Store(consumers)
		if hashCh != nil {
			if err := send(ctx, hashCh, b); err != nil {
				return err
			}
		}
		if err := send(ctx, next, b); err != nil {
			return err
		}
		if last {
			break
		}
		b = nil
	}
	if total >= 0 && off != total {
		return fmt.Errorf("short read: got %d of %d bytes", off, total)
	}
	return nil
}

// hashBlocks feeds every downloaded block, in order, to h.
func hashBlocks(ch <-chan *block, h hash.Hash) error {
	for b := range ch {
		h.Write(b.data())
		b.release()
	}
	return nil
}

// blockReader turns a channel of downloaded blocks back into a stream for
// the decompressors and the qcow2 reader, releasing blocks as it goes.
type blockReader struct {
	ctx context.Context
	ch  <-chan *block
	cur *block
	pos int
}

func (r *blockReader) Read(p []byte) (int, error) {
	for r.cur == nil || r.pos == r.cur.n {
		if r.cur != nil {
			r.cur.release()
			r.cur = nil
		}
		select {
		case b, ok := <-r.ch:
			if !ok {
				return 0, io.EOF
			}
			r.cur, r.pos = b, 0
		case <-r.ctx.Done():
			return 0, r.ctx.Err()
		}
	}
	n := copy(p, r.cur.buf[r.pos:r.cur.n])
	r.pos += n
	return n, nil
}

// drain consumes what the decoder did not need (gzip padding, qcow2
// clusters nothing maps) so the hasher still sees the whole download.
func (r *blockReader) drain() error {
	_, err := io.Copy(io.Discard, r)
	return err
}

// streamOut cuts a decoded stream into device blocks written from offset 0.
func streamOut(ctx context.Context, src io.Reader, p *pool, out chan<- *block) error {
	defer close(out)
	var off int64
	for {
		buf, err := p.get(ctx)
		if err != nil {
			return err
		}
		n, err := io.ReadFull(src, buf)
		b := &block{buf: buf, n: n, off: off, pool: p}
		b.refs.Store(1)
		if n == 0 {
			b.release()
		} else if serr := send(ctx, out, b); serr != nil {
			return serr
		}
		off += int64(n)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read image: %w", err)
		}
	}
}

// device is the target, opened through the guard.
type device struct {
	f      *os.File
	size   int64
	direct bool // opened with O_DIRECT
	// mu lets aligned writes run together (read lock) and gives an
	// unaligned one the file to itself (write lock) while it drops
	// O_DIRECT: the flag belongs to the open file, shared by all writers.
	mu    sync.RWMutex
	wrote atomic.Int64
	// touched: a write was started, whether or not it completed; a
	// failed write may still have changed the disk.
	touched atomic.Bool
}

// writeAt writes one block's bytes; safe for concurrent use on disjoint
// ranges. O_DIRECT needs offsets and lengths in whole blocks: anything
// else (an image's ragged tail, 512-byte qcow2 clusters) is written
// buffered, and the final fsync covers it.
func (d *device) writeAt(p []byte, off int64) error {
	if off+int64(len(p)) > d.size {
		return fmt.Errorf("image is larger than the device (%d bytes): stopped at %d", d.size, off)
	}
	aligned := off%4096 == 0 && len(p)%4096 == 0 && uintptr(unsafe.Pointer(unsafe.SliceData(p)))%4096 == 0
	if d.direct && !aligned {
		d.mu.Lock()
		defer d.mu.Unlock()
		if err := directio.Set(d.f, false); err != nil {
			return err
		}
		// Should turning it back on fail, later aligned writes are merely
		// buffered: still correct, the final fsync covers them.
		defer func() { _ = directio.Set(d.f, true) }()
	} else {
		d.mu.RLock()
		defer d.mu.RUnlock()
	}
	d.touched.Store(true)
	if _, err := d.f.WriteAt(p, off); err != nil {
		return fmt.Errorf("write at %d: %w", off, err)
	}
	d.wrote.Add(int64(len(p)))
	return nil
}

// writeDepth is how many device writes are in flight. One synchronous
// writer leaves the device idle between a write's completion and the
// next submission; two overlap them (see the erase package's writeDepth
// for the measurements on the same loop device).
const writeDepth = 2

// writeBlocks is the device stage: writeDepth writers take blocks in turn
// and write each at its offset (blocks never overlap). It returns at the
// first error without waiting for more blocks.
func writeBlocks(ctx context.Context, d *device, ch <-chan *block, progress func()) error {
	var (
		reporting sync.Mutex
		last      = time.Now()
	)
	report := func() {
		if !reporting.TryLock() {
			return // the other writer is reporting
		}
		defer reporting.Unlock()
		if time.Since(last) > 500*time.Millisecond {
			progress()
			last = time.Now()
		}
	}
	g, gctx := errgroup.WithContext(ctx)
	for range writeDepth {
		g.Go(func() error {
			for {
				var b *block
				select {
				case b = <-ch:
				case <-gctx.Done():
					return gctx.Err()
				}
				if b == nil {
					return nil // closed: every block was taken
				}
				err := d.writeAt(b.data(), b.off)
				b.release()
				if err != nil {
					return err
				}
				report()
			}
		})
	}
	return g.Wait()
}

// zeroRange makes [off, off+n) of the device read as zeros: BLKZEROOUT on
// a block device (offloaded, or at least done by the kernel without our
// buffers), FALLOC_FL_ZERO_RANGE on a file, explicit zero writes if
// neither is supported.
func (d *device) zeroRange(off, n int64) error {
	if n <= 0 {
		return nil
	}
	if off+n > d.size {
		return fmt.Errorf("zero %d bytes at %d: beyond the device (%d bytes)", n, off, d.size)
	}
	st, err := d.f.Stat()
	if err != nil {
		return err
	}
	switch {
	case st.Mode()&os.ModeDevice != 0 && off%512 == 0 && n%512 == 0:
		r := [2]uint64{uint64(off), uint64(n)}
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, d.f.Fd(), unix.BLKZEROOUT, uintptr(unsafe.Pointer(&r[0]))); e == 0 {
			return nil
		}
	case st.Mode().IsRegular():
		if err := unix.Fallocate(int(d.f.Fd()), unix.FALLOC_FL_ZERO_RANGE|unix.FALLOC_FL_KEEP_SIZE, off, n); err == nil {
			return nil
		}
	}
	zero := alignedHeap(min(n, 1<<20))
	for done := int64(0); done < n; {
		m := min(int64(len(zero)), n-done)
		if err := d.writeAt(zero[:m], off+done); err != nil {
			return err
		}
		done += m
	}
	return nil
}

// alignedHeap returns n bytes of Go memory starting on a 4096-byte boundary.
func alignedHeap[N int | int64](n N) []byte {
	raw := make([]byte, int(n)+4096)
	off := int(4096-uintptr(unsafe.Pointer(&raw[0]))%4096) % 4096
	return raw[off : off+int(n) : off+int(n)]
}
