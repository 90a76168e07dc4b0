// Package regularfile opens files that are served to others (boot files
// over TFTP and HTTP) so that nothing but a regular file is ever read: a
// FIFO, device node, socket or directory placed where a boot file is
// expected is refused at once instead of blocking the reader (opening a
// FIFO for reading waits for a writer) or being read.
//
// It lives here rather than in either server because the TFTP server
// (controller/boot/tftp) and the HTTP API (controller/api) both need it,
// and neither may import the other.
package regularfile

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"syscall"
)

// ErrNotRegular is returned for a name that exists but is not a regular
// file (after following symlinks).
var ErrNotRegular = errors.New("not a regular file")

// Open opens the file at path for reading if it is a regular file.
// Symlinks are followed, as os.Open does.
func Open(path string) (*os.File, error) {
	return open(hostFS{}, path)
}

// OpenIn opens name inside root for reading if it is a regular file;
// root keeps the name (symlinks included) from leaving it.
func OpenIn(root *os.Root, name string) (*os.File, error) {
	return open(root, name)
}

// opener is the part of *os.Root that open uses; hostFS is the same over
// the whole file system.
type opener interface {
	Stat(name string) (fs.FileInfo, error)
	OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error)
}

type hostFS struct{}

func (hostFS) Stat(name string) (fs.FileInfo, error) { return os.Stat(name) }
func (hostFS) OpenFile(name string, flag int, perm fs.FileMode) (*os.File, error) {
	return os.OpenFile(name, flag, perm)
}

// open checks the type before opening, so a device node is never opened
// (opening some has side effects), then opens without blocking and checks
// again on the open descriptor, in case the name was replaced in between.
// O_NONBLOCK makes open() of a FIFO return at once; it means nothing for a
// regular file, and is cleared anyway so reads behave as usual.
func open(o opener, name string) (*os.File, error) {
	st, err := o.Stat(name)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, notRegular(name, st.Mode())
	}
	f, err := o.OpenFile(name, os.O_RDONLY|syscall.O_NONBLOCK|syscall.O_NOCTTY, 0)
	if err != nil {
		return nil, err
	}
	if st, err = f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		if err != nil {
			return nil, err
		}
		return nil, notRegular(name, st.Mode())
	}
	if err := setBlocking(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	return f, nil
}

func notRegular(name string, mode fs.FileMode) error {
	return &fs.PathError{Op: "open", Path: name, Err: fmt.Errorf("%w: %s", ErrNotRegular, kind(mode))}
}

func kind(mode fs.FileMode) string {
	switch {
	case mode&fs.ModeNamedPipe != 0:
		return "a FIFO"
	case mode.IsDir():
		return "a directory"
	case mode&fs.ModeSocket != 0:
		return "a socket"
	case mode&fs.ModeDevice != 0:
		return "a device"
	}
	return "of type " + mode.Type().String()
}

// setBlocking clears O_NONBLOCK. The runtime does not poll regular files
// (epoll refuses them), so the descriptor is ours to change.
func setBlocking(f *os.File) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var serr error
	if err := rc.Control(func(fd uintptr) { serr = syscall.SetNonblock(int(fd), false) }); err != nil {
		return err
	}
	return serr
}
