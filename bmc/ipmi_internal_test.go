package bmc

import (
	"context"
	"errors"
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
	session := errors.New("provider: ipmitool: Error: Unable to establish IPMI v2 / RMCP+ session: exit status 1")
	expired, cancel := context.WithCancel(context.Background())
	cancel()
	tests := map[string]struct {
		ctx    context.Context
		err    error
		took   time.Duration
		authOK bool
		want   errKind
	}{
		"fast session failure is auth":               {context.Background(), session, 30 * time.Millisecond, false, kindAuth},
		"session failure after a good login is busy": {context.Background(), session, 30 * time.Millisecond, true, kindBusy},
		"slow session failure is no reply":           {context.Background(), session, 10 * time.Second, false, kindUnreachable},
		"deadline":                                   {expired, errors.New("signal: killed"), time.Second, false, kindUnreachable},
		"insufficient resources is busy":             {context.Background(), errors.New("RAKP 2 message indicates an error : insufficient resources for session"), time.Millisecond, false, kindBusy},
		"other is permanent":                         {context.Background(), errors.New("Invalid data field in request"), time.Millisecond, false, kindPermanent},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, kindOf(classifyIPMI(tc.ctx, tc.err, tc.took, tc.authOK)))
		})
	}
}

func TestFlattenBmclibErrors(t *testing.T) {
	cause := errors.New("2 errors occurred:\n\t* provider: gofish: 401: bad password\n\n\t* no Opener implementations found\n\n")
	err := flatten(cause)
	assert.Equal(t, "provider: gofish: 401: bad password", err.Error())
	assert.ErrorIs(t, err, cause)
	assert.Nil(t, flatten(nil))
}
