package image

import (
	"debug/elf"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
)

// ELFClosure returns the archive paths (relative, no leading slash) of
// binary and everything it loads: its interpreter and the transitive
// DT_NEEDED libraries, looked up in the unpacked package roots. The map
// values are host paths with symlinks resolved inside their root.
func ELFClosure(roots []string, binary string) (map[string]string, error) {
	// Where Debian's amd64 dynamic loader looks without an ld.so.cache.
	libDirs := []string{"lib/x86_64-linux-gnu", "usr/lib/x86_64-linux-gnu", "lib64", "lib", "usr/lib"}
	files := map[string]string{}
	var walk func(archivePath string) error
	walk = func(archivePath string) error {
		if _, ok := files[archivePath]; ok {
			return nil
		}
		host, err := resolveIn(roots, archivePath)
		if err != nil {
			return err
		}
		files[archivePath] = host
		f, err := elf.Open(host)
		if err != nil {
			return fmt.Errorf("elf %s: %w", archivePath, err)
		}
		defer f.Close()
		for _, p := range f.Progs {
			if p.Type == elf.PT_INTERP {
				b := make([]byte, p.Filesz)
				if _, err := p.ReadAt(b, 0); err != nil {
					return fmt.Errorf("elf %s: interpreter: %w", archivePath, err)
				}
				interp := strings.TrimLeft(strings.TrimRight(string(b), "\x00"), "/")
				if err := walk(interp); err != nil {
					return err
				}
			}
		}
		libs, err := f.ImportedLibraries()
		if err != nil {
			return fmt.Errorf("elf %s: %w", archivePath, err)
		}
		sort.Strings(libs)
		for _, lib := range libs {
			found := ""
			for _, dir := range libDirs {
				if _, err := resolveIn(roots, path.Join(dir, lib)); err == nil {
					found = path.Join(dir, lib)
					break
				}
			}
			if found == "" {
				return fmt.Errorf("elf %s: library %s not found in %v", archivePath, lib, roots)
			}
			if err := walk(found); err != nil {
				return err
			}
		}
		return nil
	}
	if err := walk(strings.TrimLeft(binary, "/")); err != nil {
		return nil, err
	}
	return files, nil
}

// resolveIn finds rel in the first root that has it, following symlinks
// (absolute ones relative to that root).
func resolveIn(roots []string, rel string) (string, error) {
	for _, root := range roots {
		p := rel
		for range 16 {
			host := filepath.Join(root, p)
			fi, err := os.Lstat(host)
			if err != nil {
				// A parent may be a symlink (Debian's /lib64 -> usr/lib64);
				// not needed for bookworm's packages, so treat as absent.
				break
			}
			if fi.Mode()&os.ModeSymlink == 0 {
				return host, nil
			}
			target, err := os.Readlink(host)
			if err != nil {
				return "", err
			}
			if path.IsAbs(target) {
				p = strings.TrimLeft(target, "/")
			} else {
				p = path.Join(path.Dir(p), target)
			}
			// The target may live in another package (ld.so symlink in
			// libc6 pointing into libc6 is the common case; retry all).
			if h, err := resolveIn(roots, p); err == nil {
				return h, nil
			}
			break
		}
	}
	return "", fmt.Errorf("%s: %w", rel, os.ErrNotExist)
}
