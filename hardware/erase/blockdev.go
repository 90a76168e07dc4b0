package erase

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/anvil-metal/anvil/hardware/internal/kernelabi"
)

// deviceSize returns the size of an open block device or regular file.
func deviceSize(f *os.File) (uint64, error) {
	st, err := f.Stat()
	if err != nil {
		return 0, err
	}
	if st.Mode().IsRegular() {
		return uint64(st.Size()), nil
	}
	var n uint64
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKGETSIZE64, uintptr(unsafe.Pointer(&n))); e != 0 {
		return 0, fmt.Errorf("BLKGETSIZE64 %s: %w", f.Name(), e)
	}
	return n, nil
}

// isBlockDevice reports whether f is a block device (not a regular file used
// as a stand-in in tests).
func isBlockDevice(f *os.File) bool {
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeDevice != 0 && st.Mode()&os.ModeCharDevice == 0
}

// rangeIoctl issues BLKDISCARD/BLKSECDISCARD/BLKZEROOUT over [off, off+n).
// The kernel splits the range itself; we still chunk it so progress can be
// reported and the context checked between chunks.
func rangeIoctl(f *os.File, req uint, off, n uint64) error {
	r := [2]uint64{off, n}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), uintptr(req), uintptr(unsafe.Pointer(&r[0]))); e != 0 {
		return e
	}
	return nil
}

// rereadPartitions asks the kernel to re-read the partition table (after a
// wipe so stale partitions disappear). Loop devices without partition
// scanning answer EINVAL, which is not an error for us.
func rereadPartitions(f *os.File) error {
	if !isBlockDevice(f) {
		return nil
	}
	_, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKRRPART, 0)
	if e != 0 && !errors.Is(e, unix.EINVAL) {
		return fmt.Errorf("BLKRRPART %s: %w", f.Name(), e)
	}
	return nil
}

// flushBuffers drops the kernel's cached pages of a block device so a
// read-back sees the medium, not what we wrote into the page cache.
func flushBuffers(f *os.File) {
	if isBlockDevice(f) {
		_, _, _ = unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKFLSBUF, 0)
	}
}

// alignedBuffer returns a buffer of n bytes whose address is aligned to 4096,
// as O_DIRECT needs. It is carved out of an anonymous mapping rather than
// the Go heap so alignment is guaranteed and the GC does not scan it.
func alignedBuffer(n int) ([]byte, func(), error) { return kernelabi.Buffer(n) }

// openDirect re-opens path for reading with O_DIRECT when the filesystem
// supports it (block devices do; tmpfs does not), falling back to buffered.
func openReadDirect(path string) (*os.File, bool, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err == nil {
		return f, true, nil
	}
	f, err = os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	return f, false, err
}
