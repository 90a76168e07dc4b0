package erase

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// ataIdentifyBlock builds an IDENTIFY DEVICE response.
func ataIdentifyBlock(sec uint16, eraseUnits, enhancedUnits uint16) []byte {
	b := make([]byte, 512)
	put := func(word int, v uint16) { binary.LittleEndian.PutUint16(b[2*word:], v) }
	put(82, 0x2) // security feature set supported
	put(128, sec)
	put(89, eraseUnits)
	put(90, enhancedUnits)
	model := "ATA Test Disk" // byte-swapped per word
	m := []byte(model + "                                        ")[:40]
	for i := 0; i < 40; i += 2 {
		b[54+i], b[54+i+1] = m[i+1], m[i]
	}
	return b
}

func TestParseATAIdentify(t *testing.T) {
	id, err := ParseATAIdentify(ataIdentifyBlock(0x0021, 60, 0x8000|300))
	require.NoError(t, err)
	assert.Equal(t, "ATA Test Disk", id.Model)
	assert.True(t, id.SecuritySupported)
	assert.True(t, id.EnhancedSupported)
	assert.False(t, id.Frozen)
	assert.Equal(t, 120*time.Minute, id.EraseTime)
	assert.Equal(t, 600*time.Minute, id.EnhancedEraseTime, "ACS-3 extended format")

	frozen, err := ParseATAIdentify(ataIdentifyBlock(0x0009, 0, 0))
	require.NoError(t, err)
	assert.True(t, frozen.Frozen)
	assert.Zero(t, frozen.EraseTime)

	odd := ataIdentifyBlock(0x0021, 0, 0)
	swapped := func(at int, s string, n int) { // an IDENTIFY string: n bytes, NUL padded
		m := append([]byte(s), make([]byte, n-len(s))...)
		for i := 0; i < n; i += 2 {
			odd[at+i], odd[at+i+1] = m[i+1], m[i]
		}
	}
	swapped(54, "Odd\xff", 40)
	swapped(20, "SN", 20)
	oddID, err := ParseATAIdentify(odd)
	require.NoError(t, err)
	assert.Equal(t, "Odd\uFFFD", oddID.Model, "NULs dropped, bytes that are not UTF-8 replaced")
	assert.Equal(t, "SN", oddID.Serial)

	locked, err := ParseATAIdentify(ataIdentifyBlock(0x0017, 0, 0))
	require.NoError(t, err)
	assert.True(t, locked.SecurityEnabled)
	assert.True(t, locked.Locked)
	assert.True(t, locked.CountExpired)
}

func TestATACDBs(t *testing.T) {
	id := ataCDB(ataProtoPIOIn, ataCmdIdentify, false, true)
	assert.Equal(t, [16]byte{0x85, 0x08, 0x0e, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xEC, 0}, id)
	er := ataCDB(ataProtoPIOOut, ataCmdSecurityErase, true, true)
	assert.Equal(t, [16]byte{0x85, 0x0a, 0x06, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xF4, 0}, er)
	prep := ataCDB(ataProtoNonData, ataCmdSecurityPrepare, false, false)
	assert.Equal(t, [16]byte{0x85, 0x06, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xF3, 0}, prep)
	unlock := ataCDB(ataProtoPIOOut, ataCmdSecurityUnlock, true, true)
	assert.Equal(t, [16]byte{0x85, 0x0a, 0x06, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xF2, 0}, unlock)
	disable := ataCDB(ataProtoPIOOut, ataCmdSecurityDisable, true, true)
	assert.Equal(t, [16]byte{0x85, 0x0a, 0x06, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0xF6, 0}, disable)

	page := securityPage("NULL", true)
	assert.Equal(t, uint16(0x2), binary.LittleEndian.Uint16(page[0:2]))
	assert.Equal(t, []byte("NULL"), page[2:6])
	assert.Len(t, page, 512)
	// hdparm >= 9.51 (and so IPA) sends "NULL" as 32 zero bytes, user
	// password (control word bit 0 clear).
	assert.Equal(t, make([]byte, 512), securityPage(ataPassword, false))
}

// descSense builds descriptor-format sense data with an ATA Status Return
// descriptor, as libata returns it when D_SENSE is set.
func descSense(code, key, asc, ascq, status, errReg byte) []byte {
	b := make([]byte, 22)
	b[0], b[1], b[2], b[3], b[7] = code, key, asc, ascq, 14
	b[8], b[9] = 0x09, 12
	b[8+3], b[8+13] = errReg, status
	return b
}

// fixedSense builds fixed-format sense data with the ATA registers in the
// INFORMATION field (SAT), libata's default.
func fixedSense(code, key, asc, ascq, status, errReg byte) []byte {
	b := make([]byte, 18)
	b[0], b[2], b[7], b[12], b[13] = code, key, 10, asc, ascq
	b[3], b[4] = errReg, status
	return b
}

func TestATASenseError(t *testing.T) {
	const (
		good, check = scsiStatusGood, scsiStatusCheckCondition
		recovered   = senseKeyRecoveredError
		aborted     = 0xb
		drdy        = 0x50 // DRDY|DSC: a healthy idle drive
		errAbrt     = 0x04
	)
	descNoATA := descSense(0x72, aborted, 0, 0, 0, 0)[:8]
	tests := []struct {
		name    string
		status  uint8
		sense   []byte
		wantErr string // "" means success
		wantIs  error
	}{
		{"good status, no sense", good, nil, "", nil},
		{"CK_COND success, descriptor", check, descSense(0x72, recovered, 0, 0x1d, drdy, 0), "", nil},
		{"descriptor, ATA ERR", check, descSense(0x72, aborted, 0, 0, drdy|ataStatusERR, errAbrt), "ATA command aborted (status 0x51, error 0x04)", nil},
		{"descriptor, device fault", check, descSense(0x72, 0x4, 0x44, 0, 0x40|ataStatusDF, 0), "ATA device fault", nil},
		{"descriptor ERR under good status", good, descSense(0x72, aborted, 0, 0, drdy|ataStatusERR, errAbrt), "aborted", nil},
		{"descriptor, aborted without ATA descriptor", check, descNoATA, "sense key 0xb", nil},
		{"descriptor, deferred", check, descSense(0x73, recovered, 0, 0x1d, drdy, 0), "deferred", nil},
		{"CK_COND success, fixed", check, fixedSense(0x70, recovered, 0, 0x1d, drdy, 0), "", nil},
		{"fixed, no sense", check, fixedSense(0x70, senseKeyNoSense, 0, 0, drdy, 0), "", nil},
		{"fixed, ATA ERR", check, fixedSense(0x70, aborted, 0, 0, drdy|ataStatusERR, errAbrt), "ATA command aborted (status 0x51, error 0x04)", nil},
		{"fixed, ATA ERR with recovered key", check, fixedSense(0x70, recovered, 0, 0x1d, drdy|ataStatusERR, errAbrt), "aborted", nil},
		{"fixed, valid bit set", check, fixedSense(0xf0, aborted, 0, 0, drdy|ataStatusERR, errAbrt), "aborted", nil},
		{"fixed, aborted without registers (libata: missing result TF)", check, fixedSense(0x70, aborted, 0, 0, 0, 0), "sense key 0xb, ASC/ASCQ 0x00/0x00", nil},
		{"fixed, medium error", check, fixedSense(0x70, 0x3, 0x11, 0x04, 0, 0), "sense key 0x3", nil},
		{"fixed, deferred", check, fixedSense(0x71, recovered, 0, 0x1d, drdy, 0), "deferred", nil},
		{"fixed, truncated", check, fixedSense(0x70, recovered, 0, 0x1d, drdy, 0)[:8], "without usable sense data", nil},
		{"invalid opcode: no ATA pass-through (SAS disk)", check, fixedSense(0x70, senseKeyIllegalRequest, ascInvalidOpcode, 0, 0, 0), "not supported", errNotApplicable},
		{"invalid field in CDB", check, fixedSense(0x70, senseKeyIllegalRequest, 0x24, 0, 0, 0), "sense key 0x5, ASC/ASCQ 0x24/0x00", nil},
		{"check condition without sense", check, nil, "CHECK CONDITION without usable sense data", nil},
		{"check condition, unknown sense format", check, []byte{0x7f, 0, 0, 0, 0, 0, 0, 0}, "without usable sense data", nil},
		{"busy", 0x08, nil, "SCSI status 0x08", nil},
		{"reservation conflict", 0x18, nil, "SCSI status 0x18", nil},
		{"task aborted", 0x40, fixedSense(0x70, recovered, 0, 0x1d, drdy, 0), "SCSI status 0x40", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := ataSenseError(tt.status, tt.sense)
			if tt.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
			if tt.wantIs != nil {
				assert.ErrorIs(t, err, tt.wantIs)
			} else {
				assert.NotErrorIs(t, err, errNotApplicable)
			}
		})
	}
}

func TestSGResult(t *testing.T) {
	okSense := descSense(0x72, senseKeyRecoveredError, 0, 0x1d, 0x50, 0)
	tests := []struct {
		name    string
		h       sgIOHdr
		sense   []byte
		dataIn  bool
		wantErr string
	}{
		{"success with CK_COND sense", sgIOHdr{Status: scsiStatusCheckCondition, DriverStatus: sgDriverSense}, okSense, false, ""},
		{"data in, all transferred", sgIOHdr{}, nil, true, ""},
		{"host timeout", sgIOHdr{HostStatus: 0x03}, nil, false, "host status 0x3"},
		{"driver timeout", sgIOHdr{DriverStatus: 0x06}, nil, false, "driver status 0x6"},
		{"sense error", sgIOHdr{Status: scsiStatusCheckCondition, DriverStatus: sgDriverSense}, fixedSense(0x70, 0xb, 0, 0, 0x51, 0x04), false, "aborted"},
		{"check condition, sense lost", sgIOHdr{Status: scsiStatusCheckCondition}, nil, false, "CHECK CONDITION"},
		{"short identify", sgIOHdr{Resid: 512}, nil, true, "short transfer"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := sgResult(&tt.h, tt.sense, tt.dataIn)
			if tt.wantErr == "" {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.wantErr)
		})
	}
}

var errFakeAbort = errors.New("ATA command aborted (status 0x51, error 0x04)")

// fakeDrive simulates the ATA security state machine (user password, ACS-3)
// behind ataTransport.
type fakeDrive struct {
	sec       uint16 // IDENTIFY word 128
	password  string // the user password while security is enabled
	eraseNoop bool   // ERASE UNIT reports success and erases nothing
	// fail, when it returns an error, makes the n-th (from 0) command cmd
	// fail before the drive acts on it.
	fail func(cmd byte, n int) error
	// after runs once the drive has taken a command.
	after func(cmd byte)

	log       []byte       // commands the drive received
	deadlines []bool       // whether each came with a context deadline
	seen      map[byte]int // per-command count, for fail
	prepared  bool
	attempts  int
}

func (d *fakeDrive) ata(ctx context.Context, cdb [16]byte, in, out []byte, _ time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err // the transport contract: nothing is sent
	}
	cmd := cdb[14]
	d.log = append(d.log, cmd)
	_, hasDeadline := ctx.Deadline()
	d.deadlines = append(d.deadlines, hasDeadline)
	if d.seen == nil {
		d.seen = map[byte]int{}
	}
	n := d.seen[cmd]
	d.seen[cmd]++
	wasPrepared := d.prepared
	d.prepared = false
	if d.fail != nil {
		if err := d.fail(cmd, n); err != nil {
			return err
		}
	}
	if err := d.take(cmd, in, out, wasPrepared); err != nil {
		return err
	}
	if d.after != nil {
		d.after(cmd)
	}
	return nil
}

func (d *fakeDrive) take(cmd byte, in, out []byte, wasPrepared bool) error {
	const enabled, locked, frozen, expired, enhanced = 0x2, 0x4, 0x8, 0x10, 0x20
	if cmd == ataCmdIdentify {
		copy(in, ataIdentifyBlock(d.sec, 10, 20))
		return nil
	}
	if d.sec&frozen != 0 {
		return errFakeAbort
	}
	var pw string
	if out != nil {
		pw = string(bytes.TrimRight(out[2:34], "\x00"))
	}
	switch cmd {
	case ataCmdSecuritySetPass:
		if d.sec&locked != 0 {
			return errFakeAbort
		}
		d.sec |= enabled
		d.password = pw
	case ataCmdSecurityUnlock:
		if d.sec&expired != 0 {
			return errFakeAbort
		}
		if d.sec&enabled == 0 || pw != d.password {
			if d.attempts++; d.attempts >= 5 {
				d.sec |= expired
			}
			return errFakeAbort
		}
		d.sec &^= locked
	case ataCmdSecurityPrepare:
		d.prepared = true
	case ataCmdSecurityErase:
		switch {
		case !wasPrepared, d.sec&enabled != 0 && pw != d.password, out[0]&0x2 != 0 && d.sec&enhanced == 0:
			return errFakeAbort
		}
		if !d.eraseNoop {
			d.sec &^= enabled | locked
			d.password = ""
		}
	case ataCmdSecurityDisable:
		if d.sec&(locked|enabled) != enabled || pw != d.password {
			return errFakeAbort
		}
		d.sec &^= enabled
		d.password = ""
	default:
		return fmt.Errorf("fake drive: unexpected command 0x%02x", cmd)
	}
	return nil
}

// failNth fails the n-th (from 0) command cmd.
func failNth(cmd byte, n int) func(byte, int) error {
	return func(c byte, i int) error {
		if c == cmd && i == n {
			return errFakeAbort
		}
		return nil
	}
}

// failAll fails every command in cmds.
func failAll(cmds ...byte) func(byte, int) error {
	return func(c byte, _ int) error {
		if bytes.IndexByte(cmds, c) >= 0 {
			return errFakeAbort
		}
		return nil
	}
}

func TestATASecureEraseStateMachine(t *testing.T) {
	const (
		idf  = ataCmdIdentify
		set  = ataCmdSecuritySetPass
		unl  = ataCmdSecurityUnlock
		prep = ataCmdSecurityPrepare
		er   = ataCmdSecurityErase
		dis  = ataCmdSecurityDisable
	)
	erase := []byte{set, prep, er, idf}
	seq := func(parts ...any) []byte {
		var b []byte
		for _, p := range parts {
			switch p := p.(type) {
			case int:
				b = append(b, byte(p))
			case []byte:
				b = append(b, p...)
			}
		}
		return b
	}
	tests := []struct {
		name        string
		sec         uint16
		password    string
		enhanced    bool
		fail        func(byte, int) error
		eraseNoop   bool
		cancelAfter byte // the step context is cancelled once the drive took this command
		wantErr     []string
		wantIs      []error
		wantLog     []byte
		wantEnabled bool // security (a password) still on the drive afterwards
	}{
		{name: "normal erase", sec: 0x0001, wantLog: seq(idf, erase)},
		{name: "enhanced erase", sec: 0x0021, enhanced: true, wantLog: seq(idf, erase)},
		{name: "enabled with the empty password an earlier attempt left", sec: 0x0003, password: "",
			wantLog: seq(idf, dis, idf, erase)},
		{name: `enabled with the literal "NULL" of older builds`, sec: 0x0003, password: "NULL",
			wantLog: seq(idf, dis, dis, idf, erase)},
		{name: "locked with the empty password (IPA, hdparm >= 9.51)", sec: 0x0007, password: "",
			wantLog: seq(idf, unl, dis, idf, erase)},
		{name: `locked with the literal "NULL"`, sec: 0x0007, password: "NULL",
			wantLog: seq(idf, unl, unl, dis, idf, erase)},
		{name: "locked with an unknown password", sec: 0x0007, password: "hunter2",
			wantErr: []string{"locked with an unknown ATA password", "unlock with the empty (hdparm's NULL) password", `unlock with the "NULL" password`},
			wantLog: seq(idf, unl, unl, idf), wantEnabled: true},
		{name: "enabled with an unknown password", sec: 0x0003, password: "hunter2",
			wantErr: []string{"enabled with an unknown user password"},
			wantLog: seq(idf, dis, dis, idf), wantEnabled: true},
		{name: "frozen", sec: 0x0009, wantErr: []string{"frozen"}, wantLog: seq(idf)},
		{name: "frozen with a password set", sec: 0x000b, wantErr: []string{"frozen"}, wantLog: seq(idf), wantEnabled: true},
		{name: "attempt counter expired", sec: 0x0017, password: "hunter2", wantErr: []string{"power-cycle"}, wantLog: seq(idf), wantEnabled: true},
		{name: "unsupported", sec: 0x0000, wantIs: []error{errNotApplicable}, wantLog: seq(idf)},
		{name: "enhanced unsupported", sec: 0x0001, enhanced: true, wantIs: []error{errNotApplicable}, wantErr: []string{"enhanced erase not supported"}, wantLog: seq(idf)},
		{name: "enhanced unsupported on a locked drive", sec: 0x0007, enhanced: true, wantIs: []error{errNotApplicable}, wantLog: seq(idf), wantEnabled: true},
		{name: "drive aborts the erase", sec: 0x0001, fail: failAll(er),
			wantErr: []string{"security erase unit", "cleared again"}, wantIs: []error{errFakeAbort},
			wantLog: seq(idf, set, prep, er, dis)},
		{name: "erase and password clearing both fail", sec: 0x0001, fail: failAll(er, dis),
			wantErr: []string{"security erase unit", "clearing the ATA user password FAILED", "locked after its next power-on"},
			wantIs:  []error{errFakeAbort, errATAPasswordLeft},
			wantLog: seq(idf, set, prep, er, dis, idf), wantEnabled: true},
		{name: "prepare fails", sec: 0x0001, fail: failAll(prep),
			wantErr: []string{"security erase prepare", "cleared again"},
			wantLog: seq(idf, set, prep, dis)},
		{name: "erase reports success but the password stays", sec: 0x0001, eraseNoop: true,
			wantErr: []string{"did not complete", "cleared again"},
			wantLog: seq(idf, erase, dis)},
		{name: "identify after a finished erase fails", sec: 0x0001, fail: failNth(idf, 1),
			wantErr: []string{"identify after erase", "no password is left"},
			wantLog: seq(idf, erase, dis, idf)},
		{name: "set password refused", sec: 0x0001, fail: failAll(set),
			wantErr: []string{"security set password"}, wantIs: []error{errFakeAbort},
			wantLog: seq(idf, set, idf)},
		{name: "cancelled after set password", sec: 0x0001, cancelAfter: set,
			wantErr: []string{"cleared again"}, wantIs: []error{context.Canceled},
			wantLog: seq(idf, set, dis)},
		{name: "cancelled after prepare", sec: 0x0001, cancelAfter: prep,
			wantErr: []string{"security erase unit", "cleared again"}, wantIs: []error{context.Canceled},
			wantLog: seq(idf, set, prep, dis)},
		{name: "cancelled while unlocking", sec: 0x0007, password: "", cancelAfter: unl,
			wantIs: []error{context.Canceled}, wantLog: seq(idf, unl), wantEnabled: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			d := &fakeDrive{sec: tt.sec, password: tt.password, fail: tt.fail, eraseNoop: tt.eraseNoop}
			if tt.cancelAfter != 0 {
				d.after = func(cmd byte) {
					if cmd == tt.cancelAfter {
						cancel()
					}
				}
			}
			err := ataSecureErase(ctx, d, tt.enhanced)
			assert.Equal(t, fmt.Sprintf("% x", tt.wantLog), fmt.Sprintf("% x", d.log), "ATA commands sent")
			if tt.wantErr == nil && tt.wantIs == nil {
				require.NoError(t, err)
			} else {
				require.Error(t, err)
				for _, s := range tt.wantErr {
					assert.Contains(t, err.Error(), s)
				}
				for _, target := range tt.wantIs {
					assert.ErrorIs(t, err, target)
				}
			}
			assert.Equal(t, tt.wantEnabled, d.sec&0x2 != 0, "ATA security enabled afterwards")
			if bytes.IndexByte(tt.wantLog, er) < 0 {
				assert.NotContains(t, d.log, byte(er), "no erase may be sent")
			}
			if tt.cancelAfter != 0 {
				// Cleanup after a cancellation runs on a fresh, bounded context.
				k := bytes.IndexByte(d.log, tt.cancelAfter)
				for i := k + 1; i < len(d.log); i++ {
					assert.True(t, d.deadlines[i], "command 0x%02x after the cancellation needs a deadline", d.log[i])
				}
			}
		})
	}
}

// TestATASecureEraseWithoutContext keeps the context-free entry point working.
func TestATASecureEraseWithoutContext(t *testing.T) {
	d := &fakeDrive{sec: 0x0001}
	require.NoError(t, ataSecureErase(context.Background(), d, false))
	assert.Zero(t, d.sec&0x2)
	assert.ErrorIs(t, ataSecureErase(context.Background(), &fakeDrive{sec: 0}, false), errNotApplicable)
}

// TestATAEraseAbortedWhileRunningCompletes: an abort that arrives while
// SECURITY ERASE UNIT runs does not interrupt it; the erase completes, is
// confirmed (the password is gone), and nothing more is sent. An abort
// before the erase is sent takes our password off again.
func TestATAEraseAbortedWhileRunningCompletes(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	d := &fakeDrive{sec: 0x0001, after: func(cmd byte) {
		if cmd == ataCmdSecurityErase {
			cancel()
		}
	}}
	require.NoError(t, ataSecureErase(ctx, d, false))
	assert.Zero(t, d.sec&0x2, "security is off: the erase completed")
	assert.Equal(t, byte(ataCmdIdentify), d.log[len(d.log)-1], "only the confirming IDENTIFY came after the erase")

	ctx, cancel = context.WithCancel(context.Background())
	d = &fakeDrive{sec: 0x0001, after: func(cmd byte) {
		if cmd == ataCmdSecuritySetPass {
			cancel()
		}
	}}
	err := ataSecureErase(ctx, d, false)
	require.ErrorIs(t, err, context.Canceled)
	assert.Contains(t, err.Error(), "cleared again")
	assert.Zero(t, d.sec&0x2, "our password is off the drive")
	assert.NotContains(t, d.log, byte(ataCmdSecurityErase))
}
