package health

import (
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/anvil-metal/anvil/hardware/internal/kernelabi"
)

// Device access: the NVMe admin passthrough and SCSI generic ioctls, as
// nvme-cli and smartctl issue them, so neither tool is needed in the
// ramdisk. Devices are opened read-only; nothing here writes to a disk.
const (
	nvmeIoctlAdminCmd = kernelabi.NVMeIoctlAdminCmd
	nvmeOpGetLogPage  = 0x02
	nvmeLogSMART      = 0x02
	nvmeNSIDAll       = 0xFFFFFFFF

	sgIO          = kernelabi.SGIO
	sgDxferFromDv = -3
)

// SysReader reads SMART data through ioctls.
type SysReader struct{}

// nvmeAdminCmd is struct nvme_admin_cmd.
type nvmeAdminCmd = kernelabi.NVMeAdminCmd

// sgIOHdr is struct sg_io_hdr.
type sgIOHdr = kernelabi.SGIOHdr

// buffer is kernel-writable memory (kernelabi.Buffer).
func buffer(n int) ([]byte, func(), error) { return kernelabi.Buffer(n) }

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
