package image

import (
	"bytes"
	"compress/gzip"
	"context"
	"debug/elf"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/klauspost/compress/zstd"
)

// PVHName is the uncompressed kernel in the output directory, written when
// the kernel has a PVH entry point (CONFIG_PVH). QEMU's direct boot
// (-kernel) loads such an ELF itself and enters it in 32-bit mode, so the
// guest skips the bzImage's decompressor: Debian's kernel is xz-compressed,
// and decompressing its 8 MB under TCG emulation takes about 2.7 of the
// 11 s from QEMU start to the agent's first heartbeat. Real servers and
// OVMF boot the bzImage (vmlinuz) as before; the decompressor also applies
// kernel-text KASLR, which a PVH boot therefore does without.
const PVHName = "vmlinux"

// ErrNoPVH means the kernel has no PVH entry point (XEN_ELFNOTE_PHYS32_ENTRY).
var ErrNoPVH = errors.New("kernel has no PVH entry point (CONFIG_PVH)")

// xenNotePhys32Entry is XEN_ELFNOTE_PHYS32_ENTRY: the 32-bit entry point
// a PVH loader (QEMU, Firecracker, cloud-hypervisor) jumps to.
const xenNotePhys32Entry = 18

// ExtractPVH writes the ELF kernel inside bzImage to out, after checking
// that it has a PVH entry point. It returns ErrNoPVH (and writes nothing)
// for a kernel without one.
func ExtractPVH(ctx context.Context, bzImage, out string) error {
	raw, err := os.ReadFile(bzImage)
	if err != nil {
		return fmt.Errorf("pvh: %w", err)
	}
	payload, err := bzPayload(raw)
	if err != nil {
		return fmt.Errorf("pvh: %s: %w", bzImage, err)
	}
	vmlinux, err := decompressKernel(ctx, payload)
	if err != nil {
		return fmt.Errorf("pvh: %s: %w", bzImage, err)
	}
	if err := checkPVH(vmlinux); err != nil {
		return fmt.Errorf("pvh: %s: %w", bzImage, err)
	}
	tmp := out + ".tmp"
	if err := os.WriteFile(tmp, vmlinux, 0o644); err != nil {
		return fmt.Errorf("pvh: %w", err)
	}
	if err := os.Rename(tmp, out); err != nil {
		return fmt.Errorf("pvh: %w", err)
	}
	return nil
}

// bzPayload returns the compressed kernel of an x86 bzImage, from the
// setup header (Linux boot protocol 2.08+: payload_offset/length).
func bzPayload(raw []byte) ([]byte, error) {
	if len(raw) < 0x250 || string(raw[0x202:0x206]) != "HdrS" {
		return nil, errors.New("not an x86 bzImage (no HdrS setup header)")
	}
	if v := binary.LittleEndian.Uint16(raw[0x206:]); v < 0x208 {
		return nil, fmt.Errorf("boot protocol %#x has no payload fields (2.08+ needed)", v)
	}
	setupSects := int(raw[0x1f1])
	if setupSects == 0 {
		setupSects = 4
	}
	start := (setupSects + 1) * 512
	off := int(binary.LittleEndian.Uint32(raw[0x248:]))
	n := int(binary.LittleEndian.Uint32(raw[0x24c:]))
	if off < 0 || n <= 0 || start+off+n > len(raw) || start+off+n < start {
		return nil, fmt.Errorf("payload %d+%d is outside the %d-byte file", start+off, n, len(raw))
	}
	return raw[start+off : start+off+n], nil
}

// decompressKernel decompresses a bzImage payload by its magic. The
// payload ends with the decompressed size (4 bytes), which every reader
// here stops before.
func decompressKernel(ctx context.Context, p []byte) ([]byte, error) {
	switch {
	case bytes.HasPrefix(p, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		// Debian's kernels: xz with the x86 BCJ filter, which no Go xz
		// reader we can use implements; xz-utils is in every Debian.
		if _, err := exec.LookPath("xz"); err != nil {
			return nil, fmt.Errorf("xz-compressed kernel and no xz to decompress it (apt-get install xz-utils): %w", err)
		}
		cmd := exec.CommandContext(ctx, "xz", "--decompress", "--stdout", "--single-stream")
		cmd.Stdin = bytes.NewReader(p)
		var out, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err != nil {
			return nil, fmt.Errorf("xz: %w: %s", err, strings.TrimSpace(stderr.String()))
		}
		return out.Bytes(), nil
	case bytes.HasPrefix(p, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(bytes.NewReader(p))
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		zr.Multistream(false)
		b, err := io.ReadAll(zr)
		if err != nil {
			return nil, fmt.Errorf("gzip: %w", err)
		}
		return b, nil
	case bytes.HasPrefix(p, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		d, err := zstd.NewReader(nil)
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		defer d.Close()
		b, err := d.DecodeAll(p[:len(p)-4], nil)
		if err != nil {
			return nil, fmt.Errorf("zstd: %w", err)
		}
		return b, nil
	}
	n := min(len(p), 6)
	return nil, fmt.Errorf("kernel compression with magic % x is not handled (xz, gzip and zstd are)", p[:n])
}

// checkPVH reports ErrNoPVH unless the ELF carries a Xen
// PHYS32_ENTRY note, which QEMU looks for to boot it.
func checkPVH(vmlinux []byte) error {
	f, err := elf.NewFile(bytes.NewReader(vmlinux))
	if err != nil {
		return fmt.Errorf("decompressed kernel: %w", err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		notes, err := io.ReadAll(p.Open())
		if err != nil {
			return fmt.Errorf("decompressed kernel notes: %w", err)
		}
		if hasNote(notes, f.ByteOrder, "Xen", xenNotePhys32Entry) {
			return nil
		}
	}
	return ErrNoPVH
}

// hasNote walks ELF notes (namesz, descsz, type, name, desc; each padded
// to 4 bytes) for one with this owner and type.
func hasNote(b []byte, bo binary.ByteOrder, owner string, typ uint32) bool {
	// In 64 bits: a corrupt size near 4 GiB must not wrap to a small one.
	pad := func(n uint32) uint64 { return (uint64(n) + 3) &^ 3 }
	for len(b) >= 12 {
		namesz, descsz, t := bo.Uint32(b), bo.Uint32(b[4:]), bo.Uint32(b[8:])
		b = b[12:]
		if pad(namesz)+pad(descsz) > uint64(len(b)) {
			return false
		}
		name := strings.TrimRight(string(b[:namesz]), "\x00")
		if name == owner && t == typ {
			return true
		}
		b = b[pad(namesz)+pad(descsz):]
	}
	return false
}

// pvhCached extracts the PVH kernel once per bzImage content into the
// cache, keyed by the bzImage's SHA-256 (the decompression takes seconds);
// the caller has hashed the bzImage already.
func pvhCached(ctx context.Context, cacheDir, bzImage, sha256 string) (string, error) {
	if len(sha256) < 16 {
		return "", fmt.Errorf("pvh: %s: no hash to key the cache by", bzImage)
	}
	cached := filepath.Join(cacheDir, "vmlinux-"+sha256[:16])
	if _, err := os.Stat(cached); err == nil {
		return cached, nil
	}
	if err := ExtractPVH(ctx, bzImage, cached); err != nil {
		return "", err
	}
	return cached, nil
}
