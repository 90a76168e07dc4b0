package image

import (
	"encoding/json"
	"fmt"
	"io"
)

// Manifest describes a built image.
type Manifest struct {
	Kernel struct {
		Package      string `json:"package"`
		ImagePackage string `json:"image_package"`
		Version      string `json:"version"`
		Release      string `json:"release"`
		File         File   `json:"file"`
		// PVH is the same kernel uncompressed, for QEMU direct boot
		// (see PVHName); absent when the kernel has no PVH entry.
		PVH *File `json:"pvh,omitempty"`
	} `json:"kernel"`
	Uroot struct {
		Version  string   `json:"version"`
		Commands []string `json:"commands"`
	} `json:"u_root"`
	Go    string `json:"go"`
	Agent struct {
		Revision string `json:"revision"`
		Dirty    bool   `json:"dirty"`
		Binary   File   `json:"binary"`
	} `json:"agent"`
	Modules struct {
		// Load are loaded at boot; the rest by modalias (coldplug).
		Load    []string    `json:"load"`
		Builtin []string    `json:"builtin,omitempty"`
		Missing []string    `json:"missing,omitempty"`
		Files   int         `json:"files"`
		Bytes   int64       `json:"bytes"`
		Aliases int         `json:"aliases"`
		Classes []ClassInfo `json:"classes"`
		// List is every included module file (lib/modules/<release>/...).
		List []string `json:"list"`
	} `json:"modules"`
	Firmware struct {
		Dir     string `json:"dir,omitempty"`
		Present int    `json:"present"`
		Absent  int    `json:"absent"`
		Bytes   int64  `json:"bytes"`
		// Lacking are included modules with at least one absent file.
		Lacking []string   `json:"modules_lacking_firmware,omitempty"`
		Files   []Firmware `json:"files"`
	} `json:"firmware"`
	Mdadm       *Extra      `json:"mdadm,omitempty"`
	CACerts     *CACerts    `json:"ca_certificates,omitempty"`
	Compression Compression `json:"compression"`
	Base        Part        `json:"base"`
	Overlay     Part        `json:"overlay"`
	Initramfs   File        `json:"initramfs"`
	// Netboot are the first-stage boot binaries (iPXE, shim, GRUB) and
	// the Debian packages they come from.
	Netboot *Netboot `json:"netboot,omitempty"`
	// ISO is the hybrid ISO for virtual media (BIOS and UEFI).
	ISO *ISO `json:"iso,omitempty"`
	// UncompressedBytes is base + overlay cpio size.
	UncompressedBytes int64 `json:"uncompressed_bytes"`
	// Timings of this build, not part of the image identity.
	Timings map[string]string `json:"timings"`
}

// Extra is a program added from Debian packages with what it loads.
type Extra struct {
	Packages []Package `json:"packages"`
	Files    []string  `json:"files"`
	Bytes    int64     `json:"bytes"`
}

// File is an output file's name, size and SHA-256.
type File struct {
	Path   string `json:"path"`
	Bytes  int64  `json:"bytes"`
	SHA256 string `json:"sha256"`
}

// Part is one of the concatenated archives.
type Part struct {
	File
	Key               string `json:"cache_key,omitempty"`
	UncompressedBytes int64  `json:"uncompressed_bytes"`
	Cached            bool   `json:"cached"`
}

// Write writes the manifest as indented JSON.
func (m *Manifest) Write(file string) error {
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	return writeAtomic(file, func(w io.Writer) error {
		_, err := w.Write(append(b, '\n'))
		return err
	})
}
