// Package kernelabi holds the Linux ioctl structures the agent passes to
// the kernel for NVMe admin commands and SCSI generic (SG_IO) commands,
// and the memory they point into. The erase steps (which write) and the
// health checks (which only read) both need them; neither may import the
// other, so they live here, once.
package kernelabi

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// Ioctl numbers.
const (
	NVMeIoctlAdminCmd = 0xC0484E41 // _IOWR('N', 0x41, struct nvme_admin_cmd)
	SGIO              = 0x2285
)

// NVMeAdminCmd mirrors struct nvme_admin_cmd (linux/nvme_ioctl.h, 72 bytes).
type NVMeAdminCmd struct {
	Opcode      uint8
	Flags       uint8
	Rsvd1       uint16
	NSID        uint32
	Cdw2        uint32
	Cdw3        uint32
	Metadata    uint64
	Addr        uint64
	MetadataLen uint32
	DataLen     uint32
	Cdw10       uint32
	Cdw11       uint32
	Cdw12       uint32
	Cdw13       uint32
	Cdw14       uint32
	Cdw15       uint32
	TimeoutMs   uint32
	Result      uint32
}

// SGIOHdr mirrors struct sg_io_hdr (scsi/sg.h, 88 bytes on 64-bit).
type SGIOHdr struct {
	InterfaceID    int32
	DxferDirection int32
	CmdLen         uint8
	MxSbLen        uint8
	IovecCount     uint16
	DxferLen       uint32
	Dxferp         uintptr
	Cmdp           uintptr
	Sbp            uintptr
	Timeout        uint32
	Flags          uint32
	PackID         int32
	UsrPtr         uintptr
	Status         uint8
	MaskedStatus   uint8
	MsgStatus      uint8
	SbLenWr        uint8
	HostStatus     uint16
	DriverStatus   uint16
	Resid          int32
	Duration       uint32
	Info           uint32
}

// Buffer returns n bytes of memory the kernel may write through a raw
// address, and its release: an anonymous mapping, outside the Go heap
// (which may move), page-aligned (as O_DIRECT needs).
func Buffer(n int) ([]byte, func(), error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, nil, fmt.Errorf("allocate %d bytes: %w", n, err)
	}
	return b, func() { _ = unix.Munmap(b) }, nil
}
