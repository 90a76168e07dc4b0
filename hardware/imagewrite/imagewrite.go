// Package imagewrite streams a disk image over HTTP straight onto a block
// device: no staging in RAM or on a filesystem (the ramdisk has neither the
// memory nor the space for an image), checksum computed over the downloaded
// bytes while writing (as Ironic checks the image file), qcow2 images
// (qcow2.go) and gzip/zstd decompression on the fly, O_DIRECT writes, fsync
// and a partition-table re-read at the end. A failed write never looks like
// a success: on any error after the first byte hit the disk, the first MiB
// is zeroed so the machine cannot boot a half-written or corrupt image, and
// the error says so. The stages run concurrently (pipeline.go).
package imagewrite

import (
	"compress/gzip"
	"context"
	"crypto/md5"
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
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/internal/directio"
	"github.com/anvil-metal/anvil/protocol"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"

	"github.com/anvil-metal/anvil/internal/redact"
)

// Opener opens devices for writing; hardware.Guard implements it.
type Opener interface {
	OpenForWrite(path string, flag int) (*os.File, error)
}

// Request describes one image write.
type Request struct {
	URL      string // http(s) URL of the image
	Checksum string // "sha256:<hex>" or "sha512:<hex>", of the bytes as downloaded
	Format   string // raw, qcow2, gzip, zstd or auto (default auto: detect by magic bytes)
	Device   string // target block device, e.g. /dev/nvme0n1
}

// Result is the JSON-serialisable outcome of a write.
type Result struct {
	Device          string       `json:"device"`
	URL             string       `json:"url"`
	Format          string       `json:"format"`
	ChecksumAlgo    string       `json:"checksum_algorithm"`
	Checksum        string       `json:"checksum"`
	BytesDownloaded int64        `json:"bytes_downloaded"`
	BytesWritten    int64        `json:"bytes_written"`
	DeviceSize      int64        `json:"device_size"`
	Seconds         float64      `json:"seconds"`
	MBPerSecond     float64      `json:"mb_per_second"`
	PartitionReread string       `json:"partition_table_reread"`
	Qcow2           *Qcow2Result `json:"qcow2,omitempty"`
}

// Writer writes images. Client defaults to a fresh NewClient for each
// write. A Writer keeps its buffers (24–56 MiB) between writes; it must not
// be copied.
type Writer struct {
	Client *http.Client
	Opener Opener
	// StallTimeout fails a download that receives nothing (headers or
	// body bytes) for this long; zero means DefaultStallTimeout.
	StallTimeout time.Duration

	mem arenas

	// skipChecksum is for the benchmark only (measuring the pipeline
	// without the hash): Write still requires a well-formed checksum.
	skipChecksum bool
}

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
	// md5 only because ironic-python-agent's legacy "checksum" field is
	// one, and stock Ironic still sends it (agent/ipa).
	want := map[string]int{"sha256": sha256.Size, "sha512": sha512.Size, "md5": md5.Size}
	n, known := want[algo]
	if !known {
		return "", nil, fmt.Errorf("image_checksum algorithm %q not supported (sha256, sha512, md5)", algo)
	}
	sum, err := hex.DecodeString(hexsum)
	if err != nil || len(sum) != n {
		return "", nil, fmt.Errorf("image_checksum: %q is not a %s hex digest", hexsum, algo)
	}
	return algo, sum, nil
}

func newHash(algo string) hash.Hash {
	switch algo {
	case "sha512":
		return sha512.New()
	case "md5":
		return md5.New()
	}
	return sha256.New()
}

// Write downloads req.URL onto req.Device. The URL appears in the result
// and in errors only redacted (RedactURL): both travel to the controller
// and into the node's history.
func (w *Writer) Write(ctx context.Context, req Request, progress hardware.ProgressFunc) (Result, error) {
	start := time.Now()
	imageURL := redact.URL(req.URL)
	res := Result{Device: req.Device, URL: imageURL}
	algo, wantSum, err := ParseChecksum(req.Checksum)
	if err != nil {
		return res, &protocol.Error{Type: protocol.ErrTypeInvalidArgs, Code: 400, Message: err.Error()}
	}
	res.ChecksumAlgo = algo
	format := strings.ToLower(req.Format)
	switch format {
	case "":
		format = "auto"
	case "raw", "gzip", "zstd", "qcow2", "auto":
	default:
		return res, &protocol.Error{Type: protocol.ErrTypeInvalidArgs, Code: 400, Message: fmt.Sprintf("image_disk_format %q: want raw, qcow2, gzip, zstd or auto", req.Format)}
	}
	if w.Opener == nil {
		return res, writeError("no device guard configured")
	}
	direct := true
	f, err := w.Opener.OpenForWrite(req.Device, unix.O_DIRECT)
	if errors.Is(err, unix.EINVAL) {
		direct = false
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
	dev := &device{f: f, size: devSize, direct: direct}

	client := w.Client
	if client == nil {
		client = NewClient()
		defer client.CloseIdleConnections()
	}
	// The download is cancelled as soon as any stage fails, so a goroutine
	// blocked reading the body returns at once; the stall guard cancels it
	// with its own cause when the server stops sending.
	dlCtx, cancelDownload := context.WithCancelCause(ctx)
	defer cancelDownload(nil)
	stall := w.StallTimeout
	if stall <= 0 {
		stall = DefaultStallTimeout
	}
	guard := newStallGuard(stall, cancelDownload)
	defer guard.stop()
	hreq, err := http.NewRequestWithContext(dlCtx, http.MethodGet, req.URL, nil)
	if err != nil {
		redact.Errors(err)
		return res, &protocol.Error{Type: protocol.ErrTypeInvalidArgs, Code: 400, Message: scrub(fmt.Sprintf("image_url: %v", err), req.URL, imageURL)}
	}
	// downloadError words a failed download: never the full URL.
	downloadError := func(err error) error {
		return writeError("download %s: %s", imageURL, scrub(downloadFailure(dlCtx, client, err).Error(), req.URL, imageURL))
	}
	guard.begin()
	resp, err := client.Do(hreq)
	guard.end(0)
	if err != nil {
		return res, downloadError(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return res, writeError("download %s: HTTP %s", imageURL, resp.Status)
	}
	body := &guardedBody{r: resp.Body, g: guard}
	total := resp.ContentLength
	// A raw image whose announced size exceeds the disk is refused before
	// writing anything.
	if total > devSize && format == "raw" {
		return res, writeError("image (%d bytes) is larger than %s (%d bytes)", total, req.Device, devSize)
	}

	// The first block is read here: its magic bytes decide the format, and
	// a qcow2 header is checked before anything is written.
	// Every stage has stopped when Write returns (g.Wait below precedes
	// every return once they started), so the memory can be given back.
	dlMem := w.mem.take(poolBuffers * chunk)
	defer w.mem.give(dlMem)
	dlPool := newPool(dlMem, chunk)
	var counted atomic.Int64
	first := &block{buf: <-dlPool.free, pool: dlPool}
	first.n, err = io.ReadFull(body, first.buf)
	counted.Add(int64(first.n))
	if err != nil && err != io.EOF && err != io.ErrUnexpectedEOF {
		return res, downloadError(err)
	}
	if format == "auto" {
		format = detect(first.data())
	}
	res.Format = format
	if format == "raw" && total > devSize {
		return res, writeError("image (%d bytes) is larger than %s (%d bytes)", total, req.Device, devSize)
	}
	var qc qcow2Header
	if format == "qcow2" {
		if qc, err = parseQcow2Header(first.data()); err != nil {
			return res, writeError("qcow2 image %s: %v", imageURL, err)
		}
		if qc.size > devSize {
			return res, writeError("qcow2 image's virtual size (%d bytes) is larger than %s (%d bytes)", qc.size, req.Device, devSize)
		}
	}

	g, gctx := errgroup.WithContext(ctx)
	stop := context.AfterFunc(gctx, func() { cancelDownload(nil) })
	defer stop()
	h := newHash(algo)
	var hashCh chan *block
	if !w.skipChecksum {
		hashCh = make(chan *block, poolBuffers)
		g.Go(func() error { return hashBlocks(hashCh, h) })
	}
	downloaded := make(chan *block, poolBuffers)
	g.Go(func() error { return download(gctx, body, first, dlPool, total, &counted, hashCh, downloaded) })
	report := func() {
		p := hardware.Progress{Message: "writing image to " + req.Device, Device: req.Device, BytesDone: uint64(counted.Load())}
		if total > 0 {
			p.BytesTotal = uint64(total)
			p.Percent = min(99, 100*float64(p.BytesDone)/float64(total))
		}
		progress.Report(p)
	}
	var q *qcow2Stream
	if format == "raw" {
		// Downloaded blocks are device blocks: no copy, no decoder.
		g.Go(func() error { return writeBlocks(gctx, dev, downloaded, report) })
	} else {
		out := make(chan *block, poolBuffers)
		wrMem := w.mem.take(poolBuffers * chunk)
		defer w.mem.give(wrMem)
		wrPool := newPool(wrMem, chunk)
		src := &blockReader{ctx: gctx, ch: downloaded}
		if format == "qcow2" {
			q = newQcow2Stream(qc, src, &emitter{ctx: gctx, pool: wrPool, out: out})
		}
		g.Go(func() error { return writeBlocks(gctx, dev, out, report) })
		g.Go(func() error {
			var err error
			switch format {
			case "gzip":
				err = gunzip(gctx, src, wrPool, out)
			case "zstd":
				err = unzstd(gctx, src, wrPool, out)
			case "qcow2":
				err = q.run()
			}
			if err != nil {
				return err
			}
			return src.drain()
		})
	}
	werr := g.Wait()
	guard.stop()
	if werr != nil {
		werr = downloadFailure(dlCtx, client, werr)
	}
	res.BytesWritten = dev.wrote.Load()
	res.BytesDownloaded = counted.Load()
	if werr == nil && !w.skipChecksum {
		got := h.Sum(nil)
		res.Checksum = algo + ":" + hex.EncodeToString(got)
		if !equal(got, wantSum) {
			werr = fmt.Errorf("checksum mismatch: image is %s, expected %s:%s", res.Checksum, algo, hex.EncodeToString(wantSum))
		}
	}
	if q != nil {
		// Guest ranges the image leaves unallocated read as zeros in qcow2;
		// they must on the disk too, whatever it held before.
		if werr == nil {
			werr = q.zeroHoles(dev)
		}
		r := q.result()
		res.Qcow2 = &r
	}
	if werr == nil {
		werr = f.Sync()
	}
	if werr != nil {
		res.Seconds = time.Since(start).Seconds()
		msg := scrub(werr.Error(), req.URL, imageURL)
		if dev.touched.Load() {
			if err := wipeHead(f); err != nil {
				msg += fmt.Sprintf("; wiping the first MiB of %s FAILED too (%v): the disk may hold a partial image", req.Device, err)
			} else {
				msg += fmt.Sprintf("; the first MiB of %s was zeroed so it will not boot a partial image", req.Device)
			}
		}
		if ctx.Err() != nil {
			// An operator's abort (the step's context cancelled): the
			// write stopped between chunks; say how far it got.
			of := ""
			if total > 0 {
				of = fmt.Sprintf(" of %d", total)
			}
			return res, &protocol.Error{Type: protocol.ErrTypeAborted, Code: 500, Message: fmt.Sprintf(
				"write image %s to %s aborted after writing %d%s bytes: %s", imageURL, req.Device, res.BytesWritten, of, msg)}
		}
		return res, writeError("write image %s to %s: %s", imageURL, req.Device, msg)
	}
	res.PartitionReread = reread(f)
	res.Seconds = time.Since(start).Seconds()
	if res.Seconds > 0 {
		res.MBPerSecond = float64(res.BytesWritten) / 1e6 / res.Seconds
	}
	progress.Report(hardware.Progress{Percent: 100, Message: "image written to " + req.Device, Device: req.Device,
		BytesDone: uint64(res.BytesDownloaded), BytesTotal: uint64(res.BytesDownloaded)})
	return res, nil
}

func equal(a, b []byte) bool { return string(a) == string(b) }

// detect looks at the image's magic bytes.
func detect(head []byte) string {
	switch {
	case len(head) >= 2 && head[0] == 0x1f && head[1] == 0x8b:
		return "gzip"
	case len(head) >= 4 && head[0] == 0x28 && head[1] == 0xb5 && head[2] == 0x2f && head[3] == 0xfd:
		return "zstd"
	case len(head) >= 4 && string(head[:4]) == qcow2Magic:
		return "qcow2"
	}
	return "raw"
}

func gunzip(ctx context.Context, src io.Reader, p *pool, out chan<- *block) error {
	gz, err := gzip.NewReader(src)
	if err != nil {
		close(out)
		return fmt.Errorf("gzip image: %w", err)
	}
	defer gz.Close()
	return streamOut(ctx, gz, p, out)
}

func unzstd(ctx context.Context, src io.Reader, p *pool, out chan<- *block) error {
	zr, err := zstd.NewReader(src, zstd.WithDecoderConcurrency(1))
	if err != nil {
		close(out)
		return fmt.Errorf("zstd image: %w", err)
	}
	defer zr.Close()
	return streamOut(ctx, zr, p, out)
}

// wipeHead zeroes the first MiB (MBR, GPT header and entries, the boot
// loader's first stage, most filesystems' superblocks).
func wipeHead(f *os.File) error {
	_ = directio.Set(f, false)
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
