package image

import (
	"bytes"
	"context"
	"encoding/binary"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/protocol"
)

// elToritoEntry is one boot entry of an El Torito catalogue.
type elToritoEntry struct {
	Platform byte // 0: x86 BIOS, 0xEF: UEFI
	Bootable bool
	Media    byte // 0: no emulation
	LBA      uint32
}

// readElTorito reads the boot catalogue of an ISO the way firmware does:
// the boot record volume descriptor (sector 17) points at the catalogue;
// the validation entry names the first platform, the initial entry
// follows, then sections (header 0x90/0x91 with their platform, entries).
func readElTorito(t *testing.T, iso []byte) []elToritoEntry {
	t.Helper()
	const sector = 2048
	brvd := iso[17*sector : 18*sector]
	require.Equal(t, byte(0), brvd[0], "boot record volume descriptor type")
	require.Equal(t, "CD001", string(brvd[1:6]))
	require.Equal(t, "EL TORITO SPECIFICATION", strings.TrimRight(string(brvd[7:39]), "\x00"))
	cat := iso[int(binary.LittleEndian.Uint32(brvd[71:75]))*sector:]
	require.Equal(t, byte(1), cat[0], "validation entry header")
	require.Equal(t, []byte{0x55, 0xAA}, cat[30:32], "validation entry key")
	var sum uint16
	for i := 0; i < 32; i += 2 {
		sum += binary.LittleEndian.Uint16(cat[i:])
	}
	require.Zero(t, sum, "validation entry checksum")
	entry := func(e []byte, platform byte) elToritoEntry {
		return elToritoEntry{Platform: platform, Bootable: e[0] == 0x88, Media: e[1], LBA: binary.LittleEndian.Uint32(e[8:12])}
	}
	out := []elToritoEntry{entry(cat[32:64], cat[1])}
	for off := 64; off+32 <= sector; {
		h := cat[off : off+32]
		if h[0] != 0x90 && h[0] != 0x91 {
			break
		}
		n := int(binary.LittleEndian.Uint16(h[2:4]))
		for i := 0; i < n; i++ {
			out = append(out, entry(cat[off+32*(i+1):off+32*(i+2)], h[1]))
		}
		off += 32 * (n + 1)
		if h[0] == 0x91 { // last section
			break
		}
	}
	return out
}

// isoFile reads a file back out of an ISO with xorriso (an ISO 9660
// reader independent of the writer's options).
func isoFile(t *testing.T, iso, path string) []byte {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "f")
	out, err := exec.Command("xorriso", "-osirrox", "on", "-indev", iso, "-extract", path, dst).CombinedOutput()
	require.NoError(t, err, "%s", out)
	b, err := os.ReadFile(dst)
	require.NoError(t, err)
	return b
}

func TestBuildISO(t *testing.T) {
	if testing.Short() {
		t.Skip("downloads Debian packages (isolinux, syslinux-common, shim-signed, grub-efi-amd64-signed)")
	}
	for _, bin := range []string{"apt-get", "dpkg", "xorriso", "mformat", "mcopy"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed: %v", bin, err)
		}
	}
	ctx := context.Background()
	cache, err := filepath.Abs(filepath.Join("..", "out", "image-cache"))
	require.NoError(t, err)
	deb := Debian{CacheDir: cache, Log: slog.New(slog.NewTextHandler(t.Output(), nil))}
	dir := t.TempDir()
	kernel, initrd := filepath.Join(dir, "vmlinuz"), filepath.Join(dir, "initramfs.cpio.zst")
	require.NoError(t, os.WriteFile(kernel, bytes.Repeat([]byte("K"), 100000), 0o644))
	require.NoError(t, os.WriteFile(initrd, bytes.Repeat([]byte("I"), 300000), 0o644))

	build := func(name string, epoch int64) (*ISO, []byte) {
		t.Helper()
		out := filepath.Join(dir, name)
		iso, err := BuildISO(ctx, deb, ISOInputs{Kernel: kernel, Initramfs: initrd, Out: out, WorkDir: filepath.Join(dir, name+".work"), Epoch: epoch})
		require.NoError(t, err)
		b, err := os.ReadFile(out)
		require.NoError(t, err)
		return iso, b
	}
	first, data := build("a.iso", DefaultSourceDateEpoch)
	again, _ := build("b.iso", DefaultSourceDateEpoch)
	later, _ := build("c.iso", DefaultSourceDateEpoch+86400)
	assert.Equal(t, first.SHA256, again.SHA256, "same inputs, same bytes")
	assert.NotEqual(t, first.SHA256, later.SHA256, "the epoch is every timestamp, so another one changes the bytes")
	assert.Equal(t, int64(len(data)), first.Bytes)
	assert.Contains(t, first.Tool, "xorriso")

	t.Run("El Torito: BIOS and UEFI entries", func(t *testing.T) {
		entries := readElTorito(t, data)
		require.Len(t, entries, 2)
		assert.Equal(t, elToritoEntry{Platform: 0, Bootable: true, Media: 0, LBA: entries[0].LBA}, entries[0], "BIOS, no emulation")
		assert.Equal(t, elToritoEntry{Platform: 0xEF, Bootable: true, Media: 0, LBA: entries[1].LBA}, entries[1], "UEFI, no emulation")
		// The BIOS entry is isolinux.bin; the UEFI one is a FAT image with shim.
		isolinux := isoFile(t, filepath.Join(dir, "a.iso"), "/isolinux/isolinux.bin")
		assert.Equal(t, isolinux[:64], data[int(entries[0].LBA)*2048:int(entries[0].LBA)*2048+64])
		fat := data[int(entries[1].LBA)*2048:]
		assert.Equal(t, []byte{0x55, 0xAA}, fat[510:512], "FAT boot sector signature")
		assert.Equal(t, "ANVIL_EFI  ", string(fat[43:54]), "FAT volume label")
		assert.Equal(t, []byte{0x55, 0xAA}, data[510:512], "hybrid: MBR for USB sticks")
		assert.Equal(t, "EFI PART", string(data[512:520]), "hybrid: GPT for USB sticks")
	})

	t.Run("boot loader configurations and files", func(t *testing.T) {
		iso := filepath.Join(dir, "a.iso")
		grub := string(isoFile(t, iso, "/boot/grub/grub.cfg"))
		assert.Contains(t, grub, "linux /boot/vmlinuz "+ISOKernelArgs)
		assert.Contains(t, grub, "initrd /boot/initramfs.cpio.zst /boot/node.cpio")
		assert.Contains(t, string(isoFile(t, iso, "/isolinux/isolinux.cfg")), "INITRD /boot/initramfs.cpio.zst,/boot/node.cpio")
		assert.Equal(t, bytes.Repeat([]byte("K"), 100000), isoFile(t, iso, "/boot/vmlinuz"))
		assert.Equal(t, bytes.Repeat([]byte("I"), 300000), isoFile(t, iso, "/boot/initramfs.cpio.zst"))
		assert.NotEmpty(t, isoFile(t, iso, "/.disk/info"), "gcdx64.efi finds the ISO by /.disk/info")
	})

	t.Run("node slot: at the recorded offset, patched in place", func(t *testing.T) {
		placeholder, err := protocol.BootConfig{Placeholder: true}.Slot()
		require.NoError(t, err)
		assert.Equal(t, "/"+ISOSlotPath, first.Slot.Path)
		require.Equal(t, int64(protocol.BootSlotSize), first.Slot.Bytes)
		assert.Equal(t, placeholder, data[first.Slot.Offset:first.Slot.Offset+first.Slot.Bytes])
		slot, err := protocol.BootConfig{Cmdline: "anvil.api=http://192.0.2.10:6385"}.Slot()
		require.NoError(t, err)
		patched := bytes.Clone(data)
		copy(patched[first.Slot.Offset:], slot)
		p := filepath.Join(dir, "node.iso")
		require.NoError(t, os.WriteFile(p, patched, 0o644))
		assert.Equal(t, slot, isoFile(t, p, "/boot/node.cpio"), "the ISO's file is the patched bytes")
	})
}
