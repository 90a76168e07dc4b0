package health

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Device access: the NVMe admin passthrough and SCSI generic ioctls, as
// nvme-cli and smartctl issue them, so neither tool is needed in the
// ramdisk. Devices are opened read-only; nothing here writes to a disk.
const (
	nvmeIoctlAdminCmd = 0xC0484E41 // _IOWR('N', 0x41, struct nvme_admin_cmd)
	nvmeOpGetLogPage  = 0x02
	nvmeLogSMART      = 0x02
	nvmeNSIDAll       = 0xFFFFFFFF

	sgIO          = 0x2285
	sgDxferFromDv = -3
)

// SysReader reads SMART data through ioctls.
type SysReader struct{}

// nvmeAdminCmd mirrors struct nvme_admin_cmd (linux/nvme_ioctl.h, 72 bytes).
type nvmeAdminCmd struct {
	Opcode, Flags                            uint8
	Rsvd1                                    uint16
	NSID, Cdw2, Cdw3                         uint32
	Metadata, Addr                           uint64
	MetadataLen, DataLen                     uint32
	Cdw10, Cdw11, Cdw12, Cdw13, Cdw14, Cdw15 uint32
	TimeoutMs, Result                        uint32
}

// sgIOHdr mirrors struct sg_io_hdr (88 bytes on 64-bit).
type sgIOHdr struct {
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

// buffer is memory the kernel may write through a raw address: outside
// the Go heap, which may move.
func buffer(n int) ([]byte, func(), error) {
	b, err := unix.Mmap(-1, 0, n, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		return nil, nil, fmt.Errorf("allocate %d bytes: %w", n, err)
	}
	return b, func() { _ = unix.Munmap(b) }, nil
}

// NVMeSMARTLog reads the controller-wide SMART / Health log page.
func (SysReader) NVMeSMARTLog(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	buf, free, err := buffer(4096)
	if err != nil {
		return nil, err
	}
	defer free()
	const n = 512
	// cdw10: number of dwords minus one (bits 27:16), log page id (7:0).
	cmd := nvmeAdminCmd{Opcode: nvmeOpGetLogPage, NSID: nvmeNSIDAll, Addr: uint64(uintptr(unsafe.Pointer(&buf[0]))), DataLen: n,
		Cdw10: uint32(n/4-1)<<16 | nvmeLogSMART, TimeoutMs: 10000}
	r, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), nvmeIoctlAdminCmd, uintptr(unsafe.Pointer(&cmd)))
	if e != 0 {
		return nil, fmt.Errorf("get log page: %w", e)
	}
	if r != 0 {
		return nil, fmt.Errorf("get log page: NVMe status 0x%x", r)
	}
	return append([]byte(nil), buf[:n]...), nil
}

// ATASMARTData issues SMART READ DATA (B0h/D0h) through ATA PASS-THROUGH(16).
func (SysReader) ATASMARTData(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	mem, free, err := buffer(4096 + 512)
	if err != nil {
		return nil, err
	}
	defer free()
	cdb := mem[0:16]
	cdb[0] = 0x85   // ATA PASS-THROUGH(16)
	cdb[1] = 4 << 1 // protocol: PIO data-in
	cdb[2] = 0x0e   // T_DIR from device, BYT_BLOK, T_LENGTH in sector count
	cdb[4] = 0xD0   // feature: SMART READ DATA
	cdb[6] = 1      // one sector
	cdb[10], cdb[12] = 0x4F, 0xC2
	cdb[14] = 0xB0 // SMART
	sense := mem[64:96]
	data := mem[4096:]
	h := sgIOHdr{InterfaceID: 'S', DxferDirection: sgDxferFromDv, CmdLen: 16, MxSbLen: uint8(len(sense)),
		DxferLen: 512, Dxferp: uintptr(unsafe.Pointer(&data[0])), Cmdp: uintptr(unsafe.Pointer(&cdb[0])),
		Sbp: uintptr(unsafe.Pointer(&sense[0])), Timeout: 10000}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), sgIO, uintptr(unsafe.Pointer(&h))); e != 0 {
		return nil, fmt.Errorf("SG_IO: %w", e)
	}
	if h.Status != 0 || h.HostStatus != 0 || h.DriverStatus != 0 {
		// CHECK CONDITION: a SAS or virtual disk refusing the ATA
		// command, or an ATA drive with SMART disabled.
		return nil, fmt.Errorf("SMART READ DATA refused (SCSI status 0x%x, host 0x%x, driver 0x%x)", h.Status, h.HostStatus, h.DriverStatus)
	}
	if h.Resid != 0 {
		return nil, fmt.Errorf("SMART READ DATA: short transfer (%d bytes missing)", h.Resid)
	}
	return append([]byte(nil), data[:512]...), nil
}
