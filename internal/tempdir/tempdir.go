// Package tempdir makes temporary directories that do not outlive their
// process for long. A process killed outright (SIGKILL, a crash) cannot
// remove its temporary directory, so each one is locked (flock) by its
// process for as long as that lives, and marked as made so; the next
// process to make one with the same prefix (Sweep) removes the marked
// ones nobody holds. The kernel drops a dead process's locks, so no pid
// is trusted (pids are reused), and a live process's directory, another
// controller's on the same machine included, is never taken.
//
// It lives here rather than in controller because it is about files and
// processes, not about the controller.
package tempdir

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Marker is the regular file that marks a directory as made by New; it is
// written once the directory is locked, so a marked directory nobody
// locks is one whose process is gone. It holds the pid, for people.
const Marker = ".owner-pid"

// Dir is a temporary directory this process holds.
type Dir struct {
	Path string
	// lock is the directory's descriptor, flocked; closing it lets Sweep
	// take the directory. A raw descriptor, not an *os.File: a Dir its
	// owner keeps only for the process's sake must not be let go by the
	// garbage collector's finalizer. -1 once let go.
	lock int
}

// New makes a directory in parent ("" = os.TempDir()) named prefix
// followed by a random string, and holds it until Remove.
func New(parent, prefix string) (*Dir, error) {
	path, err := os.MkdirTemp(parent, prefix)
	if err != nil {
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	d, err := hold(path)
	if err != nil {
		os.RemoveAll(path)
		return nil, err
	}
	return d, nil
}

func hold(path string) (*Dir, error) {
	// O_CLOEXEC: a child this process starts (QEMU, a tool) must not keep
	// the lock alive after this process dies.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("temporary directory %s: %w", path, err)
	}
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("temporary directory %s: lock: %w", path, err)
	}
	if err := os.WriteFile(filepath.Join(path, Marker), []byte(strconv.Itoa(os.Getpid())+"\n"), 0o600); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("temporary directory: %w", err)
	}
	return &Dir{Path: path, lock: fd}, nil
}

// Remove removes the directory and lets go of it; it may be called again.
func (d *Dir) Remove() error {
	err := os.RemoveAll(d.Path)
	if d.lock >= 0 {
		unix.Close(d.lock)
		d.lock = -1
	}
	if err != nil {
		return fmt.Errorf("temporary directory: %w", err)
	}
	return nil
}

// Sweep removes the directories in parent ("" = os.TempDir()) named
// prefix... that New made and whose process is gone, and returns them.
// Only directories (not links to them) that this user owns and that carry
// the Marker as a regular file are candidates, and only the ones no
// process holds are removed; anything else with the prefix is left alone.
func Sweep(parent, prefix string) ([]string, error) {
	if parent == "" {
		parent = os.TempDir()
	}
	if prefix == "" || strings.ContainsRune(prefix, filepath.Separator) {
		return nil, fmt.Errorf("sweep %s: prefix %q: want a plain name prefix", parent, prefix)
	}
	entries, err := os.ReadDir(parent)
	if err != nil {
		return nil, fmt.Errorf("sweep %s: %w", parent, err)
	}
	var removed []string
	var errs []error
	for _, e := range entries {
		if !e.IsDir() || !strings.HasPrefix(e.Name(), prefix) {
			continue
		}
		path := filepath.Join(parent, e.Name())
		gone, err := sweepOne(path)
		if err != nil {
			errs = append(errs, err)
		}
		if gone {
			removed = append(removed, path)
		}
	}
	return removed, errors.Join(errs...)
}

// sweepOne removes path if it is an abandoned directory of New's.
func sweepOne(path string) (bool, error) {
	fi, err := os.Lstat(path)
	if err != nil || !fi.IsDir() {
		return false, nil // gone meanwhile, or not a directory
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || int(st.Uid) != os.Getuid() {
		return false, nil
	}
	if m, err := os.Lstat(filepath.Join(path, Marker)); err != nil || !m.Mode().IsRegular() {
		return false, nil // not ours (an older release's, or made by hand)
	}
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return false, fmt.Errorf("sweep %s: %w", path, err)
	}
	defer unix.Close(fd)
	if err := unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB); err != nil {
		if errors.Is(err, unix.EWOULDBLOCK) {
			return false, nil // its process lives
		}
		return false, fmt.Errorf("sweep %s: lock: %w", path, err)
	}
	if err := os.RemoveAll(path); err != nil {
		return false, fmt.Errorf("sweep %s: %w", path, err)
	}
	return true, nil
}
