package partition

import (
	"errors"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Activate makes the kernel see the partitions just written to f: it asks
// for a re-read (BLKRRPART) and then adds any partition the kernel did not
// create itself with BLKPG, as partx -a does. The second step matters on
// kernels built without partition parsers and when a re-read is refused
// because something holds the disk (StoryBoard 2007275: partitions missing
// until a rescan).
func Activate(f *os.File, l Layout) error {
	if st, err := f.Stat(); err != nil || st.Mode()&os.ModeDevice == 0 {
		return err // a regular file (tests): nothing to tell the kernel
	}
	_, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKRRPART, 0)
	rrErr := error(nil)
	if e != 0 {
		rrErr = e
	}
	for i := range l.Start {
		p := unix.BlkpgPartition{Start: int64(l.Start[i]), Length: int64(l.Size[i]), Pno: int32(i + 1)}
		arg := unix.BlkpgIoctlArg{Op: unix.BLKPG_ADD_PARTITION, Datalen: int32(unsafe.Sizeof(p)), Data: (*byte)(unsafe.Pointer(&p))}
		_, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKPG, uintptr(unsafe.Pointer(&arg)))
		if e != 0 && !errors.Is(e, unix.EBUSY) { // EBUSY: the kernel already has it
			return fmt.Errorf("add partition %d of %s (BLKRRPART: %v): %w", i+1, f.Name(), rrErr, e)
		}
	}
	return nil
}

// Forget removes partitions 1..n from the kernel's view of f (BLKPG delete);
// used after wiping a partition table on kernels that do not re-read it.
func Forget(f *os.File, n int) {
	for i := 1; i <= n; i++ {
		p := unix.BlkpgPartition{Pno: int32(i)}
		arg := unix.BlkpgIoctlArg{Op: unix.BLKPG_DEL_PARTITION, Datalen: int32(unsafe.Sizeof(p)), Data: (*byte)(unsafe.Pointer(&p))}
		_, _, _ = unix.Syscall(unix.SYS_IOCTL, f.Fd(), unix.BLKPG, uintptr(unsafe.Pointer(&arg)))
	}
}
