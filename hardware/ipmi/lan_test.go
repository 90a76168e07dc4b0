package ipmi

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Answers captured from OpenIPMI 2.0.33's ipmi_sim (lan_config_program
// reporting 192.0.2.45 and 52:54:00:aa:bb:01 on channel 1) with
// "ipmitool -v raw 0x0c 0x02 <ch> <param> 0 0": completion code 00 (which
// ipmitool strips from what it prints), then revision 0x11 and the data.
var (
	simIP          = []byte{0x00, 0x11, 0xc0, 0x00, 0x02, 0x2d}
	simMAC         = []byte{0x00, 0x11, 0x52, 0x54, 0x00, 0xaa, 0xbb, 0x01}
	simUnsetIP     = []byte{0x00, 0x11, 0x00, 0x00, 0x00, 0x00}             // no lan_config_program
	simUnsetMAC    = []byte{0x00, 0x11, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00} // idem
	simNotLAN      = []byte{0xcb}                                           // channel 2: "data not present"
	simNoIPv6      = []byte{0x80}                                           // parameters 50..59 on ipmi_sim
	simInvalidChan = []byte{0xc1}                                           // channel 15
)

// An IPv6-capable answer set, built from IPMI 2.0 errata table 23-4's
// layout (ipmi_sim has no IPv6 parameters to capture from):
// one static address set, one SLAAC address.
var (
	v6Status  = []byte{0x00, 0x11, 0x01, 0x01, 0x03}
	v6Static0 = append([]byte{0x00, 0x11, 0x00, 0x80}, append(netip.MustParseAddr("2001:db8::45").AsSlice(), 64, 0x00)...)
	v6DynLL   = append([]byte{0x00, 0x11, 0x00, 0x01}, append(netip.MustParseAddr("fe80::5054:ff:feaa:bb01").AsSlice(), 64, 0x00)...)
)

func TestParsers(t *testing.T) {
	ip, err := ParseIPv4(simIP)
	require.NoError(t, err)
	assert.Equal(t, "192.0.2.45", ip.String())
	ip, err = ParseIPv4(simUnsetIP)
	require.NoError(t, err)
	assert.False(t, ip.IsValid(), "0.0.0.0 is unset")
	mac, err := ParseMAC(simMAC)
	require.NoError(t, err)
	assert.Equal(t, "52:54:00:aa:bb:01", mac)
	mac, err = ParseMAC(simUnsetMAC)
	require.NoError(t, err)
	assert.Empty(t, mac)

	for name, tc := range map[string]struct {
		resp []byte
		code byte
	}{"not a LAN channel": {simNotLAN, 0xcb}, "no IPv6": {simNoIPv6, 0x80}, "invalid channel": {simInvalidChan, 0xc1}} {
		t.Run(name, func(t *testing.T) {
			_, err := ParseIPv4(tc.resp)
			var ce *CompletionError
			require.ErrorAs(t, err, &ce)
			assert.Equal(t, tc.code, ce.Code)
		})
	}
	_, err = ParseMAC([]byte{0x00, 0x11, 0x52})
	assert.ErrorIs(t, err, ErrShort)
	_, err = ParseIPv4(nil)
	assert.ErrorIs(t, err, ErrShort)

	st, err := ParseIPv6Status(v6Status)
	require.NoError(t, err)
	assert.Equal(t, IPv6Status{Static: 1, Dynamic: 1}, st)
	a, err := ParseIPv6Addr(v6Static0, true)
	require.NoError(t, err)
	assert.Equal(t, "2001:db8::45", a.Addr.String())
	assert.True(t, a.usable())
	disabled := append([]byte(nil), v6Static0...)
	disabled[3] = 0x00
	a, err = ParseIPv6Addr(disabled, true)
	require.NoError(t, err)
	assert.False(t, a.usable(), "a static address not enabled")
	a, err = ParseIPv6Addr(v6DynLL, false)
	require.NoError(t, err)
	assert.False(t, a.usable(), "link-local is not reported")
	badPrefix := append([]byte(nil), v6Static0...)
	badPrefix[20] = 200
	_, err = ParseIPv6Addr(badPrefix, true)
	assert.Error(t, err)
}

// fakeBMC answers from a table keyed by channel/param/set; unknown keys
// answer 0xcb as a BMC does for a channel that is not LAN.
type fakeBMC struct {
	answers map[[3]byte][]byte
	asked   int
	fail    error
}

func (f *fakeBMC) Request(_ context.Context, netfn, cmd byte, data []byte) ([]byte, error) {
	f.asked++
	if f.fail != nil {
		return nil, f.fail
	}
	if netfn != NetFnTransport || cmd != CmdGetLANConfig || len(data) != 4 {
		return []byte{0xc1}, nil
	}
	if a, ok := f.answers[[3]byte{data[0], data[1], data[2]}]; ok {
		return a, nil
	}
	return simNotLAN, nil
}

func TestReadLAN(t *testing.T) {
	ctx := context.Background()
	t.Run("ipmi_sim channel 1, no IPv6", func(t *testing.T) {
		bmc := &fakeBMC{answers: map[[3]byte][]byte{{1, 3, 0}: simIP, {1, 5, 0}: simMAC, {1, 55, 0}: simNoIPv6}}
		lan, err := ReadLAN(ctx, bmc)
		require.NoError(t, err)
		assert.Equal(t, LAN{Address: "192.0.2.45", MAC: "52:54:00:aa:bb:01", Channel: 1}, lan)
		assert.Equal(t, 3+MaxChannel-1, bmc.asked, "channels 2..11 are each asked once and skipped")
	})
	t.Run("address on channel 8, IPv6 static after a link-local dynamic", func(t *testing.T) {
		bmc := &fakeBMC{answers: map[[3]byte][]byte{
			{1, 3, 0}: simUnsetIP, {1, 5, 0}: simUnsetMAC, {1, 55, 0}: simNoIPv6,
			{8, 3, 0}: simIP, {8, 5, 0}: simMAC, {8, 55, 0}: v6Status, {8, 59, 0}: v6DynLL, {8, 56, 0}: v6Static0,
		}}
		lan, err := ReadLAN(ctx, bmc)
		require.NoError(t, err)
		assert.Equal(t, LAN{Address: "192.0.2.45", V6Address: "2001:db8::45", MAC: "52:54:00:aa:bb:01", Channel: 8}, lan)
		assert.Equal(t, 3+6+5, bmc.asked, "stops once everything is found")
	})
	t.Run("nothing configured", func(t *testing.T) {
		lan, err := ReadLAN(ctx, &fakeBMC{answers: map[[3]byte][]byte{{1, 3, 0}: simUnsetIP, {1, 5, 0}: simUnsetMAC, {1, 55, 0}: simNoIPv6}})
		require.NoError(t, err)
		assert.Equal(t, LAN{}, lan)
	})
	t.Run("a BMC that does not answer stops the walk at once", func(t *testing.T) {
		bmc := &fakeBMC{fail: errors.New("no answer within 2s")}
		_, err := ReadLAN(ctx, bmc)
		require.Error(t, err)
		assert.Equal(t, 1, bmc.asked)
	})
	t.Run("a short answer is reported, the rest still read", func(t *testing.T) {
		lan, err := ReadLAN(ctx, &fakeBMC{answers: map[[3]byte][]byte{{1, 3, 0}: {0x00, 0x11, 0xc0}, {1, 5, 0}: simMAC, {1, 55, 0}: simNoIPv6}})
		require.ErrorIs(t, err, ErrShort)
		assert.Equal(t, "52:54:00:aa:bb:01", lan.MAC)
	})
}

func TestOpenWithoutDevice(t *testing.T) {
	for _, p := range devicePaths() {
		if fileExists(p) {
			t.Skipf("%s exists on this machine", p)
		}
	}
	_, err := Open(0)
	assert.ErrorIs(t, err, ErrNoDevice)
}

func FuzzParse(f *testing.F) {
	for _, s := range [][]byte{simIP, simMAC, simUnsetIP, simNotLAN, simNoIPv6, v6Status, v6Static0, v6DynLL, nil} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = ParseIPv4(b)
		_, _ = ParseMAC(b)
		_, _ = ParseIPv6Status(b)
		if a, err := ParseIPv6Addr(b, len(b)%2 == 0); err == nil && a.Prefix > 128 {
			t.Fatalf("prefix %d accepted", a.Prefix)
		}
		ce := &CompletionError{Code: byte(len(b))}
		if ce.Error() == "" {
			t.Fatal(fmt.Sprint("empty error for ", ce.Code))
		}
	})
}

func fileExists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
