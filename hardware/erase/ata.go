package erase

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ATA Security Erase is issued through SCSI ATA PASS-THROUGH(16) over SG_IO
// (what hdparm does), so the ramdisk needs no hdparm. u-root's pkg/mount/scuzz
// implements only IDENTIFY and UNLOCK, hence our own commands here.
const (
	sgIO          = 0x2285
	sgDxferNone   = -1
	sgDxferToDev  = -2
	sgDxferFromDv = -3

	ataPassThrough16 = 0x85

	ataProtoNonData = 3
	ataProtoPIOIn   = 4
	ataProtoPIOOut  = 5

	ataCmdIdentify        = 0xEC
	ataCmdSecuritySetPass = 0xF1
	ataCmdSecurityPrepare = 0xF3
	ataCmdSecurityErase   = 0xF4

	// ataPassword is the user password set before erasing, as IPA uses
	// ("NULL"), so a drive left locked by an interrupted erase can be
	// unlocked by either tool.
	ataPassword = "NULL"
)

// errNotApplicable means the method does not apply to this device (not an
// ATA drive, security feature set unsupported); the planner moves on.
var errNotApplicable = errors.New("method not applicable to this device")

// ataCDB builds an ATA PASS-THROUGH(16) CDB for a 28-bit command with one
// 512-byte sector of data (or none).
func ataCDB(proto uint8, command uint8, toDevice bool, hasData bool) [16]byte {
	var c [16]byte
	c[0] = ataPassThrough16
	c[1] = proto << 1
	if hasData {
		// BYT_BLOK=1 (count in blocks), T_LENGTH=2 (count in the sector
		// count field), T_DIR=1 for data from the device.
		c[2] = 0x06
		if !toDevice {
			c[2] |= 0x08
		}
		c[6] = 1 // one sector
	} else {
		c[2] = 0x20 // CK_COND: return the ATA registers so errors are visible
	}
	c[14] = command
	return c
}

// securityPage builds the 512-byte data block of SECURITY SET PASSWORD and
// SECURITY ERASE UNIT: word 0 is the control word (bit 0: master password,
// bit 1: enhanced erase), words 1–16 the password.
func securityPage(password string, enhanced bool) []byte {
	b := make([]byte, 512)
	var ctl uint16
	if enhanced {
		ctl |= 0x2
	}
	binary.LittleEndian.PutUint16(b[0:2], ctl)
	copy(b[2:34], password)
	return b
}

// ATAIdentity is what IDENTIFY DEVICE says about the security feature set.
type ATAIdentity struct {
	Model             string        `json:"model"`
	Serial            string        `json:"serial"`
	SecuritySupported bool          `json:"security_supported"`
	SecurityEnabled   bool          `json:"security_enabled"`
	Locked            bool          `json:"locked"`
	Frozen            bool          `json:"frozen"`
	CountExpired      bool          `json:"count_expired"`
	EnhancedSupported bool          `json:"enhanced_erase_supported"`
	EraseTime         time.Duration `json:"erase_time"`
	EnhancedEraseTime time.Duration `json:"enhanced_erase_time"`
}

// ataString decodes an IDENTIFY string: each 16-bit word holds two
// characters, high byte first.
func ataString(b []byte) string {
	out := make([]byte, len(b))
	for i := 0; i+1 < len(b); i += 2 {
		out[i], out[i+1] = b[i+1], b[i]
	}
	return strings.TrimSpace(string(out))
}

// eraseMinutes decodes words 89/90: with bit 15 set (ACS-3) bits 14:0 are
// the time in 2-minute units, otherwise bits 7:0 are; 0 means not reported.
func eraseMinutes(w uint16) time.Duration {
	var units uint16
	if w&0x8000 != 0 {
		units = w & 0x7fff
	} else {
		units = w & 0xff
	}
	return time.Duration(units) * 2 * time.Minute
}

// ParseATAIdentify decodes a 512-byte IDENTIFY DEVICE block.
func ParseATAIdentify(b []byte) (ATAIdentity, error) {
	if len(b) < 512 {
		return ATAIdentity{}, fmt.Errorf("identify device: %d bytes, want 512", len(b))
	}
	word := func(n int) uint16 { return binary.LittleEndian.Uint16(b[2*n : 2*n+2]) }
	sec := word(128)
	id := ATAIdentity{
		Serial:            ataString(b[20:40]),
		Model:             ataString(b[54:94]),
		SecuritySupported: sec&0x1 != 0 && word(82)&0x2 != 0,
		SecurityEnabled:   sec&0x2 != 0,
		Locked:            sec&0x4 != 0,
		Frozen:            sec&0x8 != 0,
		CountExpired:      sec&0x10 != 0,
		EnhancedSupported: sec&0x20 != 0,
		EraseTime:         eraseMinutes(word(89)),
		EnhancedEraseTime: eraseMinutes(word(90)),
	}
	return id, nil
}

// ataTransport executes one ATA command. dataIn receives data from the
// device; dataOut is sent to it; at most one is non-nil.
type ataTransport interface {
	ata(cdb [16]byte, dataIn, dataOut []byte, timeout time.Duration) error
}

// ataIdentify runs IDENTIFY DEVICE.
func ataIdentify(t ataTransport) (ATAIdentity, error) {
	buf := make([]byte, 512)
	if err := t.ata(ataCDB(ataProtoPIOIn, ataCmdIdentify, false, true), buf, nil, 10*time.Second); err != nil {
		return ATAIdentity{}, err
	}
	return ParseATAIdentify(buf)
}

// ataSecureErase walks the ATA security state machine as IPA does with
// hdparm: refuse frozen or locked drives, set the user password, prepare,
// erase (enhanced if asked), then check the password is gone again — the
// drive clears it only when the erase really completed.
func ataSecureErase(t ataTransport, enhanced bool) error {
	id, err := ataIdentify(t)
	if err != nil {
		return err
	}
	switch {
	case !id.SecuritySupported:
		return fmt.Errorf("%w: ATA security feature set not supported", errNotApplicable)
	case id.Frozen:
		return errors.New("ATA security is frozen (the BIOS froze it; a suspend/resume or hot-plug may unfreeze)")
	case id.Locked:
		return errors.New("drive is locked with an unknown ATA password")
	case id.CountExpired:
		return errors.New("ATA password attempt counter expired; power-cycle the drive")
	case enhanced && !id.EnhancedSupported:
		return fmt.Errorf("%w: enhanced erase not supported", errNotApplicable)
	}
	if !id.SecurityEnabled {
		if err := t.ata(ataCDB(ataProtoPIOOut, ataCmdSecuritySetPass, true, true), nil, securityPage(ataPassword, false), 30*time.Second); err != nil {
			return fmt.Errorf("security set password: %w", err)
		}
	}
	if err := t.ata(ataCDB(ataProtoNonData, ataCmdSecurityPrepare, false, false), nil, nil, 30*time.Second); err != nil {
		return fmt.Errorf("security erase prepare: %w", err)
	}
	timeout := id.EraseTime
	if enhanced {
		timeout = id.EnhancedEraseTime
	}
	timeout = max(2*timeout, 2*time.Hour)
	if err := t.ata(ataCDB(ataProtoPIOOut, ataCmdSecurityErase, true, true), nil, securityPage(ataPassword, enhanced), timeout); err != nil {
		return fmt.Errorf("security erase unit: %w", err)
	}
	after, err := ataIdentify(t)
	if err != nil {
		return fmt.Errorf("identify after erase: %w", err)
	}
	if after.SecurityEnabled {
		return errors.New("ATA security still enabled after erase: the erase did not complete")
	}
	return nil
}

// sgTransport sends ATA commands through SG_IO on an open device.
type sgTransport struct{ f *os.File }

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

func (s sgTransport) ata(cdb [16]byte, dataIn, dataOut []byte, timeout time.Duration) error {
	// Command, sense and data live in one mmap'd block: the kernel gets raw
	// addresses, which must not point into movable Go memory.
	mem, free, err := alignedBuffer(4096 + 512)
	if err != nil {
		return err
	}
	defer free()
	copy(mem[0:16], cdb[:])
	sense := mem[64:96]
	data := mem[4096:]
	h := sgIOHdr{
		InterfaceID:    'S',
		DxferDirection: sgDxferNone,
		CmdLen:         16,
		MxSbLen:        uint8(len(sense)),
		Cmdp:           uintptr(unsafe.Pointer(&mem[0])),
		Sbp:            uintptr(unsafe.Pointer(&sense[0])),
		Timeout:        uint32(timeout / time.Millisecond),
	}
	switch {
	case dataIn != nil:
		h.DxferDirection, h.DxferLen, h.Dxferp = sgDxferFromDv, uint32(len(dataIn)), uintptr(unsafe.Pointer(&data[0]))
	case dataOut != nil:
		copy(data, dataOut)
		h.DxferDirection, h.DxferLen, h.Dxferp = sgDxferToDev, uint32(len(dataOut)), uintptr(unsafe.Pointer(&data[0]))
	}
	if _, _, e := unix.Syscall(unix.SYS_IOCTL, s.f.Fd(), sgIO, uintptr(unsafe.Pointer(&h))); e != 0 {
		if errors.Is(e, unix.ENOTTY) || errors.Is(e, unix.EINVAL) {
			return fmt.Errorf("%w: SG_IO: %v", errNotApplicable, e)
		}
		return fmt.Errorf("SG_IO: %w", e)
	}
	if h.HostStatus != 0 || h.DriverStatus&^0x08 != 0 { // DRIVER_SENSE alone is expected with CK_COND
		return fmt.Errorf("SG_IO: host status 0x%x, driver status 0x%x", h.HostStatus, h.DriverStatus)
	}
	if err := ataSenseError(sense[:h.SbLenWr]); err != nil {
		return err
	}
	if dataIn != nil {
		copy(dataIn, data[:len(dataIn)])
	}
	return nil
}

// ataSenseError decodes the ATA status return descriptor (0x09) in
// descriptor-format sense data: ERR (bit 0) in the status register means the
// drive aborted the command.
func ataSenseError(sense []byte) error {
	if len(sense) < 8 || sense[0]&0x7f != 0x72 {
		return nil
	}
	desc := sense[8:]
	for len(desc) >= 2 {
		n := int(desc[1]) + 2
		if n > len(desc) {
			break
		}
		if desc[0] == 0x09 && n >= 14 {
			status, errReg := desc[13], desc[3]
			if status&0x01 != 0 {
				return fmt.Errorf("ATA command aborted (status 0x%02x, error 0x%02x)", status, errReg)
			}
			return nil
		}
		desc = desc[n:]
	}
	return nil
}

// ATAProbe identifies an ATA drive behind a SCSI/SATA block device.
func ATAProbe(path string) (ATAIdentity, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return ATAIdentity{}, err
	}
	defer f.Close()
	return ataIdentify(sgTransport{f: f})
}
