package erase

import (
	"encoding/binary"
	"fmt"
	"os"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/anvil-metal/anvil/hardware/internal/kernelabi"
)

// NVMe admin commands go through NVME_IOCTL_ADMIN_CMD on the namespace's
// block device (nvme-cli does the same); no nvme binary is needed in the
// ramdisk. Layout of struct nvme_passthru_cmd / nvme_admin_cmd from
// linux/nvme_ioctl.h: 72 bytes.
const (
	nvmeIoctlAdminCmd = kernelabi.NVMeIoctlAdminCmd
	nvmeIoctlID       = 0x4E40 // _IO('N', 0x40): namespace id of the device

	nvmeOpIdentify  = 0x06
	nvmeOpFormatNVM = 0x80

	nvmeCNSNamespace  = 0x00
	nvmeCNSController = 0x01

	// SES field of Format NVM (cdw10 bits 11:9).
	nvmeSESNone     = 0
	nvmeSESUserData = 1
	nvmeSESCrypto   = 2
)

// nvmeAdminCmd is struct nvme_admin_cmd.
type nvmeAdminCmd = kernelabi.NVMeAdminCmd

// NVMeStatusError is a non-zero NVMe completion status: the drive refused.
type NVMeStatusError struct {
	Op     string
	Status uint32
}

func (e *NVMeStatusError) Error() string {
	return fmt.Sprintf("nvme %s: controller returned status 0x%x (%s)", e.Op, e.Status, nvmeStatusText(e.Status))
}

func nvmeStatusText(s uint32) string {
	switch s & 0x7ff {
	case 0x01:
		return "invalid command opcode"
	case 0x02:
		return "invalid field in command"
	case 0x0a:
		return "invalid format"
	case 0x10a:
		return "invalid format"
	case 0x115:
		return "namespace is write protected"
	}
	return "see NVMe status codes"
}

// formatCdw10 builds cdw10 of Format NVM: keep the namespace's current LBA
// format (changing it would silently change the block size) and set SES.
// LBAF bits 3:0 go in cdw10 bits 3:0, bits 5:4 in cdw10 bits 13:12.
func formatCdw10(lbaf uint8, ses uint8) uint32 {
	return uint32(lbaf&0x0f) | uint32(ses&0x7)<<9 | uint32((lbaf>>4)&0x3)<<12
}

// NVMeController is what Identify Controller tells the planner.
type NVMeController struct {
	Serial   string `json:"serial"`
	Model    string `json:"model"`
	Firmware string `json:"firmware"`
	OACS     uint16 `json:"oacs"`
	FNA      uint8  `json:"fna"`
	SANICAP  uint32 `json:"sanicap"`
}

// FormatSupported: OACS bit 1.
func (c NVMeController) FormatSupported() bool { return c.OACS&0x2 != 0 }

// CryptoEraseSupported: FNA bit 2 (cryptographic erase supported as part of
// the secure erase functionality).
func (c NVMeController) CryptoEraseSupported() bool { return c.FNA&0x4 != 0 }

// FormatAppliesToAll: FNA bit 0; formatting one namespace formats all of
// them.
func (c NVMeController) FormatAppliesToAll() bool { return c.FNA&0x1 != 0 }

// SecureEraseAppliesToAll: FNA bit 1; a secure erase (our formats always
// ask for one) of one namespace erases all of them.
func (c NVMeController) SecureEraseAppliesToAll() bool { return c.FNA&0x2 != 0 }

// ParseIdentifyController decodes the 4096-byte Identify Controller page.
func ParseIdentifyController(b []byte) (NVMeController, error) {
	if len(b) < 4096 {
		return NVMeController{}, fmt.Errorf("identify controller: %d bytes, want 4096", len(b))
	}
	return NVMeController{
		Serial:   identityString(b[4:24]),
		Model:    identityString(b[24:64]),
		Firmware: identityString(b[64:72]),
		OACS:     binary.LittleEndian.Uint16(b[256:258]),
		SANICAP:  binary.LittleEndian.Uint32(b[328:332]),
		FNA:      b[524],
	}, nil
}

// NVMeNamespace is what Identify Namespace tells the planner.
type NVMeNamespace struct {
	SizeBlocks uint64 `json:"size_blocks"`
	LBAFormat  uint8  `json:"lba_format"` // index into the LBA format table, in use
	BlockSize  uint64 `json:"block_size"`
	ZeroOnTrim bool   `json:"deallocated_reads_zero"`
	OnesOnTrim bool   `json:"deallocated_reads_ones,omitempty"`
}

// ParseIdentifyNamespace decodes the 4096-byte Identify Namespace page.
func ParseIdentifyNamespace(b []byte) (NVMeNamespace, error) {
	if len(b) < 4096 {
		return NVMeNamespace{}, fmt.Errorf("identify namespace: %d bytes, want 4096", len(b))
	}
	flbas := b[26]
	idx := flbas&0x0f | (flbas>>5&0x3)<<4
	lbaf := b[128+4*int(idx) : 128+4*int(idx)+4]
	ns := NVMeNamespace{
		SizeBlocks: binary.LittleEndian.Uint64(b[0:8]),
		LBAFormat:  idx,
		ZeroOnTrim: b[33]&0x7 == 0x1, // DLFEAT: deallocated blocks read as zeroes
		OnesOnTrim: b[33]&0x7 == 0x2, // ... or as 0xFF
	}
	if lbads := lbaf[2]; lbads >= 9 && lbads < 32 {
		ns.BlockSize = 1 << lbads
	}
	return ns, nil
}

func nvmeNSID(f *os.File) (uint32, error) {
	r, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), nvmeIoctlID, 0)
	if e != 0 {
		return 0, fmt.Errorf("NVME_IOCTL_ID: %w", e)
	}
	return uint32(r), nil
}

// nvmeIdentify reads one identify page. The ioctl returns the NVMe status
// as a positive return value, which we turn into NVMeStatusError.
func nvmeIdentify(f *os.File, nsid uint32, cns uint32) ([]byte, error) {
	buf, free, err := alignedBuffer(4096)
	if err != nil {
		return nil, err
	}
	defer free()
	cmd := nvmeAdminCmd{Opcode: nvmeOpIdentify, NSID: nsid, Addr: uint64(uintptr(unsafe.Pointer(&buf[0]))), DataLen: 4096, Cdw10: cns, TimeoutMs: 10000}
	r, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), nvmeIoctlAdminCmd, uintptr(unsafe.Pointer(&cmd)))
	if e != 0 {
		return nil, fmt.Errorf("nvme identify: %w", e)
	}
	if r != 0 {
		return nil, &NVMeStatusError{Op: "identify", Status: uint32(r)}
	}
	return append([]byte(nil), buf...), nil
}

// NVMeProbe identifies the controller and namespace behind a block device.
func NVMeProbe(path string) (NVMeController, NVMeNamespace, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return NVMeController{}, NVMeNamespace{}, err
	}
	defer f.Close()
	nsid, err := nvmeNSID(f)
	if err != nil {
		return NVMeController{}, NVMeNamespace{}, err
	}
	cb, err := nvmeIdentify(f, 0, nvmeCNSController)
	if err != nil {
		return NVMeController{}, NVMeNamespace{}, err
	}
	ctrl, err := ParseIdentifyController(cb)
	if err != nil {
		return NVMeController{}, NVMeNamespace{}, err
	}
	nb, err := nvmeIdentify(f, nsid, nvmeCNSNamespace)
	if err != nil {
		return ctrl, NVMeNamespace{}, err
	}
	ns, err := ParseIdentifyNamespace(nb)
	return ctrl, ns, err
}

// nvmeFormat runs Format NVM with the given SES on the device's namespace,
// keeping its LBA format. A format can take minutes on large drives; the
// timeout is generous and the ioctl is not interruptible anyway.
func nvmeFormat(f *os.File, lbaf uint8, ses uint8) error {
	nsid, err := nvmeNSID(f)
	if err != nil {
		return err
	}
	cmd := nvmeAdminCmd{Opcode: nvmeOpFormatNVM, NSID: nsid, Cdw10: formatCdw10(lbaf, ses), TimeoutMs: 2 * 60 * 60 * 1000}
	r, _, e := unix.Syscall(unix.SYS_IOCTL, f.Fd(), nvmeIoctlAdminCmd, uintptr(unsafe.Pointer(&cmd)))
	if e != 0 {
		return fmt.Errorf("nvme format: %w", e)
	}
	if r != 0 {
		return &NVMeStatusError{Op: "format", Status: uint32(r)}
	}
	return nil
}
