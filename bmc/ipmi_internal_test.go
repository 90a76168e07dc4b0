package bmc

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Output of ipmitool 1.8.19 against ipmi_sim with chassis_control.
const bootParamSim = `Boot parameter version: 1
Boot parameter 5 is valid/unlocked
Boot parameter data: 0004000000
 Boot Flags :
   - Boot Flag Invalid
   - Options apply to only next boot
   - BIOS PC Compatible (legacy) boot 
   - Boot Device Selector : Force PXE
   - BIOS verbosity : System Default
`

// Output against a BMC that keeps the flags (persistent EFI disk).
const bootParamReal = `Boot parameter version: 1
Boot parameter 5 is valid/unlocked
Boot parameter data: e008000000
 Boot Flags :
   - Boot Flag Valid
   - Options apply to all future boots
   - BIOS EFI boot 
   - Boot Device Selector : Force Boot from default Hard-Drive
`

func TestParseBootParam5(t *testing.T) {
	tests := map[string]struct {
		out     string
		want    bootOverride
		wantErr bool
	}{
		"ipmi_sim pxe, flags invalid":  {out: bootParamSim, want: bootOverride{Device: BootPXE}},
		"real BMC persistent efi disk": {out: bootParamReal, want: bootOverride{Device: BootDisk, Opts: BootOptions{Persistent: true, EFI: true}, OptsKnown: true}},
		"cdrom":                        {out: "   - Boot Device Selector : Force Boot from CD/DVD\n", want: bootOverride{Device: BootCDROM}},
		"bios":                         {out: "   - Boot Device Selector : Force Boot into BIOS Setup\n", want: bootOverride{Device: BootBIOS}},
		"no override":                  {out: "   - Boot Device Selector : No override\n", want: bootOverride{Device: "No override"}},
		"garbage":                      {out: "Error: something", wantErr: true},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got, err := parseBootParam5(tc.out)
			if tc.wantErr {
				require.Error(t, err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

func TestParseChassisPower(t *testing.T) {
	st, err := parseChassisPower("Chassis Power is on\n")
	require.NoError(t, err)
	assert.Equal(t, PowerOn, st)
	st, err = parseChassisPower("Chassis Power is off\n")
	require.NoError(t, err)
	assert.Equal(t, PowerOff, st)
	_, err = parseChassisPower("Get Chassis Power Status failed")
	require.Error(t, err)
}

func TestClassifyIPMI(t *testing.T) {
	// Messages as ipmitool 1.8.19 prints them.
	session := errors.New("provider: ipmitool: Error: Unable to establish IPMI v2 / RMCP+ session: exit status 1")
	role := errors.New("ipmitool chassis power status (cipher suite 3): exit status 1: RAKP 2 message indicates an error : unauthorized role requested; Error: Unable to establish IPMI v2 / RMCP+ session")
	privilege := errors.New("ipmitool chassis power on (cipher suite 3): exit status 1: Set Chassis Power Control to Up/On failed: Insufficient privilege level")
	suite17 := errors.New("ipmitool chassis power status (cipher suite 17): exit status 1: Error in open session response message : invalid authentication algorithm; Error: Unable to establish IPMI v2 / RMCP+ session")
	slotsThen17 := errors.Join(
		errors.New("ipmitool chassis power status (cipher suite 3): exit status 1: Error in open session response message : insufficient resources for session; Error: Unable to establish IPMI v2 / RMCP+ session"),
		suite17)
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	bg := context.Background()
	operator := Target{PrivLevel: "OPERATOR"}
	explicit17 := Target{CipherSuite: "17"}
	tests := map[string]struct {
		ctx     context.Context
		err     error
		took    time.Duration
		authOK  bool
		t       Target
		want    errKind
		mention string
	}{
		"fast session failure is auth":               {bg, session, 30 * time.Millisecond, false, Target{}, kindAuth, "wrong username"},
		"session failure after a good login is busy": {bg, session, 30 * time.Millisecond, true, Target{}, kindBusy, ""},
		"slow session failure is no reply":           {bg, session, 10 * time.Second, false, Target{}, kindUnreachable, ""},
		"deadline":                                   {expired, errors.New("signal: killed"), time.Second, false, Target{}, kindUnreachable, ""},
		"insufficient resources is busy":             {bg, errors.New("RAKP 2 message indicates an error : insufficient resources for session"), time.Millisecond, false, Target{}, kindBusy, ""},
		"no session slot, then suite 17 refused":     {bg, slotsThen17, time.Millisecond, false, Target{}, kindBusy, ""},
		"unauthorized role names the level":          {bg, role, time.Millisecond, false, Target{}, kindAuth, "privilege level ADMINISTRATOR"},
		"insufficient privilege is never retried":    {bg, privilege, time.Millisecond, true, operator, kindAuth, "privilege level OPERATOR (ipmi_priv_level)"},
		"explicit cipher suite refused":              {bg, suite17, time.Millisecond, false, explicit17, kindAuth, "cipher suite 17 (ipmi_cipher_suite)"},
		"default suites both refused":                {bg, suite17, time.Millisecond, false, Target{}, kindAuth, "ipmi_cipher_suite"},
		"other is permanent":                         {bg, errors.New("Invalid data field in request"), time.Millisecond, false, Target{}, kindPermanent, ""},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			err := classifyIPMI(tc.ctx, tc.err, tc.took, tc.authOK, tc.t)
			assert.Equal(t, tc.want, kindOf(err))
			assert.Contains(t, err.Error(), tc.mention)
		})
	}
}

func TestIpmitoolArgs(t *testing.T) {
	base := Target{HardwareType: HardwareIPMI, Host: "127.0.0.1", Port: 6230, Username: "oper", Password: "s3cret-pw"}
	withPriv := base
	withPriv.PrivLevel = "OPERATOR"
	v6 := base
	v6.Host = "fd00::1"
	tests := map[string]struct {
		t     Target
		suite string
		want  []string
	}{
		"default privilege is passed explicitly": {base, "3", []string{"-I", "lanplus", "-H", "127.0.0.1", "-p", "6230", "-U", "oper", "-E", "-L", "ADMINISTRATOR", "-C", "3", "-N", "5", "chassis", "power", "status"}},
		"ipmi_priv_level":                        {withPriv, "17", []string{"-I", "lanplus", "-H", "127.0.0.1", "-p", "6230", "-U", "oper", "-E", "-L", "OPERATOR", "-C", "17", "-N", "5", "chassis", "power", "status"}},
		"IPv6 literal without brackets":          {v6, "3", []string{"-I", "lanplus", "-H", "fd00::1", "-p", "6230", "-U", "oper", "-E", "-L", "ADMINISTRATOR", "-C", "3", "-N", "5", "chassis", "power", "status"}},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			got := ipmitoolArgs(tc.t, tc.suite, []string{"chassis", "power", "status"})
			assert.Equal(t, tc.want, got)
			assert.NotContains(t, strings.Join(got, " "), tc.t.Password)
		})
	}
}

func TestIpmitoolSuites(t *testing.T) {
	p := &ipmitoolProvider{}
	assert.Equal(t, []string{"3", "17"}, p.suites(), "bmclib's order without ipmi_cipher_suite")
	p.suite = "17"
	assert.Equal(t, []string{"17", "3"}, p.suites(), "the suite that worked goes first")
	p.t.CipherSuite = "3"
	assert.Equal(t, []string{"3"}, p.suites(), "ipmi_cipher_suite is the only one tried")
}

func TestCleanIpmitoolOutput(t *testing.T) {
	out := "Get HPM.x Capabilities request failed, compcode = d4\nSet Chassis Power Control to Up/On failed: Insufficient privilege level\n\n"
	assert.Equal(t, "Set Chassis Power Control to Up/On failed: Insufficient privilege level", cleanIpmitoolOutput(out))
}

func TestFlattenBmclibErrors(t *testing.T) {
	cause := errors.New("2 errors occurred:\n\t* provider: gofish: 401: bad password\n\n\t* no Opener implementations found\n\n")
	err := flatten(cause)
	assert.Equal(t, "provider: gofish: 401: bad password", err.Error())
	assert.ErrorIs(t, err, cause)
	assert.Nil(t, flatten(nil))
}
