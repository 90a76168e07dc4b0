package image

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
)

// NetbootFile is a first-stage boot binary the controller's boot service
// serves (TFTP, and HTTP for UEFI HTTP boot), copied from a Debian package.
type NetbootFile struct {
	Name    string // in OutDir
	Package string
	Path    string // inside the package
}

// NetbootFiles are what DHCP chain-loads, by firmware: iPXE for BIOS
// (undionly.kpxe: uses the NIC's PXE stack), UEFI (snponly.efi: the
// firmware's network driver) and UEFI HTTP boot (ipxe.efi: its own
// drivers); for UEFI Secure Boot, Debian's Microsoft-signed shim and its
// signed network GRUB (shim loads grubx64.efi from where it came from).
func NetbootFiles() []NetbootFile {
	return []NetbootFile{
		{Name: "undionly.kpxe", Package: "ipxe", Path: "usr/lib/ipxe/undionly.kpxe"},
		{Name: "snponly.efi", Package: "ipxe", Path: "usr/lib/ipxe/snponly.efi"},
		// /usr/lib/ipxe/ipxe.efi is a symlink to it.
		{Name: "ipxe.efi", Package: "ipxe", Path: "boot/ipxe.efi"},
		{Name: "shimx64.efi", Package: "shim-signed", Path: "usr/lib/shim/shimx64.efi.signed"},
		{Name: "grubx64.efi", Package: "grub-efi-amd64-signed", Path: "usr/lib/grub/x86_64-efi-signed/grubnetx64.efi.signed"},
	}
}

// Netboot is what a build copied for network boot, and from where.
type Netboot struct {
	Packages []Package `json:"packages"`
	Files    []File    `json:"files"`
}

// fetchNetboot downloads the packages of files and copies each file into
// outDir under its Name.
func fetchNetboot(ctx context.Context, deb Debian, outDir string, files []NetbootFile) ([]Package, []File, error) {
	var names []string
	seen := map[string]bool{}
	for _, f := range files {
		if !seen[f.Package] {
			seen[f.Package] = true
			names = append(names, f.Package)
		}
	}
	versions, err := deb.Candidates(ctx, names...)
	if err != nil {
		return nil, nil, fmt.Errorf("netboot binaries: %w", err)
	}
	pkgs := map[string]Package{}
	var fetched []Package
	for _, n := range names {
		p, err := deb.Fetch(ctx, n, versions[n])
		if err != nil {
			return nil, nil, fmt.Errorf("netboot binaries: %w", err)
		}
		pkgs[n] = p
		fetched = append(fetched, p)
	}
	var out []File
	for _, f := range files {
		src := filepath.Join(pkgs[f.Package].Root, f.Path)
		if _, err := os.Stat(src); err != nil {
			return nil, nil, fmt.Errorf("netboot binaries: %s %s has no %s: %w", f.Package, pkgs[f.Package].Version, f.Path, err)
		}
		file, err := Assemble(filepath.Join(outDir, f.Name), src)
		if err != nil {
			return nil, nil, err
		}
		file.Path = f.Name
		out = append(out, file)
	}
	return fetched, out, nil
}
