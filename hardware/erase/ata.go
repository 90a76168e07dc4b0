package erase

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/anvil-metal/anvil/protocol"

	"github.com/anvil-metal/anvil/hardware/internal/kernelabi"
)

// ATA Security Erase is issued through SCSI ATA PASS-THROUGH(16) over SG_IO
// (what hdparm does), so the ramdisk needs no hdparm. u-root's pkg/mount/scuzz
// implements only IDENTIFY and UNLOCK, hence our own commands here.
const (
	sgIO          = kernelabi.SGIO
	sgDxferNone   = -1
	sgDxferToDev  = -2
	sgDxferFromDv = -3
	sgDriverSense = 0x08

	ataPassThrough16 = 0x85

	ataProtoNonData = 3
	ataProtoPIOIn   = 4
	ataProtoPIOOut  = 5

	ataCmdIdentify        = 0xEC
	ataCmdSecuritySetPass = 0xF1
	ataCmdSecurityUnlock  = 0xF2
	ataCmdSecurityPrepare = 0xF3
	ataCmdSecurityErase   = 0xF4
	ataCmdSecurityDisable = 0xF6

	ataStatusERR = 0x01
	ataStatusDF  = 0x20

	scsiStatusGood           = 0x00
	scsiStatusCheckCondition = 0x02

	senseKeyNoSense        = 0x0
	senseKeyRecoveredError = 0x1
	senseKeyIllegalRequest = 0x5
	ascInvalidOpcode       = 0x20

	// ataPassword is the user password set for the erase. IPA asks hdparm
	// for "NULL", which hdparm 9.51 and later send as 32 zero bytes, so the
	// empty password is what an interrupted IPA erase leaves behind and
	// what IPA tries on a locked drive: using it keeps the two tools able
	// to recover each other's drives.
	ataPassword = ""
	// ataLegacyPassword is the literal "NULL" that earlier anvil builds and
	// hdparm before 9.51 set; a drive they left locked still carries it.
	ataLegacyPassword = "NULL"

	ataSecurityTimeout = 30 * time.Second
	// ataCleanupTimeout bounds taking our password off the drive after a
	// failure: short, because it runs after the step may have been
	// cancelled, and two commands are all it takes.
	ataCleanupTimeout = time.Minute
)

// errNotApplicable means the method does not apply to this device (not an
// ATA drive, security feature set unsupported); the planner moves on.
var errNotApplicable = errors.New("method not applicable to this device")

// errATAPasswordLeft marks an erase failure after which our user password
// could not be taken off the drive: it locks itself at its next power-on.
var errATAPasswordLeft = errors.New("the ATA user password is still set: the drive will be locked after its next power-on " +
	"(the next anvil clean unlocks it; by hand: hdparm --user-master u --security-unlock NULL, then --security-disable NULL)")

// ataPasswordName renders a password candidate for messages; the empty one
// is what hdparm and IPA call "NULL".
func ataPasswordName(pw string) string {
	if pw == "" {
		return "empty (hdparm's NULL)"
	}
	return fmt.Sprintf("%q", pw)
}

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

// securityPage builds the 512-byte data block of the SECURITY commands that
// carry a password (SET PASSWORD, UNLOCK, ERASE UNIT, DISABLE PASSWORD):
// word 0 is the control word (bit 0: master password, bit 1: enhanced
// erase), words 1–16 the password.
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
	return identityString(out)
}

// identityString is a model, serial or firmware field of an IDENTIFY page
// as results report it: padding trimmed, and NULs and bytes that are not
// UTF-8 (a drive may pad with NULs) cleaned, since the controller refuses
// to store them.
func identityString(b []byte) string {
	return strings.TrimSpace(protocol.CleanString(string(b)))
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
// device; dataOut is sent to it; at most one is non-nil. A command already
// sent is not interrupted by ctx (a drive in the middle of SECURITY ERASE
// UNIT only stops for a reset, which leaves it in a worse state), but a
// done ctx must stop the next one: ata then returns ctx.Err() unsent.
type ataTransport interface {
	ata(ctx context.Context, cdb [16]byte, dataIn, dataOut []byte, timeout time.Duration) error
}

// ataIdentify runs IDENTIFY DEVICE.
func ataIdentify(ctx context.Context, t ataTransport) (ATAIdentity, error) {
	buf := make([]byte, 512)
	if err := t.ata(ctx, ataCDB(ataProtoPIOIn, ataCmdIdentify, false, true), buf, nil, 10*time.Second); err != nil {
		return ATAIdentity{}, err
	}
	return ParseATAIdentify(buf)
}

// ataSecurity sends one of the SECURITY commands that carry a user password.
func ataSecurity(ctx context.Context, t ataTransport, cmd uint8, password string, enhanced bool, timeout time.Duration) error {
	return t.ata(ctx, ataCDB(ataProtoPIOOut, cmd, true, true), nil, securityPage(password, enhanced), timeout)
}

// ataRefusal says why the drive in state id cannot be erased with ATA
// security commands at all, before anything is sent to it.
func ataRefusal(id ATAIdentity, enhanced bool) error {
	switch {
	case !id.SecuritySupported:
		return fmt.Errorf("%w: ATA security feature set not supported", errNotApplicable)
	case id.Frozen:
		return errors.New("ATA security is frozen (the BIOS froze it; a suspend/resume or hot-plug may unfreeze)")
	case id.CountExpired:
		return errors.New("ATA password attempt counter expired; power-cycle the drive")
	case enhanced && !id.EnhancedSupported:
		return fmt.Errorf("%w: enhanced erase not supported", errNotApplicable)
	}
	return nil
}

// ataSecureErase walks the ATA security state machine as IPA does
// with hdparm: refuse frozen drives, take off a password an interrupted
// anvil or IPA erase left (locked or not), set the user password, prepare,
// erase (enhanced if asked), then check the password is gone again — the
// drive clears it only when the erase really completed. Once our password
// is on the drive every failure, cancellation included, tries to take it
// off again, because a drive left with security enabled locks itself at its
// next power-on and every later clean would refuse it.
func ataSecureErase(ctx context.Context, t ataTransport, enhanced bool) error {
	id, err := ataIdentify(ctx, t)
	if err != nil {
		return fmt.Errorf("identify device: %w", err)
	}
	if err := ataRefusal(id, enhanced); err != nil {
		return err
	}
	if id.Locked || id.SecurityEnabled {
		if err := ataRecoverPassword(ctx, t, id, enhanced); err != nil {
			return err
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := ataSecurity(ctx, t, ataCmdSecuritySetPass, ataPassword, false, ataSecurityTimeout); err != nil {
		// A timed-out or lost SET PASSWORD may still have reached the drive.
		return ataReleasePassword(ctx, t, fmt.Errorf("security set password: %w", err), true)
	}
	if err := ataEraseUnit(ctx, t, id, enhanced); err != nil {
		return ataReleasePassword(ctx, t, err, false)
	}
	return nil
}

// ataRecoverPassword takes off the user password an interrupted anvil or
// IPA erase leaves (in either of its encodings) and refuses the drive if
// that was not the password. Other passwords are not guessed: wrong unlock
// attempts count against the drive's limit of five per power cycle, after
// which only a power cycle lets even the right password in.
func ataRecoverPassword(ctx context.Context, t ataTransport, id ATAIdentity, enhanced bool) error {
	locked := id.Locked
	var failures []string
	for _, pw := range [...]string{ataPassword, ataLegacyPassword} {
		if locked {
			if err := ataSecurity(ctx, t, ataCmdSecurityUnlock, pw, false, ataSecurityTimeout); err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("security unlock: %w", err)
				}
				failures = append(failures, fmt.Sprintf("unlock with the %s password: %v", ataPasswordName(pw), err))
				continue
			}
			locked = false
		}
		if err := ataSecurity(ctx, t, ataCmdSecurityDisable, pw, false, ataSecurityTimeout); err != nil {
			if ctx.Err() != nil {
				return fmt.Errorf("security disable password: %w", err)
			}
			failures = append(failures, fmt.Sprintf("disable with the %s password: %v", ataPasswordName(pw), err))
			continue
		}
		break
	}
	after, err := ataIdentify(ctx, t)
	if err != nil {
		return fmt.Errorf("identify after clearing the ATA password: %w", err)
	}
	tried := strings.Join(failures, "; ")
	switch {
	case after.Locked:
		msg := "drive is locked with an unknown ATA password"
		if after.CountExpired {
			msg += " and its attempt counter expired (power-cycle before trying again)"
		}
		return fmt.Errorf("%s: it is not the password an interrupted anvil or IPA erase leaves (%s); unlock it with its password first", msg, tried)
	case after.SecurityEnabled:
		return fmt.Errorf("ATA security is enabled with an unknown user password: it is not the password an interrupted anvil or IPA erase leaves (%s); disable it with its password first", tried)
	}
	return ataRefusal(after, enhanced)
}

// ataEraseUnit runs SECURITY ERASE PREPARE and UNIT with our password set
// and checks that the drive dropped the password, which it does only once
// the erase is complete.
func ataEraseUnit(ctx context.Context, t ataTransport, id ATAIdentity, enhanced bool) error {
	if err := t.ata(ctx, ataCDB(ataProtoNonData, ataCmdSecurityPrepare, false, false), nil, nil, ataSecurityTimeout); err != nil {
		return fmt.Errorf("security erase prepare: %w", err)
	}
	timeout := id.EraseTime
	if enhanced {
		timeout = id.EnhancedEraseTime
	}
	timeout = max(2*timeout, 2*time.Hour)
	if err := ataSecurity(ctx, t, ataCmdSecurityErase, ataPassword, enhanced, timeout); err != nil {
		return fmt.Errorf("security erase unit: %w", err)
	}
	// The erase ran to completion (a sent command is never interrupted):
	// an abort that arrived meanwhile must not skip confirming it.
	after, err := ataIdentify(context.WithoutCancel(ctx), t)
	if err != nil {
		return fmt.Errorf("identify after erase: %w", err)
	}
	if after.SecurityEnabled {
		return errors.New("ATA security still enabled after erase: the erase did not complete")
	}
	return nil
}

// ataReleasePassword makes a best effort to take our user password off the
// drive after cause ended the erase, and says in the returned error whether
// that worked. It uses a context of its own so that a cancelled step still
// cleans up. With mayBeUnset the password is first checked for, as after a
// failed SET PASSWORD.
func ataReleasePassword(ctx context.Context, t ataTransport, cause error, mayBeUnset bool) error {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), ataCleanupTimeout)
	defer cancel()
	if mayBeUnset {
		if id, err := ataIdentify(cctx, t); err == nil && !id.SecurityEnabled {
			return cause
		}
	}
	derr := ataSecurity(cctx, t, ataCmdSecurityDisable, ataPassword, false, ataSecurityTimeout)
	if derr == nil {
		return fmt.Errorf("%w (the ATA user password was cleared again with SECURITY DISABLE PASSWORD)", cause)
	}
	// DISABLE PASSWORD also fails when no password is set any more (the
	// erase did finish, or SET PASSWORD never took): only the drive's own
	// state tells whether it will lock.
	if id, err := ataIdentify(cctx, t); err == nil && !id.SecurityEnabled {
		return fmt.Errorf("%w (ATA security is not enabled: no password is left on the drive)", cause)
	}
	return fmt.Errorf("%w; clearing the ATA user password FAILED (security disable password: %v): %w", cause, derr, errATAPasswordLeft)
}

// sgTransport sends ATA commands through SG_IO on an open device.
type sgTransport struct{ f *os.File }

// sgIOHdr is struct sg_io_hdr.
type sgIOHdr = kernelabi.SGIOHdr

func (s sgTransport) ata(ctx context.Context, cdb [16]byte, dataIn, dataOut []byte, timeout time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
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
	if err := sgResult(&h, sense[:min(int(h.SbLenWr), len(sense))], dataIn != nil); err != nil {
		return err
	}
	if dataIn != nil {
		copy(dataIn, data[:len(dataIn)])
	}
	return nil
}

// sgResult judges a completed SG_IO ATA PASS-THROUGH: the host adapter, the
// driver, the SCSI status, the sense data and, for reads, the transfer
// length must all agree that the command succeeded, since one layer
// reporting nothing does not mean the others saw no error.
func sgResult(h *sgIOHdr, sense []byte, dataIn bool) error {
	if h.HostStatus != 0 || h.DriverStatus&^sgDriverSense != 0 { // DRIVER_SENSE alone is expected with CK_COND
		return fmt.Errorf("SG_IO: host status 0x%x, driver status 0x%x", h.HostStatus, h.DriverStatus)
	}
	if err := ataSenseError(h.Status, sense); err != nil {
		return err
	}
	if dataIn && h.Resid != 0 {
		// A short IDENTIFY would read as zeros, e.g. "security not
		// enabled" right after an erase that did not happen.
		return fmt.Errorf("SG_IO: short transfer (%d bytes missing)", h.Resid)
	}
	return nil
}

// senseData is the part of SCSI sense data an ATA PASS-THROUGH needs.
type senseData struct {
	key, asc, ascq      uint8
	deferred            bool
	hasATA              bool // ATA status and error registers present
	ataStatus, ataError uint8
}

// parseSense decodes fixed (0x70/0x71) and descriptor (0x72/0x73) format
// sense data. libata answers in fixed format unless the D_SENSE bit of the
// control mode page is set, which is not the default, so both occur.
func parseSense(b []byte) (senseData, bool) {
	var s senseData
	if len(b) == 0 {
		return s, false
	}
	switch b[0] & 0x7f {
	case 0x72, 0x73:
		if len(b) < 8 {
			return s, false
		}
		s.key, s.asc, s.ascq, s.deferred = b[1]&0x0f, b[2], b[3], b[0]&0x7f == 0x73
		desc := b[8:min(len(b), 8+int(b[7]))]
		for len(desc) >= 2 {
			n := int(desc[1]) + 2
			if n > len(desc) {
				break
			}
			if desc[0] == 0x09 && n >= 14 { // ATA Status Return
				s.hasATA, s.ataError, s.ataStatus = true, desc[3], desc[13]
				break
			}
			desc = desc[n:]
		}
	case 0x70, 0x71:
		if len(b) < 14 {
			return s, false
		}
		// SAT puts ERROR and STATUS in the INFORMATION field (bytes 3
		// and 4) of fixed format sense for ATA PASS-THROUGH.
		s.key, s.asc, s.ascq, s.deferred = b[2]&0x0f, b[12], b[13], b[0]&0x7f == 0x71
		s.hasATA, s.ataError, s.ataStatus = true, b[3], b[4]
	default:
		return s, false
	}
	return s, true
}

// ataSenseError turns the SCSI status and sense data of an ATA PASS-THROUGH
// into an error. With CK_COND a success comes back as CHECK CONDITION with
// RECOVERED ERROR sense, so CHECK CONDITION alone is no failure; the ATA
// status register (ERR, DF) and the sense key decide, and CHECK CONDITION
// without readable sense data is a failure of unknown cause.
func ataSenseError(status uint8, sense []byte) error {
	s, ok := parseSense(sense)
	switch status &^ 1 {
	case scsiStatusGood:
		if !ok {
			return nil
		}
	case scsiStatusCheckCondition:
		if !ok {
			return fmt.Errorf("SCSI CHECK CONDITION without usable sense data (%d bytes)", len(sense))
		}
	default:
		return fmt.Errorf("SCSI status 0x%02x", status)
	}
	if s.hasATA && s.ataStatus&(ataStatusERR|ataStatusDF) != 0 {
		if s.ataStatus&ataStatusDF != 0 {
			return fmt.Errorf("ATA device fault (status 0x%02x, error 0x%02x)", s.ataStatus, s.ataError)
		}
		return fmt.Errorf("ATA command aborted (status 0x%02x, error 0x%02x)", s.ataStatus, s.ataError)
	}
	if s.deferred {
		// A deferred error belongs to an earlier command, but the
		// current one was not executed.
		return fmt.Errorf("SCSI deferred error: sense key 0x%x, ASC/ASCQ 0x%02x/0x%02x", s.key, s.asc, s.ascq)
	}
	switch s.key {
	case senseKeyNoSense, senseKeyRecoveredError:
		return nil
	case senseKeyIllegalRequest:
		if s.asc == ascInvalidOpcode {
			return fmt.Errorf("%w: ATA PASS-THROUGH not supported (sense key 0x%x, ASC/ASCQ 0x%02x/0x%02x)", errNotApplicable, s.key, s.asc, s.ascq)
		}
	}
	return fmt.Errorf("SCSI sense key 0x%x, ASC/ASCQ 0x%02x/0x%02x", s.key, s.asc, s.ascq)
}

// ATAProbe identifies an ATA drive behind a SCSI/SATA block device.
func ATAProbe(path string) (ATAIdentity, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return ATAIdentity{}, err
	}
	defer f.Close()
	return ataIdentify(context.Background(), sgTransport{f: f})
}
