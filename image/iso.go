package image

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/protocol"
)

// ISOName is the hybrid ISO's file name in OutDir.
const ISOName = "anvil.iso"

// ISOSlotPath is the node slot's path on the ISO: an uncompressed cpio of
// protocol.BootSlotSize bytes that both boot loaders load as the second
// initramfs. The controller overwrites it in a copy of the ISO with the
// node's protocol.BootConfig (at ISO.Slot.Offset), which is how a
// per-node ISO is made in milliseconds without any ISO tool.
const ISOSlotPath = "boot/node.cpio"

// DefaultSourceDateEpoch is every timestamp in the ISO (files, volume
// dates, the EFI image's FAT) unless SOURCE_DATE_EPOCH says otherwise:
// 2024-01-01T00:00:00Z. A fixed value makes the same inputs give the same
// bytes (FAT cannot store dates before 1980).
const DefaultSourceDateEpoch = 1704067200

// ISOKernelArgs are the kernel arguments of both boot loaders' entries:
// VGA and the first serial port, as the controller's iPXE script uses by
// default, and anvil.vmedia, which tells the agent's guard it runs in the
// agent ramdisk (hardware.DetectEnvironment; anvil.api= is in the node
// slot, not on the command line). Everything per node comes from the slot.
const ISOKernelArgs = "console=tty0 console=ttyS0,115200n8 anvil.vmedia"

// ISOBootFiles are the boot loaders on the ISO, from Debian packages:
// ISOLINUX for BIOS (El Torito no-emulation entry, and isohdpfx.bin as the
// MBR of the hybrid image for USB sticks), and for UEFI Debian's signed
// shim with its signed CD GRUB (gcdx64.efi, which finds the ISO by
// /.disk/info and reads /boot/grub/grub.cfg), so Secure Boot works too.
func ISOBootFiles() []NetbootFile {
	return []NetbootFile{
		{Name: "isolinux.bin", Package: "isolinux", Path: "usr/lib/ISOLINUX/isolinux.bin"},
		{Name: "isohdpfx.bin", Package: "isolinux", Path: "usr/lib/ISOLINUX/isohdpfx.bin"},
		{Name: "ldlinux.c32", Package: "syslinux-common", Path: "usr/lib/syslinux/modules/bios/ldlinux.c32"},
		{Name: "BOOTX64.EFI", Package: "shim-signed", Path: "usr/lib/shim/shimx64.efi.signed"},
		{Name: "grubx64.efi", Package: "grub-efi-amd64-signed", Path: "usr/lib/grub/x86_64-efi-signed/gcdx64.efi.signed"},
	}
}

// ISO is the hybrid ISO a build wrote, as the manifest records it.
type ISO struct {
	File
	// Tool is the xorriso version that wrote it.
	Tool     string    `json:"tool"`
	Packages []Package `json:"packages"`
	// SourceDateEpoch is every timestamp in the image.
	SourceDateEpoch int64 `json:"source_date_epoch"`
	// Slot is where the per-node configuration goes.
	Slot ISOSlot `json:"node_slot"`
	// EFIImageBytes is the size of the FAT image behind the UEFI El
	// Torito entry (and the GPT/MBR EFI partition).
	EFIImageBytes int64 `json:"efi_image_bytes"`
}

// ISOSlot locates the node slot in the ISO's bytes.
type ISOSlot struct {
	Path   string `json:"path"`
	Offset int64  `json:"offset"`
	Bytes  int64  `json:"bytes"`
}

// ParseSourceDateEpoch reads SOURCE_DATE_EPOCH ("": DefaultSourceDateEpoch).
func ParseSourceDateEpoch(env string) (int64, error) {
	if env == "" {
		return DefaultSourceDateEpoch, nil
	}
	v, err := strconv.ParseInt(env, 10, 64)
	if err != nil || v < 315532800 { // FAT's epoch, 1980
		return 0, fmt.Errorf("SOURCE_DATE_EPOCH=%q: want seconds since 1970, 1980 or later", env)
	}
	return v, nil
}

// ISOInputs are what BuildISO puts on the ISO.
type ISOInputs struct {
	Kernel, Initramfs string // files
	Out               string // the ISO to write
	WorkDir           string // scratch (removed and recreated)
	// Epoch is every timestamp (SOURCE_DATE_EPOCH).
	Epoch int64
}

// BuildISO writes a hybrid ISO (El Torito BIOS and UEFI entries, MBR and
// GPT for USB sticks) holding the kernel, the initramfs and the empty node
// slot, with xorriso and mtools. Everything with a date gets in.Epoch, so
// the same inputs give the same bytes.
func BuildISO(ctx context.Context, deb Debian, in ISOInputs) (*ISO, error) {
	iso := &ISO{SourceDateEpoch: in.Epoch}
	if err := os.RemoveAll(in.WorkDir); err != nil {
		return nil, fmt.Errorf("iso: %w", err)
	}
	tree := filepath.Join(in.WorkDir, "tree")
	loaders := filepath.Join(in.WorkDir, "loaders")
	for _, d := range []string{"boot/grub", "isolinux", ".disk"} {
		if err := os.MkdirAll(filepath.Join(tree, d), 0o755); err != nil {
			return nil, fmt.Errorf("iso: %w", err)
		}
	}
	if err := os.MkdirAll(loaders, 0o755); err != nil {
		return nil, fmt.Errorf("iso: %w", err)
	}
	pkgs, _, err := fetchNetboot(ctx, deb, loaders, ISOBootFiles())
	if err != nil {
		return nil, fmt.Errorf("iso boot loaders: %w", err)
	}
	iso.Packages = pkgs

	initrdName := filepath.Base(in.Initramfs)
	slot, err := protocol.BootConfig{Placeholder: true}.Slot()
	if err != nil {
		return nil, err
	}
	grubCfg := fmt.Sprintf("set timeout=0\nset default=0\nmenuentry \"anvil agent ramdisk\" {\n\tlinux /boot/vmlinuz %s\n\tinitrd /boot/%s /%s\n}\n",
		ISOKernelArgs, initrdName, ISOSlotPath)
	isolinuxCfg := fmt.Sprintf("DEFAULT anvil\nPROMPT 0\nTIMEOUT 0\nLABEL anvil\n  KERNEL /boot/vmlinuz\n  INITRD /boot/%s,/%s\n  APPEND %s\n",
		initrdName, ISOSlotPath, ISOKernelArgs)
	files := []struct {
		path string
		data []byte
		from string
	}{
		{path: ".disk/info", data: []byte("anvil agent ramdisk\n")},
		{path: "boot/vmlinuz", from: in.Kernel},
		{path: "boot/" + initrdName, from: in.Initramfs},
		{path: ISOSlotPath, data: slot},
		{path: "boot/grub/grub.cfg", data: []byte(grubCfg)},
		{path: "isolinux/isolinux.cfg", data: []byte(isolinuxCfg)},
		{path: "isolinux/isolinux.bin", from: filepath.Join(loaders, "isolinux.bin")},
		{path: "isolinux/ldlinux.c32", from: filepath.Join(loaders, "ldlinux.c32")},
	}
	for _, f := range files {
		data := f.data
		if f.from != "" {
			if data, err = os.ReadFile(f.from); err != nil {
				return nil, fmt.Errorf("iso: %w", err)
			}
		}
		if err := os.WriteFile(filepath.Join(tree, f.path), data, 0o644); err != nil {
			return nil, fmt.Errorf("iso: %w", err)
		}
	}

	env := append(os.Environ(), "SOURCE_DATE_EPOCH="+strconv.FormatInt(in.Epoch, 10), "TZ=UTC", "MTOOLS_SKIP_CHECK=1")
	efiImg := filepath.Join(tree, "boot", "efi.img")
	if iso.EFIImageBytes, err = buildEFIImage(ctx, env, efiImg, filepath.Join(loaders, "BOOTX64.EFI"), filepath.Join(loaders, "grubx64.efi")); err != nil {
		return nil, err
	}
	epoch := time.Unix(in.Epoch, 0)
	if err := filepath.Walk(tree, func(p string, _ os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		return os.Chtimes(p, epoch, epoch)
	}); err != nil {
		return nil, fmt.Errorf("iso: %w", err)
	}

	tmp := in.Out + ".tmp"
	_ = os.Remove(tmp)
	args := []string{"-as", "mkisofs", "-o", tmp, "-V", "ANVIL", "-iso-level", "3", "-r",
		"-isohybrid-mbr", filepath.Join(loaders, "isohdpfx.bin"),
		"-c", "isolinux/boot.cat", "-b", "isolinux/isolinux.bin", "-no-emul-boot", "-boot-load-size", "4", "-boot-info-table",
		"-eltorito-alt-boot", "-e", "boot/efi.img", "-no-emul-boot", "-isohybrid-gpt-basdat",
		tree}
	if _, err := runEnv(ctx, "", env, "xorriso", args...); err != nil {
		return nil, fmt.Errorf("iso: %w", err)
	}
	if iso.Tool, err = xorrisoVersion(ctx); err != nil {
		return nil, err
	}
	data, err := os.ReadFile(tmp)
	if err != nil {
		return nil, fmt.Errorf("iso: %w", err)
	}
	off := bytes.Index(data, slot)
	if off < 0 || bytes.LastIndex(data, slot) != off || off%2048 != 0 {
		return nil, fmt.Errorf("iso: the node slot %s is not found exactly once at a sector boundary in %s", ISOSlotPath, tmp)
	}
	iso.Slot = ISOSlot{Path: "/" + ISOSlotPath, Offset: int64(off), Bytes: int64(len(slot))}
	if err := os.Rename(tmp, in.Out); err != nil {
		return nil, fmt.Errorf("iso: %w", err)
	}
	if iso.File, err = hashFile(in.Out); err != nil {
		return nil, err
	}
	iso.File.Path = filepath.Base(in.Out)
	return iso, nil
}

// buildEFIImage writes the FAT image of the UEFI boot entry:
// /EFI/BOOT/BOOTX64.EFI (shim) and /EFI/BOOT/grubx64.efi (GRUB, which shim
// loads from its own directory). mformat gets a fixed serial number and
// mtools takes every date from SOURCE_DATE_EPOCH.
func buildEFIImage(ctx context.Context, env []string, img, shim, grub string) (int64, error) {
	var need int64
	for _, f := range []string{shim, grub} {
		st, err := os.Stat(f)
		if err != nil {
			return 0, fmt.Errorf("iso efi image: %w", err)
		}
		need += st.Size()
	}
	// FAT12/16 overhead and cluster slack: 1 MiB more, rounded to MiB.
	size := (need + 2<<20) &^ (1<<20 - 1)
	if err := os.WriteFile(img, nil, 0o644); err != nil {
		return 0, fmt.Errorf("iso efi image: %w", err)
	}
	if err := os.Truncate(img, size); err != nil {
		return 0, fmt.Errorf("iso efi image: %w", err)
	}
	steps := [][]string{
		{"mformat", "-i", img, "-T", strconv.FormatInt(size/512, 10), "-h", "64", "-s", "32", "-N", "414e5649", "-v", "ANVIL_EFI", "::"},
		{"mmd", "-i", img, "::/EFI", "::/EFI/BOOT"},
		{"mcopy", "-i", img, shim, "::/EFI/BOOT/BOOTX64.EFI"},
		{"mcopy", "-i", img, grub, "::/EFI/BOOT/grubx64.efi"},
	}
	for _, s := range steps {
		if _, err := runEnv(ctx, "", env, s[0], s[1:]...); err != nil {
			return 0, fmt.Errorf("iso efi image: %w", err)
		}
	}
	return size, nil
}

func xorrisoVersion(ctx context.Context) (string, error) {
	out, err := runEnv(ctx, "", nil, "xorriso", "-version")
	if err != nil {
		return "", fmt.Errorf("iso: %w", err)
	}
	first, _, _ := strings.Cut(out, "\n")
	return strings.TrimSpace(first), nil
}
