package erase

import (
	"bytes"
	"context"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"time"

	"github.com/anvil-metal/anvil/hardware/internal/directio"
)

// chunkSize is the write size of overwrites: large enough that O_DIRECT
// writes keep the device queue full (4 MiB matches dd bs=4M in the
// benchmark), small enough for responsive cancellation and progress.
const chunkSize = 8 << 20

// pattern produces the bytes a pass writes at a given offset, so that the
// verifier can recompute what must be on the disk anywhere.
type pattern interface {
	fill(buf []byte, off int64)
	name() string
}

type zeroPattern struct{}

func (zeroPattern) fill(buf []byte, _ int64) { clear(buf) }
func (zeroPattern) name() string             { return "zero" }

// streamPattern is an AES-CTR keystream indexed by byte offset: random-looking
// data that is cheap to produce (AES-NI) and can be regenerated at any offset
// for verification, which a math/rand stream could not do without replaying.
type streamPattern struct{ block cipher.Block }

func newStreamPattern() (*streamPattern, error) {
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return &streamPattern{block: b}, nil
}

func (p *streamPattern) fill(buf []byte, off int64) {
	// Offsets we use are multiples of 16, so the counter is off/16.
	var iv [16]byte
	binary.BigEndian.PutUint64(iv[8:], uint64(off/16))
	clear(buf)
	cipher.NewCTR(p.block, iv[:]).XORKeyStream(buf, buf)
}
func (p *streamPattern) name() string { return "random" }

// writePass writes pattern p over the whole device with O_DIRECT when the
// device allows it. The file must have been opened through the Guard;
// direct tells whether it was opened with O_DIRECT (then every write must be
// block-aligned, which chunkSize and the device size guarantee except for a
// ragged tail, written after dropping O_DIRECT).
func writePass(ctx context.Context, f *os.File, size int64, p pattern, progress func(done int64)) error {
	buf, free, err := alignedBuffer(chunkSize)
	if err != nil {
		return err
	}
	defer free()
	_, isZero := p.(zeroPattern)
	if isZero {
		p.fill(buf, 0)
	}
	var off int64
	last := time.Now()
	for off < size {
		if err := ctx.Err(); err != nil {
			return err
		}
		n := int64(len(buf))
		if size-off < n {
			n = size - off
		}
		if !isZero {
			p.fill(buf[:n], off)
		}
		if n%4096 != 0 {
			// Ragged tail: O_DIRECT needs block-sized writes.
			if err := directio.Set(f, false); err != nil {
				return err
			}
		}
		w, err := f.WriteAt(buf[:n], off)
		if err != nil {
			return fmt.Errorf("write at %d: %w", off, err)
		}
		off += int64(w)
		if progress != nil && (time.Since(last) > 500*time.Millisecond || off == size) {
			progress(off)
			last = time.Now()
		}
	}
	return f.Sync()
}

// Verification records a sampled read-back.
type Verification struct {
	Pattern      string  `json:"pattern"`
	Samples      int     `json:"samples"`
	BytesChecked int64   `json:"bytes_checked"`
	Direct       bool    `json:"direct_io"`
	Seconds      float64 `json:"seconds"`
}

// sampleSize is how much is read at each sample point.
const sampleSize = 64 << 10

// sampleOffsets spreads n sample points over a device: the first and last
// sampleSize bytes always, the rest evenly in between, aligned.
func sampleOffsets(size int64, n int, align int64) []int64 {
	if align <= 0 {
		align = 4096
	}
	last := (size - sampleSize) / align * align
	if last <= 0 {
		return []int64{0}
	}
	offs := []int64{0}
	for i := 1; i <= n; i++ {
		o := last * int64(i) / int64(n+1) / align * align
		if o != offs[len(offs)-1] {
			offs = append(offs, o)
		}
	}
	if offs[len(offs)-1] != last {
		offs = append(offs, last)
	}
	return offs
}

// verifyPattern reads back sampled ranges of path (start, end and n points
// in between) and checks they hold pattern p. It reads with O_DIRECT where
// possible and drops the page cache first, so it sees the medium.
func verifyPattern(ctx context.Context, path string, size int64, p pattern, n int) (Verification, error) {
	start := time.Now()
	f, direct, err := openReadDirect(path)
	if err != nil {
		return Verification{}, fmt.Errorf("verify: %w", err)
	}
	defer f.Close()
	flushBuffers(f)
	buf, free, err := alignedBuffer(sampleSize)
	if err != nil {
		return Verification{}, err
	}
	defer free()
	want := make([]byte, sampleSize)
	v := Verification{Pattern: p.name(), Direct: direct}
	for _, off := range sampleOffsets(size, n, 4096) {
		if err := ctx.Err(); err != nil {
			return v, err
		}
		m := int64(sampleSize)
		if size-off < m {
			m = size - off
		}
		if direct && m%512 != 0 {
			m = m / 512 * 512
		}
		got, err := f.ReadAt(buf[:m], off)
		if err != nil && err != io.EOF {
			return v, fmt.Errorf("verify: read at %d: %w", off, err)
		}
		p.fill(want[:got], off)
		if !bytes.Equal(buf[:got], want[:got]) {
			i := firstDiff(buf[:got], want[:got])
			return v, fmt.Errorf("verify: byte %d does not hold the %s pattern (found 0x%02x): the erase did not take effect", off+int64(i), p.name(), buf[i])
		}
		v.Samples++
		v.BytesChecked += int64(got)
	}
	v.Seconds = time.Since(start).Seconds()
	return v, nil
}

func firstDiff(a, b []byte) int {
	for i := range a {
		if a[i] != b[i] {
			return i
		}
	}
	return 0
}
