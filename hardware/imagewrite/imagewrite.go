// Package imagewrite streams a disk image over HTTP straight onto a block
// device: no staging in RAM or on a filesystem (the ramdisk has neither the
// memory nor the space for an image), checksum computed over the downloaded
// bytes while writing (as Ironic checks the image file), optional gzip/zstd
// decompression on the fly, O_DIRECT writes, fsync and a partition-table
// re-read at the end. A failed write never looks like a success: on any
// error after the first byte hit the disk, the first MiB is zeroed so the
// machine cannot boot a half-written or corrupt image, and the error says so.
package imagewrite

import (
	"bufio"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"net/http"
	"os"
	"strings"
	"time"
	"unsafe"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/protocol"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sys/unix"
)

// Opener opens devices for writing; hardware.Guard implements it.
type Opener interface {
	OpenForWrite(path string, flag int) (*os.File, error)
}

// Request describes one image write.
type Request struct {
	URL      string // http(s) URL of the image
	Checksum string // "sha256:<hex>" or "sha512:<hex>", of the bytes as downloaded
	Format   string // raw, gzip, zstd or auto (default auto: detect by magic bytes)
	Device   string // target block device, e.g. /dev/nvme0n1
}

// Result is the JSON-serialisable outcome of a write.
type Result struct {
	Device          string  `json:"device"`
	URL             string  `json:"url"`
	Format          string  `json:"format"`
	ChecksumAlgo    string  `json:"checksum_algorithm"`
	Checksum        string  `json:"checksum"`
	BytesDownloaded int64   `json:"bytes_downloaded"`
	BytesWritten    int64   `json:"bytes_written"`
	DeviceSize      int64   `json:"device_size"`
	Seconds         float64 `json:"seconds"`
	MBPerSecond     float64 `json:"mb_per_second"`
	PartitionReread string  `json:"partition_table_reread"`
}

// Writer writes images. Client defaults to http.DefaultClient.
type Writer struct {
	Client *http.Client
	Opener Opener
}

// chunk is the unit of reading and writing. 4 MiB O_DIRECT writes keep a
// device queue full (the benchmark compares with dd bs=4M oflag=direct).
const chunk = 4 << 20

func writeError(msg string, args ...any) error {
	return &protocol.Error{Type: protocol.ErrTypeImageWrite, Code: 500, Message: fmt.Sprintf(msg, args...)}
}

// ParseChecksum splits "algo:hex" and validates it.
func ParseChecksum(s string) (string, []byte, error) {
	algo, hexsum, ok := strings.Cut(strings.TrimSpace(s), ":")
	if !ok {
		return "", nil, fmt.Errorf("image_checksum %q: want sha256:<hex> or sha512:<hex>", s)
	}
	algo = strings.ToLower(algo)
	want := map[string]int{"sha256": sha256.Size, "sha512": sha512.Size}
	n, known := want[algo]
	if !known {
		return "", nil, fmt.Errorf("image_checksum algorithm %q not supported (sha256, sha512)", algo)
	}
	sum, err := hex.DecodeString(hexsum)
	if err != nil || len(sum) != n {
		return "", nil, fmt.Errorf("image_checksum: %q is not a %s hex digest", hexsum, algo)
	}
	return algo, sum, nil
}

func newHash(algo string) hash.Hash {
	if algo == "sha512" {
		return sha512.New()
	}
	return sha256.New()
}

// Write downloads req.URL onto req.Device.
func (w *Writer) Write(ctx context.Context, req Request, progress hardware.ProgressFunc) (Result, error) {
	start := time.Now()
	res := Result{Device: req.Device, URL: req.URL}
	algo, wantSum, err := ParseChecksum(req.Checksum)
	if err != nil {
		return res, &protocol.Error{Type: protocol.ErrTypeInvalidArgs, Code: 400, Message: err.Error()}
	}
	res.ChecksumAlgo = algo
	format := strings.ToLower(req.Format)
	switch format {
	case "":
		format = "auto"
	case "raw", "gzip", "zstd", "auto":
	default:
		return res, &protocol.Error{Type: protocol.ErrTypeInvalidArgs, Code: 400, Message: fmt.Sprintf("image_disk_format %q: want raw, gzip, zstd or auto", req.Format)}
	}
	if w.Opener == nil {
		return res, writeError("no device guard configured")
	}
	f, err := w.Opener.OpenForWrite(req.Device, unix.O_DIRECT)
	if errors.Is(err, unix.EINVAL) {
		f, err = w.Opener.OpenForWrite(req.Device, 0) // no O_DIRECT here (tmpfs files in tests)
	}
	if err != nil {
		if errors.Is(err, hardware.ErrProtected) {
			return res, &protocol.Error{Type: protocol.ErrTypeProtectedDevice, Code: 403, Message: err.Error()}
		}
		return res, writeError("open %s: %v", req.Device, err)
	}
	defer f.Close()
	devSize, err := sizeOf(f)
	if err != nil {
		return res, writeError("size of %s: %v", req.Device, err)
	}
	res.DeviceSize = devSize

	client := w.Client
	if client == nil {
		client = http.DefaultClient
	}
	hreq, err := http.NewRequestWithContext(ctx, http.MethodGet, req.URL, nil)
	if err != nil {
		return res, &protocol.Error{Type: protocol.ErrTypeInvalidArgs, Code: 400, Message: fmt.Sprintf("image_url: %v", err)}
	}
	resp, err := client.Do(hreq)
	if err != nil {
		return res, writeError("download %s: %v", req.URL, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return res, writeError("download %s: HTTP %s", req.URL, resp.Status)
	}
	// A raw image whose announced size exceeds the disk is refused before
	// writing anything.
	if resp.ContentLength > devSize && format == "raw" {
		return res, writeError("image (%d bytes) is larger than %s (%d bytes)", resp.ContentLength, req.Device, devSize)
	}

	h := newHash(algo)
	counted := &countingReader{r: resp.Body}
	br := bufio.NewReaderSize(counted, 1<<20)
	if format == "auto" {
		format = detect(br)
		if format == "raw" && resp.ContentLength > devSize {
			return res, writeError("image (%d bytes) is larger than %s (%d bytes)", resp.ContentLength, req.Device, devSize)
		}
	}
	res.Format = format
	// The checksum is over the bytes as downloaded. For a raw image those
	// are the bytes written, so each chunk is hashed by the copy loop in
	// parallel with its write; compressed streams are hashed as read.
	hashed := io.TeeReader(br, h)
	var src io.Reader = hashed
	var chunkHash hash.Hash
	switch format {
	case "raw":
		src, chunkHash = br, h
	case "gzip":
		gz, err := gzip.NewReader(hashed)
		if err != nil {
			return res, writeError("gzip image: %v", err)
		}
		defer gz.Close()
		src = gz
	case "zstd":
		zr, err := zstd.NewReader(hashed, zstd.WithDecoderConcurrency(1))
		if err != nil {
			return res, writeError("zstd image: %v", err)
		}
		defer zr.Close()
		src = zr
	}

	total := resp.ContentLength
	written, werr := copyToDevice(ctx, f, src, chunkHash, devSize, func(n int64) {
		p := hardware.Progress{Message: "writing image to " + req.Device, Device: req.Device, BytesDone: uint64(counted.n)}
		if total > 0 {
			p.BytesTotal = uint64(total)
			p.Percent = min(99, 100*float64(counted.n)/float64(total))
		}
		progress.Report(p)
	})
	res.BytesWritten = written
	if werr == nil {
		// Drain what the decompressor did not need (trailing padding) so the
		// checksum covers the whole download, and catch a short body.
		_, werr = io.Copy(io.Discard, hashed)
	}
	res.BytesDownloaded = counted.n
	if werr == nil && total >= 0 && counted.n != total {
		werr = fmt.Errorf("short read: got %d of %d bytes", counted.n, total)
	}
	got := h.Sum(nil)
	res.Checksum = algo + ":" + hex.EncodeToString(got)
	if werr == nil && !equal(got, wantSum) {
		werr = fmt.Errorf("checksum mismatch: image is %s, expected %s:%s", res.Checksum, algo, hex.EncodeToString(wantSum))
	}
	if werr == nil {
		werr = f.Sync()
	}
	if werr != nil {
		res.Seconds = time.Since(start).Seconds()
		msg := werr.Error()
		if written > 0 {
			if err := wipeHead(f); err != nil {
				msg += fmt.Sprintf("; wiping the first MiB of %s FAILED too (%v): the disk may hold a partial image", req.Device, err)
			} else {
				msg += fmt.Sprintf("; the first MiB of %s was zeroed so it will not boot a partial image", req.Device)
			}
		}
		return res, writeError("write image %s to %s: %s", req.URL, req.Device, msg)
	}
	res.PartitionReread = reread(f)
	res.Seconds = time.Since(start).Seconds()
	if res.Seconds > 0 {
		res.MBPerSecond = float64(written) / 1e6 / res.Seconds
	}
	progress.Report(hardware.Progress{Percent: 100, Message: "image written to " + req.Device, Device: req.Device,
		BytesDone: uint64(counted.n), BytesTotal: uint64(counted.n)})
	return res, nil
}

func equal(a, b []byte) bool { return string(a) == string(b) }

// detect peeks at the stream's magic bytes.
func detect(br *bufio.Reader) string {
	head, _ := br.Peek(4)
	switch {
	case len(head) >= 2 && head[0] == 0x1f && head[1] == 0x8b:
		return "gzip"
	case len(head) >= 4 && head[0] == 0x28 && head[1] == 0xb5 && head[2] == 0x2f && head[3] == 0xfd:
		return "zstd"
	}
	return "raw"
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// copyToDevice reads src in chunk-sized pieces and writes them to f, with
// reading and writing overlapped (two buffers) so the network/decompression
// and the device work at the same time.
//
// When h is not nil every chunk is also fed to h, concurrently with its
// write (hashing and the device then overlap instead of adding up).
func copyToDevice(ctx context.Context, f *os.File, src io.Reader, h hash.Hash, devSize int64, progress func(int64)) (int64, error) {
	// Buffers come from the Go heap (aligned by hand for O_DIRECT), not an
	// mmap: the reader goroutine may still be inside a Read when we return
	// on an error, and must never touch unmapped memory.
	mem := alignedHeap(3 * chunk)
	type filled struct {
		buf []byte
		n   int
		err error
	}
	free := make(chan []byte, 3)
	for i := 0; i < 3; i++ {
		free <- mem[i*chunk : (i+1)*chunk]
	}
	full := make(chan filled, 3)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		defer close(full)
		for {
			var buf []byte
			select {
			case buf = <-free:
			case <-ctx.Done():
				return
			}
			n, err := io.ReadFull(src, buf)
			if err == io.ErrUnexpectedEOF {
				err = io.EOF // a final partial chunk
			}
			full <- filled{buf, n, err}
			if err != nil {
				return
			}
		}
	}()
	var off int64
	last := time.Now()
	for c := range full {
		if c.n > 0 {
			if off+int64(c.n) > devSize {
				return off, fmt.Errorf("image is larger than the device (%d bytes): stopped at %d", devSize, off)
			}
			data := c.buf[:c.n]
			if c.n%4096 != 0 {
				// O_DIRECT needs whole blocks: write the ragged tail buffered.
				if err := setDirect(f, false); err != nil {
					return off, err
				}
			}
			var hashed chan struct{}
			if h != nil {
				hashed = make(chan struct{})
				go func() { h.Write(data); close(hashed) }()
			}
			_, err := f.WriteAt(data, off)
			if hashed != nil {
				<-hashed // the buffer is reused: wait for the hash to finish with it
			}
			if err != nil {
				return off, fmt.Errorf("write at %d: %w", off, err)
			}
			off += int64(c.n)
			if time.Since(last) > 500*time.Millisecond {
				progress(off)
				last = time.Now()
			}
		}
		if c.err == io.EOF {
			return off, nil
		}
		if c.err != nil {
			return off, fmt.Errorf("read image: %w", c.err)
		}
		if err := ctx.Err(); err != nil {
			return off, err
		}
		free <- c.buf
	}
	return off, ctx.Err()
}

func setDirect(f *os.File, on bool) error {
	fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err != nil {
		return err
	}
	if on {
		fl |= unix.O_DIRECT
	} else {
		fl &^= unix.O_DIRECT
	}
	_, err = unix.FcntlInt(f.Fd(), unix.F_SETFL, fl)
	return err
}

// wipeHead zeroes the first MiB (MBR, GPT header and entries, the boot
// loader's first stage, most filesystems' superblocks).
func wipeHead(f *os.File) error {
	_ = setDirect(f, false)
	if _, err := f.WriteAt(make([]byte, 1<<20), 0); err != nil {
		return err
	}
	return f.Sync()
}

func sizeOf(f *os.File) (int64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if st.Mode().IsRegular() {
		return st.Size(), nil
	}
	var n uint64
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&n))); e != 0 {
		return 0, e
	}
	return int64(n), nil
}

// reread asks the kernel to re-read the partition table; the answer is
// recorded rather than failing the write (a loop device without partition
// scanning, or a kernel without the parser, cannot).
func reread(f *os.File) string {
	st, err := f.Stat()
	if err != nil || st.Mode()&os.ModeDevice == 0 {
		return "not a block device"
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKRRPART, 0); e != 0 {
		return "failed: " + e.Error()
	}
	return "ok"
}

// alignedHeap returns n bytes of Go memory starting on a 4096-byte boundary.
func alignedHeap(n int) []byte {
	raw := make([]byte, n+4096)
	off := int(4096-uintptr(unsafe.Pointer(&raw[0]))%4096) % 4096
	return raw[off : off+n : off+n]
}
