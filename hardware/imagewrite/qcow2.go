package imagewrite

import (
	"bytes"
	"compress/flate"
	"container/heap"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// A qcow2 image is written in one pass over the download, in pure Go (no
// qemu-img in the ramdisk, no staging): the header, the L1 table and the L2
// tables are small and kept as they stream past; every data cluster is
// written to its guest offset as soon as it arrives, because the L2 table
// mapping it came earlier in the file.
//
// Why qemu-img's output streams: `qemu-img convert -O qcow2` creates the
// image (header, refcount table and block, L1 table in the first clusters)
// and then writes the guest in order through qcow2's allocator, which only
// appends at the end of the file. A guest cluster's L2 table is allocated
// (get_cluster_table) before the data cluster itself, so every L2 table
// precedes the clusters it maps. Two exceptions, both handled:
//
//   - compressed clusters are packed byte-wise into a partly filled host
//     cluster (qcow2_alloc_bytes). The allocator allows the next compressed
//     cluster to go into that older, lower host cluster after a new L2 table
//     was allocated behind it: data up to one cluster before its table (not
//     seen in qemu-img 7.2's output in our tests, but nothing forbids it). A
//     look-behind window of recent unclaimed clusters (lookBehind) covers it;
//   - refcount structures can be reallocated and their old clusters reused
//     on very large images with small clusters. If the stream ever needs a
//     cluster that has left the window, the write fails with an error that
//     says so and how to rewrite the image (`qemu-img convert -O qcow2`).
//
// Guest clusters the image leaves unallocated (or marks as zero) must read
// as zeros afterwards: they are zeroed on the device at the end, after the
// checksum matched; clusters the image carries are never written twice.

const qcow2Magic = "QFI\xfb"

// qcow2 header features this reader handles.
const (
	incompatDirty       = 1 << 0 // refcounts may be stale: irrelevant to us
	incompatCorrupt     = 1 << 1
	incompatExternal    = 1 << 2
	incompatCompression = 1 << 3 // compression_type field is valid
	incompatExtendedL2  = 1 << 4
	knownIncompat       = incompatDirty | incompatCorrupt | incompatExternal | incompatCompression | incompatExtendedL2

	maxL1Bytes = 32 << 20 // qemu's QCOW_MAX_L1_SIZE

	extEnd        = 0x00000000
	extBackingFmt = 0xe2792aca
	extFeatures   = 0x6803f857
	extCrypto     = 0x0537be77
	extDataFile   = 0x44415441

	offsetMask = 0x00fffffffffffe00 // host offset bits of L1 and L2 entries
	flagCompr  = 1 << 62
	flagZero   = 1 << 0
)

// qemuConvert is the advice every "cannot stream this image" error gives.
const qemuConvert = "rewrite it with `qemu-img convert -O qcow2 in.qcow2 out.qcow2`"

// qcow2Header is what the writer needs from a qcow2 header.
type qcow2Header struct {
	version     uint32
	clusterBits uint32
	clusterSize int64
	size        int64 // virtual disk size
	l1Entries   int64
	l1Offset    int64
	compression uint8 // 0 zlib (raw deflate), 1 zstd
	dirty       bool
}

func (h qcow2Header) l2Entries() int64 { return h.clusterSize / 8 }

// parseQcow2Header validates a qcow2 header (b holds at least the first
// cluster, or the whole file if shorter) and refuses what cannot be
// written from one stream: backing files, encryption, external data
// files, extended L2 entries, unknown incompatible features.
func parseQcow2Header(b []byte) (qcow2Header, error) {
	be := binary.BigEndian
	var h qcow2Header
	if len(b) < 72 || string(b[:4]) != qcow2Magic {
		return h, errors.New("not a qcow2 image (no QFI\\xfb header)")
	}
	h.version = be.Uint32(b[4:])
	if h.version != 2 && h.version != 3 {
		return h, fmt.Errorf("qcow2 version %d not supported (2 and 3 are)", h.version)
	}
	backingOff, backingLen := be.Uint64(b[8:]), be.Uint32(b[16:])
	h.clusterBits = be.Uint32(b[20:])
	if h.clusterBits < 9 || h.clusterBits > 21 {
		return h, fmt.Errorf("cluster_bits %d out of range (9..21)", h.clusterBits)
	}
	h.clusterSize = 1 << h.clusterBits
	size := be.Uint64(b[24:])
	if size > 1<<56 || size%512 != 0 {
		return h, fmt.Errorf("virtual size %d is not a plausible disk size", size)
	}
	h.size = int64(size)
	if crypt := be.Uint32(b[32:]); crypt != 0 {
		return h, fmt.Errorf("the image is encrypted (crypt_method %d): encrypted images cannot be written; %s without encryption", crypt, qemuConvert)
	}
	h.l1Entries = int64(be.Uint32(b[36:]))
	h.l1Offset = int64(be.Uint64(b[40:]))
	if backingOff != 0 {
		name := "?"
		if end := backingOff + uint64(backingLen); backingLen <= 1023 && end <= uint64(len(b)) {
			name = string(b[backingOff:end])
		}
		return h, fmt.Errorf("the image has a backing file (%q): only self-contained images can be streamed; %s to flatten it", name, qemuConvert)
	}
	perL1 := h.l2Entries() * h.clusterSize
	need := (h.size + perL1 - 1) / perL1
	switch {
	case h.l1Entries < need:
		return h, fmt.Errorf("L1 table has %d entries, the virtual size needs %d: corrupt image", h.l1Entries, need)
	case h.l1Entries*8 > maxL1Bytes:
		return h, fmt.Errorf("L1 table of %d entries is larger than qemu allows", h.l1Entries)
	case h.l1Entries > 0 && (h.l1Offset <= 0 || h.l1Offset%h.clusterSize != 0):
		return h, fmt.Errorf("L1 table offset %d is not a cluster boundary after the header: corrupt image", h.l1Offset)
	}
	extStart := 72
	var incompat uint64
	if h.version == 3 {
		if len(b) < 104 {
			return h, errors.New("truncated qcow2 v3 header")
		}
		incompat = be.Uint64(b[72:])
		hlen := be.Uint32(b[100:])
		if hlen < 104 || hlen%8 != 0 || int64(hlen) > h.clusterSize || int(hlen) > len(b) {
			return h, fmt.Errorf("header_length %d invalid", hlen)
		}
		if hlen > 104 {
			h.compression = b[104]
		}
		extStart = int(hlen)
	}
	var featureNames []byte
	for off := extStart; off+8 <= len(b) && int64(off+8) <= h.clusterSize; {
		typ, n := be.Uint32(b[off:]), be.Uint32(b[off+4:])
		if typ == extEnd {
			break
		}
		data := off + 8
		if uint64(data)+uint64(n) > uint64(min(int64(len(b)), h.clusterSize)) {
			return h, fmt.Errorf("header extension 0x%08x overruns the header cluster", typ)
		}
		switch typ {
		case extCrypto:
			return h, fmt.Errorf("the image is encrypted (LUKS header extension): encrypted images cannot be written; %s without encryption", qemuConvert)
		case extDataFile:
			return h, fmt.Errorf("the image keeps its data in an external data file (%q): %s so the data is inside the image", string(b[data:data+int(n)]), qemuConvert)
		case extFeatures:
			featureNames = b[data : data+int(n)]
		}
		off = data + (int(n)+7)&^7
	}
	switch {
	case incompat&incompatCorrupt != 0:
		return h, errors.New("the image is marked corrupt: repair it with `qemu-img check -r all` first")
	case incompat&incompatExternal != 0:
		return h, fmt.Errorf("the image keeps its data in an external data file: %s", qemuConvert)
	case incompat&incompatExtendedL2 != 0:
		return h, fmt.Errorf("the image uses extended L2 entries (subclusters), which this writer does not read; %s -o extended_l2=off", qemuConvert)
	case incompat&^knownIncompat != 0:
		return h, fmt.Errorf("the image uses incompatible features this writer does not know (%s); %s", unknownFeatures(incompat&^knownIncompat, featureNames), qemuConvert)
	}
	h.dirty = incompat&incompatDirty != 0
	if incompat&incompatCompression == 0 {
		h.compression = 0
	}
	if h.compression > 1 {
		return h, fmt.Errorf("compression type %d not supported (zlib and zstd are)", h.compression)
	}
	return h, nil
}

// unknownFeatures names incompatible feature bits from the image's own
// feature name table when it has one.
func unknownFeatures(bits uint64, table []byte) string {
	var names []string
	for i := 0; i < 64; i++ {
		if bits&(1<<i) == 0 {
			continue
		}
		name := fmt.Sprintf("bit %d", i)
		for off := 0; off+48 <= len(table); off += 48 {
			if table[off] == 0 && int(table[off+1]) == i { // type 0: incompatible
				name += " " + strings.TrimRight(string(table[off+2:off+48]), "\x00")
			}
		}
		names = append(names, name)
	}
	return strings.Join(names, ", ")
}

// l2Kind classifies an L2 entry.
type l2Kind int

const (
	l2Unallocated l2Kind = iota
	l2Zero
	l2Data
	l2Compressed
)

// decodeL2 decodes one standard (not extended) L2 entry: for data, the
// host cluster offset; for compressed clusters, the host byte offset and
// the most bytes the compressed data can occupy.
func (h qcow2Header) decodeL2(e uint64) (kind l2Kind, host, n int64, err error) {
	if e&flagCompr != 0 {
		x := 62 - (h.clusterBits - 8)
		host = int64(e & (1<<x - 1))
		sectors := int64(e>>x) & (1<<(62-x) - 1)
		n = (sectors+1)*512 - host%512
		if n > h.clusterSize+512 {
			// qemu stores a cluster uncompressed unless it shrinks.
			return 0, 0, 0, fmt.Errorf("L2 entry 0x%016x: compressed cluster of %d bytes is larger than a cluster: corrupt image", e, n)
		}
		return l2Compressed, host, n, nil
	}
	host = int64(e & offsetMask)
	switch {
	case e&flagZero != 0:
		return l2Zero, 0, 0, nil
	case host == 0:
		return l2Unallocated, 0, 0, nil
	case host%h.clusterSize != 0:
		return 0, 0, 0, fmt.Errorf("L2 entry 0x%016x: data offset %d is not cluster-aligned: corrupt image", e, host)
	}
	return l2Data, host, h.clusterSize, nil
}

// Qcow2Result describes a qcow2 write in the step result.
type Qcow2Result struct {
	Version             uint32 `json:"version"`
	ClusterSize         int64  `json:"cluster_size"`
	VirtualSize         int64  `json:"virtual_size"`
	Compression         string `json:"compression"`
	DataClusters        int64  `json:"data_clusters"`
	CompressedClusters  int64  `json:"compressed_clusters"`
	ZeroClusters        int64  `json:"zero_clusters"`        // unallocated or zero-flagged
	LookBehindClusters  int64  `json:"look_behind_clusters"` // tables and data that came before what maps them
	BytesZeroed         int64  `json:"bytes_zeroed"`         // guest ranges the image does not carry
	DirtyRefcountsFound bool   `json:"dirty,omitempty"`
}

// extent is a byte range of the device.
type extent struct{ off, n int64 }

// compWant is a compressed cluster waiting for its bytes.
type compWant struct {
	host, n, guest int64
}

type compHeap []compWant

func (c compHeap) Len() int           { return len(c) }
func (c compHeap) Less(i, j int) bool { return c[i].host+c[i].n < c[j].host+c[j].n }
func (c compHeap) Swap(i, j int)      { c[i], c[j] = c[j], c[i] }
func (c *compHeap) Push(x any)        { *c = append(*c, x.(compWant)) }
func (c *compHeap) Pop() any {
	old := *c
	x := old[len(old)-1]
	*c = old[:len(old)-1]
	return x
}

// lookBehind is how much of the recent stream that nothing had claimed yet
// is kept: at least this many bytes, and at least 4 clusters.
const lookBehind = 8 << 20

// ring keeps the most recent unclaimed clusters by host offset.
type ring struct {
	slots map[int64][]byte
	order []int64
	max   int
	spare [][]byte
	cs    int64
}

func (r *ring) slot(off int64) []byte {
	if len(r.order) >= r.max {
		old := r.order[0]
		r.order = r.order[1:]
		r.spare = append(r.spare, r.slots[old][:r.cs])
		delete(r.slots, old)
	}
	var b []byte
	if n := len(r.spare); n > 0 {
		b, r.spare = r.spare[n-1], r.spare[:n-1]
	} else {
		b = make([]byte, r.cs)
	}
	r.order = append(r.order, off)
	r.slots[off] = b
	return b
}

// bytes copies [off, off+n) out of the window, or reports it is not there.
func (r *ring) bytes(dst []byte, off int64) bool {
	for done := 0; done < len(dst); {
		at := off + int64(done)
		c := at / r.cs * r.cs
		s, ok := r.slots[c]
		if !ok || at-c >= int64(len(s)) {
			return false
		}
		done += copy(dst[done:], s[at-c:])
	}
	return true
}

// emitter packs guest-contiguous clusters into device blocks.
type emitter struct {
	ctx     context.Context
	pool    *pool
	out     chan<- *block
	cur     *block
	written []extent
}

// slot returns n bytes of buffer for the guest range at off, appended to
// the current block when it continues it.
func (e *emitter) slot(off int64, n int) ([]byte, error) {
	if e.cur != nil && (e.cur.off+int64(e.cur.n) != off || e.cur.n+n > len(e.cur.buf)) {
		if err := e.flush(); err != nil {
			return nil, err
		}
	}
	if e.cur == nil {
		buf, err := e.pool.get(e.ctx)
		if err != nil {
			return nil, err
		}
		e.cur = &block{buf: buf, off: off, pool: e.pool}
		e.cur.refs.Store(1)
	}
	return e.cur.buf[e.cur.n : e.cur.n+n], nil
}

// commit marks n bytes of the last slot as the device's content.
func (e *emitter) commit(off int64, n int) {
	e.cur.n += n
	if k := len(e.written) - 1; k >= 0 && e.written[k].off+e.written[k].n == off {
		e.written[k].n += int64(n)
	} else {
		e.written = append(e.written, extent{off, int64(n)})
	}
}

func (e *emitter) flush() error {
	b := e.cur
	e.cur = nil
	if b == nil {
		return nil
	}
	if b.n == 0 {
		b.release()
		return nil
	}
	return send(e.ctx, e.out, b)
}

// qcow2Stream writes one qcow2 image from its byte stream.
type qcow2Stream struct {
	h      qcow2Header
	src    io.Reader
	out    *emitter
	pos    int64 // bytes of the file consumed
	eof    bool
	l1     []byte            // the L1 table, as it arrives
	l2At   map[int64][]int64 // pending L2 tables: host offset -> L1 indexes
	seenL2 map[int64]bool
	data   map[int64][]int64 // pending data clusters: host offset -> guest offsets
	comp   compHeap          // pending compressed clusters
	win    ring
	res    Qcow2Result

	inflate  io.ReadCloser
	unzstd   *zstd.Decoder
	compBuf  []byte
	tableBuf []byte
}

func newQcow2Stream(h qcow2Header, src io.Reader, out *emitter) *qcow2Stream {
	cs := h.clusterSize
	q := &qcow2Stream{h: h, src: src, out: out, l2At: map[int64][]int64{}, seenL2: map[int64]bool{}, data: map[int64][]int64{},
		win: ring{slots: map[int64][]byte{}, max: int(max(4, lookBehind/cs)), cs: cs}}
	q.res = Qcow2Result{Version: h.version, ClusterSize: cs, VirtualSize: h.size, Compression: "zlib", DirtyRefcountsFound: h.dirty}
	if h.compression == 1 {
		q.res.Compression = "zstd"
	}
	return q
}

func (q *qcow2Stream) result() Qcow2Result { return q.res }

// run consumes the image cluster by cluster until everything the L1 and
// L2 tables map has been written. It always closes the output channel.
func (q *qcow2Stream) run() (err error) {
	defer func() {
		if err == nil {
			err = q.out.flush()
		}
		close(q.out.out)
	}()
	cs := q.h.clusterSize
	if err := q.read(make([]byte, cs)); err != nil { // the header cluster
		return err
	}
	if q.h.l1Entries == 0 {
		return nil
	}
	for !q.done() {
		if q.eof {
			return q.truncated()
		}
		c := q.pos
		if guests, ok := q.data[c]; ok {
			delete(q.data, c)
			if err := q.writeData(guests, nil); err != nil {
				return err
			}
		} else {
			buf := q.win.slot(c)
			if err := q.read(buf); err != nil {
				return err
			}
			q.win.slots[c] = buf[:q.pos-c]
			if err := q.claim(c, q.win.slots[c]); err != nil {
				return err
			}
		}
		if err := q.decompressReady(); err != nil {
			return err
		}
	}
	return nil
}

// read fills buf from the stream (short only at the end of the file).
func (q *qcow2Stream) read(buf []byte) error {
	n, err := io.ReadFull(q.src, buf)
	q.pos += int64(n)
	switch {
	case err == io.EOF || err == io.ErrUnexpectedEOF:
		q.eof = true
		return nil
	case err != nil:
		return fmt.Errorf("read qcow2 image at %d: %w", q.pos, err)
	}
	return nil
}

func (q *qcow2Stream) done() bool {
	return int64(len(q.l1)) == q.h.l1Entries*8 && len(q.l2At) == 0 && len(q.data) == 0 && q.comp.Len() == 0
}

func (q *qcow2Stream) truncated() error {
	what := "the L1 table"
	if int64(len(q.l1)) == q.h.l1Entries*8 {
		what = fmt.Sprintf("%d L2 tables, %d data and %d compressed clusters", len(q.l2At), len(q.data), q.comp.Len())
	}
	return fmt.Errorf("truncated qcow2 image: the file ends at %d bytes but %s it maps lie beyond", q.pos, what)
}

// notStreamable is the error for data the stream has already passed.
func (q *qcow2Stream) notStreamable(what string, host int64) error {
	return fmt.Errorf("qcow2 image is not streamable: %s at file offset %d is needed only after the stream reached %d, "+
		"and it is no longer in the %d-byte look-behind window (writing it would need the image staged in memory); %s, "+
		"whose output puts every L2 table before the clusters it maps", what, host, q.pos, int64(q.win.max)*q.h.clusterSize, qemuConvert)
}

// claim looks at a cluster that was not known to be data when it arrived:
// part of the L1 table, an L2 table, or (kept in the window) compressed
// data, metadata we do not need, or data whose table is yet to come.
func (q *qcow2Stream) claim(c int64, b []byte) error {
	cs := q.h.clusterSize
	l1End := q.h.l1Offset + q.h.l1Entries*8
	if c >= q.h.l1Offset && c < l1End && c == q.h.l1Offset+int64(len(q.l1))/cs*cs {
		part := b[:min(int64(len(b)), l1End-c)]
		q.l1 = append(q.l1, part...)
		if int64(len(q.l1)) == q.h.l1Entries*8 {
			return q.parseL1()
		}
		return nil
	}
	if l1s, ok := q.l2At[c]; ok {
		delete(q.l2At, c)
		if int64(len(b)) < cs {
			return fmt.Errorf("truncated qcow2 image: L2 table at %d is cut short", c)
		}
		for _, i := range l1s {
			if err := q.parseL2(i, b); err != nil {
				return err
			}
		}
	}
	return nil
}

func (q *qcow2Stream) parseL1() error {
	cs := q.h.clusterSize
	for i := int64(0); i < q.h.l1Entries; i++ {
		if i*q.h.l2Entries()*cs >= q.h.size {
			break
		}
		off := int64(binary.BigEndian.Uint64(q.l1[i*8:]) & offsetMask)
		if off == 0 {
			base := i * q.h.l2Entries() * cs
			q.res.ZeroClusters += min(q.h.l2Entries(), (q.h.size-base+cs-1)/cs)
			continue
		}
		if off%cs != 0 {
			return fmt.Errorf("L1 entry %d: L2 table offset %d is not cluster-aligned: corrupt image", i, off)
		}
		// An active L1 table never shares an L2 table between entries
		// (only snapshots do, through their own L1 tables). Refusing it
		// also bounds the work a crafted image can cause.
		if q.seenL2[off] {
			return fmt.Errorf("L1 entry %d: L2 table at %d is used twice: corrupt image", i, off)
		}
		q.seenL2[off] = true
		if off >= q.pos {
			q.l2At[off] = append(q.l2At[off], i)
			continue
		}
		if q.tableBuf == nil {
			q.tableBuf = make([]byte, cs)
		}
		if !q.win.bytes(q.tableBuf, off) {
			return q.notStreamable(fmt.Sprintf("the L2 table for guest offset %d", i*q.h.l2Entries()*cs), off)
		}
		q.res.LookBehindClusters++
		if err := q.parseL2(i, q.tableBuf); err != nil {
			return err
		}
	}
	return nil
}

// parseL2 records what one L2 table maps; data already in the window is
// written at once.
func (q *qcow2Stream) parseL2(l1Index int64, table []byte) error {
	cs := q.h.clusterSize
	base := l1Index * q.h.l2Entries() * cs
	for j := int64(0); j < q.h.l2Entries(); j++ {
		guest := base + j*cs
		if guest >= q.h.size {
			break
		}
		kind, host, n, err := q.h.decodeL2(binary.BigEndian.Uint64(table[j*8:]))
		if err != nil {
			return err
		}
		switch kind {
		case l2Unallocated, l2Zero:
			q.res.ZeroClusters++
		case l2Compressed:
			q.res.CompressedClusters++
			if host < cs {
				return fmt.Errorf("compressed cluster for guest offset %d points into the header: corrupt image", guest)
			}
			heap.Push(&q.comp, compWant{host: host, n: n, guest: guest})
		case l2Data:
			q.res.DataClusters++
			if host >= q.pos {
				q.data[host] = append(q.data[host], guest)
				continue
			}
			src := q.win.slots[host]
			if int64(len(src)) != cs {
				return q.notStreamable(fmt.Sprintf("the data cluster for guest offset %d", guest), host)
			}
			q.res.LookBehindClusters++
			if err := q.writeData([]int64{guest}, src); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeData writes one data cluster to every guest offset mapping it:
// from src when it is already in memory, else read from the stream
// straight into the device block (a cluster several guest offsets share,
// which qemu-img never writes, is read once and copied).
func (q *qcow2Stream) writeData(guests []int64, src []byte) error {
	cs := q.h.clusterSize
	if src == nil && len(guests) > 1 {
		src = make([]byte, cs)
		if err := q.readCluster(src, guests[0]); err != nil {
			return err
		}
	}
	for _, g := range guests {
		dst, err := q.out.slot(g, int(cs))
		if err != nil {
			return err
		}
		if src != nil {
			copy(dst, src)
		} else if err := q.readCluster(dst, g); err != nil {
			return err
		}
		q.out.commit(g, int(min(cs, q.h.size-g)))
	}
	return nil
}

func (q *qcow2Stream) readCluster(dst []byte, guest int64) error {
	if err := q.read(dst); err != nil {
		return err
	}
	if q.eof {
		return fmt.Errorf("truncated qcow2 image: the data cluster for guest offset %d is cut short at %d", guest, q.pos)
	}
	return nil
}

// decompressReady decompresses every pending compressed cluster whose
// bytes have all arrived (the recorded length is an upper bound rounded to
// sectors, so at the end of the file what is there is enough).
func (q *qcow2Stream) decompressReady() error {
	for q.comp.Len() > 0 {
		w := q.comp[0]
		end := w.host + w.n
		if end > q.pos && !q.eof {
			return nil
		}
		heap.Pop(&q.comp)
		if w.host >= q.pos {
			return fmt.Errorf("truncated qcow2 image: compressed cluster for guest offset %d at %d is beyond the end (%d)", w.guest, w.host, q.pos)
		}
		end = min(end, q.pos)
		if int64(cap(q.compBuf)) < end-w.host {
			q.compBuf = make([]byte, end-w.host)
		}
		in := q.compBuf[:end-w.host]
		if !q.win.bytes(in, w.host) {
			return q.notStreamable(fmt.Sprintf("the compressed cluster for guest offset %d", w.guest), w.host)
		}
		if err := q.decompress(w.guest, in); err != nil {
			return err
		}
	}
	return nil
}

func (q *qcow2Stream) decompress(guest int64, in []byte) error {
	cs := q.h.clusterSize
	dst, err := q.out.slot(guest, int(cs))
	if err != nil {
		return err
	}
	var r io.Reader
	if q.h.compression == 1 {
		if q.unzstd == nil {
			if q.unzstd, err = zstd.NewReader(nil, zstd.WithDecoderConcurrency(1)); err != nil {
				return err
			}
		}
		if err := q.unzstd.Reset(bytes.NewReader(in)); err != nil {
			return fmt.Errorf("zstd cluster for guest offset %d: %w", guest, err)
		}
		r = q.unzstd
	} else {
		if q.inflate == nil {
			q.inflate = flate.NewReader(bytes.NewReader(in))
		} else if err := q.inflate.(flate.Resetter).Reset(bytes.NewReader(in), nil); err != nil {
			return err
		}
		r = q.inflate
	}
	if _, err := io.ReadFull(r, dst); err != nil {
		return fmt.Errorf("compressed cluster for guest offset %d does not decompress to %d bytes: %w", guest, cs, err)
	}
	q.out.commit(guest, int(min(cs, q.h.size-guest)))
	return nil
}

// holes returns the guest ranges below the virtual size that nothing was
// written to.
func (q *qcow2Stream) holes() []extent {
	w := slices.Clone(q.out.written)
	slices.SortFunc(w, func(a, b extent) int { return int(a.off - b.off) })
	var out []extent
	var at int64
	for _, e := range w {
		if e.off > at {
			out = append(out, extent{at, e.off - at})
		}
		at = max(at, e.off+e.n)
	}
	if at < q.h.size {
		out = append(out, extent{at, q.h.size - at})
	}
	return out
}

// zeroHoles zeroes the guest ranges the image does not carry.
func (q *qcow2Stream) zeroHoles(d *device) error {
	for _, z := range q.holes() {
		if err := d.zeroRange(z.off, z.n); err != nil {
			return fmt.Errorf("zero unallocated range %d+%d: %w", z.off, z.n, err)
		}
		q.res.BytesZeroed += z.n
	}
	return nil
}
