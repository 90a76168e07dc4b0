package imagewrite

// Writing the configdrive after the image, as ironic-python-agent does
// (ironic-lib's create_config_drive_partition): into the partition whose
// filesystem is labelled config-2 when the image has one, else into a new
// partition at the end of the disk, at most 64 MiB, then the ISO is copied
// in. The partition tables are edited here in Go (GPT, with the backup
// moved to the disk's end as sgdisk -e does, or MBR): the ramdisk has no
// sgdisk or parted, and the offsets are written on the whole-disk device,
// so no partition device node has to appear first.

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"os"
	"strings"
	"unicode/utf16"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/internal/redact"
	"github.com/anvil-metal/anvil/protocol"
	"golang.org/x/sys/unix"
)

// configDriveLabel is the filesystem label of a configdrive.
const configDriveLabel = "config-2"

// configDrivePartBytes is the size of a new configdrive partition
// (ironic-lib's MAX_CONFIG_DRIVE_SIZE_MB).
const configDrivePartBytes = protocol.MaxConfigDriveBytes

// mbrLimitSectors: an MBR partition must lie within the first 2 TiB
// (32-bit sector numbers of 512 bytes).
const mbrLimitSectors = 1<<32 - 1

// ConfigDriveResult says where the configdrive went.
type ConfigDriveResult struct {
	Partition   int    `json:"partition"` // 1-based partition number
	Table       string `json:"partition_table"`
	Created     bool   `json:"created"` // false: an existing config-2 partition was overwritten
	OffsetBytes int64  `json:"offset_bytes"`
	SizeBytes   int64  `json:"partition_bytes"`
	ISOBytes    int64  `json:"iso_bytes"`
	Source      string `json:"source"` // "inline" or the redacted URL
}

func configDriveError(msg string, args ...any) error {
	return &protocol.Error{Type: protocol.ErrTypeImageWrite, Code: 500, Message: "configdrive: " + fmt.Sprintf(msg, args...)}
}

// WriteConfigDrive writes a configdrive (base64 gzipped ISO, or an
// HTTP(S) URL of one) onto device, which holds the image just written.
func (w *Writer) WriteConfigDrive(ctx context.Context, device, configdrive string, progress hardware.ProgressFunc) (ConfigDriveResult, error) {
	res := ConfigDriveResult{Source: "inline"}
	iso, err := w.configDriveISO(ctx, configdrive, &res)
	if err != nil {
		return res, err
	}
	res.ISOBytes = int64(len(iso))
	if w.Opener == nil {
		return res, configDriveError("no device guard configured")
	}
	f, err := w.Opener.OpenForWrite(device, 0)
	if err != nil {
		if errors.Is(err, hardware.ErrProtected) {
			return res, &protocol.Error{Type: protocol.ErrTypeProtectedDevice, Code: 403, Message: err.Error()}
		}
		return res, configDriveError("open %s: %v", device, err)
	}
	defer f.Close()
	size, err := sizeOf(f)
	if err != nil {
		return res, configDriveError("size of %s: %v", device, err)
	}
	progress.Report(hardware.Progress{Percent: 99, Message: "writing the configdrive to " + device, Device: device})
	// A new partition gets the ISO before the table points at it; an
	// existing one is overwritten here.
	if err := placeConfigDrive(f, size, sectorSize(f), iso, &res); err != nil {
		return res, configDriveError("%s: %v", device, err)
	}
	if !res.Created {
		if _, err := f.WriteAt(iso, res.OffsetBytes); err != nil {
			return res, configDriveError("write to %s at %d: %v", device, res.OffsetBytes, err)
		}
	}
	if err := f.Sync(); err != nil {
		return res, configDriveError("sync %s: %v", device, err)
	}
	reread(f)
	return res, nil
}

// configDriveISO decodes an inline configdrive or downloads one. As
// ironic-lib does, downloaded content that is not base64 is taken as the
// ISO itself.
func (w *Writer) configDriveISO(ctx context.Context, cd string, res *ConfigDriveResult) ([]byte, error) {
	if !strings.HasPrefix(cd, "http://") && !strings.HasPrefix(cd, "https://") {
		if strings.Contains(cd, "://") {
			return nil, &protocol.Error{Type: protocol.ErrTypeInvalidArgs, Code: 400, Message: "configdrive: only http:// and https:// URLs can be downloaded"}
		}
		iso, err := protocol.DecodeConfigDrive(cd)
		if err != nil {
			return nil, &protocol.Error{Type: protocol.ErrTypeInvalidArgs, Code: 400, Message: err.Error()}
		}
		return iso, nil
	}
	res.Source = redact.URL(cd)
	client := w.Client
	if client == nil {
		client = NewClient()
		defer client.CloseIdleConnections()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, cd, nil)
	if err != nil {
		return nil, &protocol.Error{Type: protocol.ErrTypeInvalidArgs, Code: 400, Message: scrub(fmt.Sprintf("configdrive URL: %v", err), cd, res.Source)}
	}
	resp, err := client.Do(req)
	if err != nil {
		redact.Errors(err)
		return nil, configDriveError("download %s: %s", res.Source, scrub(err.Error(), cd, res.Source))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, configDriveError("download %s: HTTP %s", res.Source, resp.Status)
	}
	// base64 of a gzipped 64 MiB ISO is at most 4/3 of it plus line breaks.
	limit := int64(protocol.MaxConfigDriveBytes)*3/2 + 1
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit))
	if err != nil {
		return nil, configDriveError("download %s: %s", res.Source, scrub(err.Error(), cd, res.Source))
	}
	if int64(len(body)) >= limit {
		return nil, configDriveError("download %s: more than %d bytes", res.Source, limit-1)
	}
	if isBase64(body) {
		iso, err := protocol.DecodeConfigDrive(string(body))
		if err != nil {
			return nil, configDriveError("%s: %v", res.Source, err)
		}
		return iso, nil
	}
	if len(body) > protocol.MaxConfigDriveBytes {
		return nil, configDriveError("%s: %d bytes, more than a configdrive partition's %d", res.Source, len(body), protocol.MaxConfigDriveBytes)
	}
	if len(body) >= 2 && body[0] == 0x1f && body[1] == 0x8b {
		iso, err := protocol.GunzipConfigDrive(body)
		if err != nil {
			return nil, configDriveError("%s: %v", res.Source, err)
		}
		return iso, nil
	}
	if len(body) == 0 {
		return nil, configDriveError("%s is empty", res.Source)
	}
	return body, nil
}

func isBase64(b []byte) bool {
	if len(b) == 0 {
		return false
	}
	for _, c := range b {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || bytes.IndexByte([]byte("+/=\n\r\t "), c) >= 0) {
			return false
		}
	}
	_, err := base64.StdEncoding.DecodeString(strings.Map(func(r rune) rune {
		if r == '\n' || r == '\r' || r == '\t' || r == ' ' {
			return -1
		}
		return r
	}, string(b)))
	return err == nil
}

// sectorSize is the device's logical sector size; 512 for a file.
func sectorSize(f *os.File) int64 {
	if st, err := f.Stat(); err == nil && st.Mode()&os.ModeDevice != 0 {
		if n, err := unix.IoctlGetInt(int(f.Fd()), unix.BLKSSZGET); err == nil && n > 0 {
			return int64(n)
		}
	}
	return 512
}

// diskIO is what the partition code needs of the disk: an *os.File, or
// memory in the fuzz test.
type diskIO interface {
	io.ReaderAt
	io.WriterAt
}

// part is one partition of a table, in sectors.
type part struct {
	num         int
	first, last int64
}

// placeConfigDrive finds or makes the configdrive's partition and sets
// res's partition, offset and size.
func placeConfigDrive(f diskIO, size, ss int64, iso []byte, res *ConfigDriveResult) error {
	mbr := make([]byte, 512)
	if _, err := f.ReadAt(mbr, 0); err != nil {
		return fmt.Errorf("reading the partition table: %w", err)
	}
	if mbr[510] != 0x55 || mbr[511] != 0xAA {
		return errors.New("the image has no partition table (neither GPT nor MBR): a configdrive needs a partitioned whole-disk image")
	}
	isGPT := false
	for i := range 4 {
		if mbr[446+16*i+4] == 0xEE {
			isGPT = true
		}
	}
	var parts []part
	var g *gptTable
	if isGPT {
		var err error
		if g, err = readGPT(f, ss); err != nil {
			return err
		}
		parts = g.parts()
		res.Table = "gpt"
	} else {
		parts = mbrParts(mbr)
		res.Table = "msdos"
	}
	// An existing config-2 partition is overwritten (ironic-lib looks it
	// up by label).
	for _, p := range parts {
		if hasLabel(f, p.first*ss, configDriveLabel) {
			bytes := (p.last - p.first + 1) * ss
			if int64(len(iso)) > bytes {
				return fmt.Errorf("the configdrive (%d bytes) does not fit its partition %d (%d bytes)", len(iso), p.num, bytes)
			}
			res.Partition, res.OffsetBytes, res.SizeBytes = p.num, p.first*ss, bytes
			return nil
		}
	}
	res.Created = true
	if isGPT {
		return g.addConfigDrive(f, size, iso, res)
	}
	return addMBRConfigDrive(f, mbr, parts, size, ss, iso, res)
}

// newPartition places a partition of at most configDrivePartBytes at the
// end of [after, end] (sectors, inclusive), aligned to 1 MiB, big enough
// for the ISO.
func newPartition(after, end, ss int64, isoBytes int) (first, last int64, err error) {
	align := max(1, (1<<20)/ss)
	// rounded up: never more than configDrivePartBytes
	first = (end + 1 - configDrivePartBytes/ss + align - 1) / align * align
	if first <= after {
		first = (after + align) / align * align // the first aligned sector past the last partition
	}
	if first > end || (end-first+1)*ss < int64(isoBytes) {
		return 0, 0, fmt.Errorf("no room for the configdrive (%d bytes) after the last partition (ending at sector %d) before sector %d: the disk is too small for the image and its configdrive", isoBytes, after, end)
	}
	return first, end, nil
}

// hasLabel reports whether the filesystem at off is labelled label: an
// ISO9660 volume identifier or a FAT volume label (what blkid reads).
func hasLabel(f diskIO, off int64, label string) bool {
	pvd := make([]byte, 72)
	if _, err := f.ReadAt(pvd, off+16*2048); err == nil && string(pvd[1:6]) == "CD001" && pvd[0] == 1 {
		if strings.TrimRight(string(pvd[40:72]), " \x00") == label {
			return true
		}
	}
	bs := make([]byte, 90)
	if _, err := f.ReadAt(bs, off); err != nil {
		return false
	}
	for _, at := range []int{43, 71} { // FAT12/16, FAT32 volume label
		if bs[at-5] == 0x29 || bs[at-5] == 0x28 { // extended boot signature before the serial
			if strings.EqualFold(strings.TrimRight(string(bs[at:at+11]), " \x00"), label) {
				return true
			}
		}
	}
	return false
}

// mbrParts are the used primary entries of an MBR.
func mbrParts(mbr []byte) []part {
	var out []part
	for i := range 4 {
		e := mbr[446+16*i:]
		start, n := int64(binary.LittleEndian.Uint32(e[8:])), int64(binary.LittleEndian.Uint32(e[12:]))
		if e[4] == 0 || n == 0 {
			continue
		}
		out = append(out, part{num: i + 1, first: start, last: start + n - 1})
	}
	return out
}

func addMBRConfigDrive(f diskIO, mbr []byte, parts []part, size, ss int64, iso []byte, res *ConfigDriveResult) error {
	slot := -1
	for i := range 4 {
		e := mbr[446+16*i:]
		if e[4] == 0 && binary.LittleEndian.Uint32(e[12:]) == 0 {
			slot = i
			break
		}
	}
	if slot < 0 {
		return fmt.Errorf("the disk uses MBR partitioning and already has %d primary partitions: no room for a configdrive partition", len(parts))
	}
	var after int64
	for _, p := range parts {
		after = max(after, p.last)
	}
	end := min(size/ss, mbrLimitSectors) - 1
	first, last, err := newPartition(after, end, ss, len(iso))
	if err != nil {
		return err
	}
	e := mbr[446+16*slot : 446+16*slot+16]
	clear(e)
	copy(e[1:4], []byte{0xFE, 0xFF, 0xFF}) // CHS unused: LBA only
	e[4] = 0x83                            // Linux
	copy(e[5:8], []byte{0xFE, 0xFF, 0xFF})
	binary.LittleEndian.PutUint32(e[8:], uint32(first))
	binary.LittleEndian.PutUint32(e[12:], uint32(last-first+1))
	// The ISO goes in before the table points at it.
	if _, err := f.WriteAt(iso, first*ss); err != nil {
		return fmt.Errorf("write the configdrive: %w", err)
	}
	if _, err := f.WriteAt(mbr, 0); err != nil {
		return fmt.Errorf("write the MBR: %w", err)
	}
	res.Partition, res.OffsetBytes, res.SizeBytes = slot+1, first*ss, (last-first+1)*ss
	return nil
}

// gptTable is a disk's GUID partition table, as read from its primary header.
type gptTable struct {
	ss      int64
	header  []byte // the primary header's sector
	entries []byte
}

const (
	gptSig        = "EFI PART"
	gptHdrCRC     = 16
	gptMyLBA      = 24
	gptAltLBA     = 32
	gptFirstUse   = 40
	gptLastUse    = 48
	gptEntriesLBA = 72
	gptNumEntries = 80
	gptEntrySize  = 84
	gptEntriesCRC = 88
)

// linuxFSType is the GPT type of a Linux filesystem (sgdisk's 8300, what
// ironic-lib's "sgdisk -n" creates), 0FC63DAF-8483-4772-8E79-3D69D8477DE4
// in its on-disk (mixed-endian) byte order.
func linuxFSType() []byte {
	return []byte{0xAF, 0x3D, 0xC6, 0x0F, 0x83, 0x84, 0x72, 0x47, 0x8E, 0x79, 0x3D, 0x69, 0xD8, 0x47, 0x7D, 0xE4}
}

func readGPT(f diskIO, ss int64) (*gptTable, error) {
	hdr := make([]byte, ss)
	if _, err := f.ReadAt(hdr, ss); err != nil {
		return nil, fmt.Errorf("reading the GPT header: %w", err)
	}
	if string(hdr[:8]) != gptSig {
		return nil, errors.New("the protective MBR announces a GPT but its header is missing")
	}
	hsize := binary.LittleEndian.Uint32(hdr[12:])
	if hsize < 92 || int64(hsize) > ss {
		return nil, fmt.Errorf("GPT header size %d is invalid", hsize)
	}
	h := bytes.Clone(hdr[:hsize])
	binary.LittleEndian.PutUint32(h[gptHdrCRC:], 0)
	if crc32.ChecksumIEEE(h) != binary.LittleEndian.Uint32(hdr[gptHdrCRC:]) {
		return nil, errors.New("the GPT header's checksum is wrong: the image's partition table is corrupt")
	}
	n, esize := binary.LittleEndian.Uint32(hdr[gptNumEntries:]), binary.LittleEndian.Uint32(hdr[gptEntrySize:])
	if n == 0 || n > 1024 || esize < 128 || esize > 1024 || esize%8 != 0 {
		return nil, fmt.Errorf("GPT with %d entries of %d bytes is not supported", n, esize)
	}
	ents := make([]byte, int(n)*int(esize))
	if _, err := f.ReadAt(ents, int64(binary.LittleEndian.Uint64(hdr[gptEntriesLBA:]))*ss); err != nil {
		return nil, fmt.Errorf("reading the GPT entries: %w", err)
	}
	if crc32.ChecksumIEEE(ents) != binary.LittleEndian.Uint32(hdr[gptEntriesCRC:]) {
		return nil, errors.New("the GPT entries' checksum is wrong: the image's partition table is corrupt")
	}
	return &gptTable{ss: ss, header: hdr, entries: ents}, nil
}

func (g *gptTable) entry(i int) []byte {
	es := int(binary.LittleEndian.Uint32(g.header[gptEntrySize:]))
	return g.entries[i*es : (i+1)*es]
}

func (g *gptTable) count() int { return int(binary.LittleEndian.Uint32(g.header[gptNumEntries:])) }

func (g *gptTable) parts() []part {
	var out []part
	for i := range g.count() {
		e := g.entry(i)
		if isZero(e[:16]) {
			continue
		}
		out = append(out, part{num: i + 1, first: int64(binary.LittleEndian.Uint64(e[32:])), last: int64(binary.LittleEndian.Uint64(e[40:]))})
	}
	return out
}

// addConfigDrive adds the configdrive's partition at the disk's end and
// writes both tables, the backup moved to the disk's last sectors (an
// image smaller than the disk has it at the image's end).
func (g *gptTable) addConfigDrive(f diskIO, size int64, iso []byte, res *ConfigDriveResult) error {
	ss := g.ss
	slot := -1
	var after int64
	for i := range g.count() {
		e := g.entry(i)
		if isZero(e[:16]) {
			if slot < 0 {
				slot = i
			}
			continue
		}
		after = max(after, int64(binary.LittleEndian.Uint64(e[40:])))
	}
	if slot < 0 {
		return fmt.Errorf("the GPT's %d entries are all used: no room for a configdrive partition", g.count())
	}
	lastLBA := size/ss - 1
	entrySectors := (int64(len(g.entries)) + ss - 1) / ss
	backupEntries := lastLBA - entrySectors
	lastUsable := backupEntries - 1
	first, last, err := newPartition(after, lastUsable, ss, len(iso))
	if err != nil {
		return err
	}
	e := g.entry(slot)
	clear(e)
	copy(e[0:16], linuxFSType())
	if _, err := rand.Read(e[16:32]); err != nil {
		return fmt.Errorf("partition GUID: %w", err)
	}
	e[16+7] = e[16+7]&0x0f | 0x40 // version 4, in the mixed-endian layout
	e[16+8] = e[16+8]&0x3f | 0x80
	binary.LittleEndian.PutUint64(e[32:], uint64(first))
	binary.LittleEndian.PutUint64(e[40:], uint64(last))
	for i, c := range utf16.Encode([]rune(configDriveLabel)) {
		binary.LittleEndian.PutUint16(e[56+2*i:], c)
	}
	oldAlt := int64(binary.LittleEndian.Uint64(g.header[gptAltLBA:]))
	hsize := binary.LittleEndian.Uint32(g.header[12:])
	entriesCRC := crc32.ChecksumIEEE(g.entries)
	primary := bytes.Clone(g.header)
	binary.LittleEndian.PutUint64(primary[gptAltLBA:], uint64(lastLBA))
	binary.LittleEndian.PutUint64(primary[gptLastUse:], uint64(lastUsable))
	binary.LittleEndian.PutUint32(primary[gptEntriesCRC:], entriesCRC)
	setHeaderCRC(primary, hsize)
	backup := bytes.Clone(primary)
	binary.LittleEndian.PutUint64(backup[gptMyLBA:], uint64(lastLBA))
	binary.LittleEndian.PutUint64(backup[gptAltLBA:], 1)
	binary.LittleEndian.PutUint64(backup[gptEntriesLBA:], uint64(backupEntries))
	setHeaderCRC(backup, hsize)

	// The ISO first, then the backup, then the primary: until the primary
	// header is written the disk reads as the image did.
	if _, err := f.WriteAt(iso, first*ss); err != nil {
		return fmt.Errorf("write the configdrive: %w", err)
	}
	if oldAlt > 1 && oldAlt < lastLBA && oldAlt < first {
		// the image's backup header, now inside free space
		if _, err := f.WriteAt(make([]byte, ss), oldAlt*ss); err != nil {
			return fmt.Errorf("clear the image's backup GPT header: %w", err)
		}
	}
	if _, err := f.WriteAt(g.entries, backupEntries*ss); err != nil {
		return fmt.Errorf("write the backup GPT entries: %w", err)
	}
	if _, err := f.WriteAt(backup, lastLBA*ss); err != nil {
		return fmt.Errorf("write the backup GPT header: %w", err)
	}
	if _, err := f.WriteAt(g.entries, int64(binary.LittleEndian.Uint64(primary[gptEntriesLBA:]))*ss); err != nil {
		return fmt.Errorf("write the GPT entries: %w", err)
	}
	if _, err := f.WriteAt(primary, ss); err != nil {
		return fmt.Errorf("write the GPT header: %w", err)
	}
	// The protective MBR covers the whole disk again.
	pmbr := make([]byte, 512)
	if _, err := f.ReadAt(pmbr, 0); err == nil {
		for i := range 4 {
			if pe := pmbr[446+16*i:]; pe[4] == 0xEE {
				binary.LittleEndian.PutUint32(pe[12:], uint32(min(lastLBA, mbrLimitSectors)))
				if _, err := f.WriteAt(pmbr, 0); err != nil {
					return fmt.Errorf("write the protective MBR: %w", err)
				}
				break
			}
		}
	}
	res.Partition, res.OffsetBytes, res.SizeBytes = slot+1, first*ss, (last-first+1)*ss
	return nil
}

func setHeaderCRC(h []byte, size uint32) {
	binary.LittleEndian.PutUint32(h[gptHdrCRC:], 0)
	binary.LittleEndian.PutUint32(h[gptHdrCRC:], crc32.ChecksumIEEE(h[:size]))
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}
