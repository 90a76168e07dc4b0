// Package directio holds the O_DIRECT helper the erase and image-write
// paths share: both write whole aligned blocks with O_DIRECT and switch it
// off for a ragged tail on the same descriptor.
package directio

import (
	"os"

	"golang.org/x/sys/unix"
)

// Set turns O_DIRECT on or off on an open file.
func Set(f *os.File, on bool) error {
	fl, err := unix.FcntlInt(f.Fd(), unix.F_GETFL, 0)
	if err != nil {
		return err
	}
	if on {
		fl |= unix.O_DIRECT
	} else {
		fl &^= unix.O_DIRECT
	}
	_, err = unix.FcntlInt(f.Fd(), unix.F_SETFL, fl)
	return err
}
