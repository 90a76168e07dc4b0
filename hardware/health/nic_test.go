package health

import (
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// linkModeBit finds a mode by the name ethtool prints ("1000baseT/Full").
func linkModeBit(t *testing.T, name string) int {
	t.Helper()
	for b := range 128 {
		if m, ok := linkModeOf(b); ok && m.name == name {
			return b
		}
	}
	t.Fatalf("no link mode %q", name)
	return 0
}

// settingsBuf lays out struct ethtool_link_settings as the kernel fills
// it, from the mode lists `ethtool IFACE` prints.
func settingsBuf(t *testing.T, speed uint32, nwords int, supported, partner []string) []byte {
	t.Helper()
	b := make([]byte, linkSettingsHeader+3*4*nwords)
	b[0] = ethtoolGLinkSettings
	binary.LittleEndian.PutUint32(b[4:8], speed)
	b[nwordsOffset] = byte(nwords)
	set := func(mask int, names []string) {
		for _, n := range names {
			bit := linkModeBit(t, n)
			off := linkSettingsHeader + (mask*nwords+bit/32)*4
			binary.LittleEndian.PutUint32(b[off:], binary.LittleEndian.Uint32(b[off:])|1<<(bit%32))
		}
	}
	set(0, supported)
	set(1, supported)
	set(2, partner)
	return b
}

// The mode lists are those `ethtool` prints for real NICs: an Intel
// 82574L (e1000e, also what QEMU emulates), an Intel X710 10GBASE-T port,
// a Mellanox ConnectX-4 Lx 25G port.
var (
	e1000eModes = []string{"10baseT/Half", "10baseT/Full", "100baseT/Half", "100baseT/Full", "1000baseT/Full"}
	x710Modes   = []string{"100baseT/Full", "1000baseT/Full", "2500baseT/Full", "5000baseT/Full", "10000baseT/Full"}
	cx4Modes    = []string{"1000baseKX/Full", "10000baseKR/Full", "25000baseCR/Full", "25000baseKR/Full", "25000baseSR/Full"}
)

func TestParseLinkSettings(t *testing.T) {
	for name, tc := range map[string]struct {
		buf            []byte
		speed, max, lp int
		err            string
	}{
		"e1000e at 1G, switch 1G":        {buf: settingsBuf(t, 1000, 3, e1000eModes, e1000eModes), speed: 1000, max: 1000, lp: 1000},
		"X710 at 1G, partner can do 10G": {buf: settingsBuf(t, 1000, 3, x710Modes, []string{"1000baseT/Full", "10000baseT/Full"}), speed: 1000, max: 10000, lp: 10000},
		"ConnectX-4 Lx, 4 mask words":    {buf: settingsBuf(t, 25000, 4, cx4Modes, nil), speed: 25000, max: 25000},
		"link down: SPEED_UNKNOWN":       {buf: settingsBuf(t, 0xFFFFFFFF, 3, e1000eModes, nil), max: 1000},
		"short header":                   {buf: make([]byte, 20), err: "20 bytes"},
		"no mask words":                  {buf: settingsBuf(t, 1000, 0, nil, nil), err: "0 mask words"},
		"negative mask words (handshake)": {buf: func() []byte {
			b := settingsBuf(t, 1000, 3, nil, nil)
			b[nwordsOffset] = 0xFD
			return b
		}(), err: "-3 mask words"},
		"masks cut short": {buf: settingsBuf(t, 1000, 3, nil, nil)[:linkSettingsHeader+20], err: "too short"},
	} {
		t.Run(name, func(t *testing.T) {
			s, err := ParseLinkSettings(tc.buf)
			if tc.err != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.speed, s.SpeedMbps)
			max, names := MaxModeSpeed(s.Supported)
			assert.Equal(t, tc.max, max)
			assert.NotEmpty(t, names)
			lp, _ := MaxModeSpeed(s.Partner)
			assert.Equal(t, tc.lp, lp)
		})
	}
}

func TestJudgeNICs(t *testing.T) {
	for name, tc := range map[string]struct {
		link    NICLink
		failure *bool
		msg     string
	}{
		"both ends at their best":      {link: NICLink{SpeedMbps: 1000, MaxMbps: 1000, PartnerMaxMbps: 1000}},
		"10G NIC on a 1G switch port":  {link: NICLink{SpeedMbps: 1000, MaxMbps: 10000, PartnerMaxMbps: 1000}},
		"both can do 10G, link at 1G":  {link: NICLink{SpeedMbps: 1000, MaxMbps: 10000, PartnerMaxMbps: 10000}, failure: ptr(true), msg: "link runs at 1000 Mb/s, both ends can do 10000 Mb/s"},
		"25G NIC, 10G partner, at 1G":  {link: NICLink{SpeedMbps: 1000, MaxMbps: 25000, PartnerMaxMbps: 10000}, failure: ptr(true), msg: "both ends can do 10000 Mb/s"},
		"partner silent, below max":    {link: NICLink{SpeedMbps: 100, MaxMbps: 1000}, failure: ptr(false), msg: "the NIC can do 1000 Mb/s (the link partner did not say"},
		"link down":                    {link: NICLink{MaxMbps: 10000, PartnerMaxMbps: 10000}},
		"capability unknown (veth...)": {link: NICLink{SpeedMbps: 10000}},
	} {
		t.Run(name, func(t *testing.T) {
			tc.link.Interface, tc.link.MAC = "eno1", "52:54:00:12:34:56"
			f := JudgeNICs([]NICLink{tc.link})
			if tc.failure == nil {
				assert.Empty(t, f)
				return
			}
			require.Len(t, f, 1)
			assert.Equal(t, *tc.failure, f[0].Failure)
			assert.Equal(t, "nic", f[0].Check)
			assert.Equal(t, "eno1 (52:54:00:12:34:56)", f[0].Device)
			assert.Contains(t, f[0].Message, tc.msg)
		})
	}
}

func ptr[T any](v T) *T { return &v }

// fakeLinks returns captured buffers by interface.
type fakeLinks map[string][]byte

func (f fakeLinks) LinkSettings(iface string) ([]byte, error) {
	if b, ok := f[iface]; ok {
		return b, nil
	}
	return nil, errors.New("operation not supported")
}

// ReadNICLinks reads the physical NICs of a sysfs tree (a loopback and a
// bridge have no device link and are left out) and judges them in the
// checker's report.
func TestReadNICLinksAndCheckerReport(t *testing.T) {
	root := t.TempDir()
	nic := func(name, mac, speed, carrier string, device bool) {
		p := filepath.Join(root, "sys", "class", "net", name)
		require.NoError(t, os.MkdirAll(p, 0o755))
		if device {
			require.NoError(t, os.MkdirAll(filepath.Join(p, "device"), 0o755))
		}
		for f, v := range map[string]string{"address": mac, "speed": speed, "carrier": carrier} {
			require.NoError(t, os.WriteFile(filepath.Join(p, f), []byte(v+"\n"), 0o644))
		}
	}
	nic("lo", "00:00:00:00:00:00", "-1", "1", false)
	nic("br0", "52:54:00:00:00:09", "10000", "1", false)
	nic("eno1", "3c:ec:ef:00:00:01", "1000", "1", true)
	nic("eno2", "3c:ec:ef:00:00:02", "-1", "0", true)
	nic("eno3", "3c:ec:ef:00:00:03", "1000", "1", true)
	links := fakeLinks{
		"eno1": settingsBuf(t, 1000, 3, x710Modes, []string{"1000baseT/Full", "10000baseT/Full"}),
		"eno2": settingsBuf(t, 0xFFFFFFFF, 3, x710Modes, nil),
	}
	got, err := ReadNICLinks(root, links)
	require.NoError(t, err)
	require.Len(t, got, 3)
	assert.Equal(t, []string{"eno1", "eno2", "eno3"}, []string{got[0].Interface, got[1].Interface, got[2].Interface})
	assert.Equal(t, NICLink{Interface: "eno1", MAC: "3c:ec:ef:00:00:01", SpeedMbps: 1000, MaxMbps: 10000, PartnerMaxMbps: 10000, Supported: x710Modes}, got[0])
	assert.Zero(t, got[1].SpeedMbps, "no carrier: link down")
	assert.Contains(t, got[2].Error, "not supported")

	r := Checker{Root: root, Reader: fakeReader{}, Links: links}.Run(t.Context(), nil, DefaultThresholds())
	require.Len(t, r.NICs, 3)
	var nicFindings []Finding
	for _, f := range r.Findings {
		if f.Check == "nic" {
			nicFindings = append(nicFindings, f)
		}
	}
	require.Len(t, nicFindings, 1)
	assert.True(t, nicFindings[0].Failure)
	assert.Equal(t, "eno1 (3c:ec:ef:00:00:01)", nicFindings[0].Device)
	assert.Contains(t, strings.Join(r.Skipped, "\n"), "nic eno3: link modes unreadable")

	none := Checker{Root: root, Reader: fakeReader{}}.Run(t.Context(), nil, DefaultThresholds())
	assert.Empty(t, none.NICs, "no link reader: NIC speeds are not checked")
}

// The real ioctl against a veth pair in a network namespace this test
// makes on a locked thread (the host's interfaces are never touched): a
// veth reports 10000 Mb/s and no link modes, and an unknown interface is
// a clear error.
func TestSysLinkReaderInNamespace(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to make a network namespace")
	}
	type result struct {
		s      LinkSettings
		err    error
		missed error
	}
	ch := make(chan result, 1)
	go func() {
		// The thread stays locked and ends with this goroutine, so the
		// namespace never leaks into another goroutine.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ch <- result{err: err}
			return
		}
		var r result
		if err := netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "vt0"}, PeerName: "vt1"}); err != nil {
			ch <- result{err: err}
			return
		}
		for _, n := range []string{"vt0", "vt1"} {
			l, _ := netlink.LinkByName(n)
			_ = netlink.LinkSetUp(l)
		}
		b, err := SysLinkReader{}.LinkSettings("vt0")
		if err == nil {
			r.s, err = ParseLinkSettings(b)
		}
		r.err = err
		_, r.missed = SysLinkReader{}.LinkSettings("nosuch0")
		ch <- r
	}()
	r := <-ch
	require.NoError(t, r.err)
	assert.Equal(t, 10000, r.s.SpeedMbps)
	max, _ := MaxModeSpeed(r.s.Supported)
	assert.Zero(t, max, "a veth has no link modes")
	require.Error(t, r.missed)
	assert.Contains(t, r.missed.Error(), "ethtool nosuch0")
}

func FuzzParseLinkSettings(f *testing.F) {
	f.Add(make([]byte, linkSettingsHeader))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := ParseLinkSettings(b)
		if err != nil {
			return
		}
		assert.Len(t, s.Partner, len(s.Supported))
		max, names := MaxModeSpeed(s.Supported)
		assert.LessOrEqual(t, len(names), 32*maxLinkModeWords)
		assert.GreaterOrEqual(t, max, 0)
	})
}
