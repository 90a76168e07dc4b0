package kmod

import (
	"compress/gzip"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// realAliases is Debian's linux-image-6.1.0-56-amd64 modules.alias
// (26,223 aliases, as depmod wrote it), gzip'd.
func realAliases(tb testing.TB) *AliasTable {
	tb.Helper()
	f, err := os.Open("testdata/modules.alias-6.1.0-56-amd64.gz")
	require.NoError(tb, err)
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(tb, err)
	t, err := ParseAliases(zr)
	require.NoError(tb, err)
	return t
}

// The expectations are what kmod's `modprobe -R <modalias>` answers for
// the same kernel (run against the unpacked .deb), for the devices QEMU's
// server-like hardware and a typical rack server show in sysfs.
func TestMatchRealModulesAlias(t *testing.T) {
	tab := realAliases(t)
	require.Equal(t, 26222, tab.Len())
	for _, tc := range []struct {
		name, modalias string
		want           []string
	}{
		{"e1000e 82574L", "pci:v00008086d000010D3sv00008086sd00000000bc02sc00i00", []string{"e1000e"}},
		{"ahci: ID alias and class alias, reported once", "pci:v00008086d00002922sv00001AF4sd00001100bc01sc06i01", []string{"ahci"}},
		{"megasas-gen2", "pci:v00001000d0000005Bsv00001000sd00001000bc01sc04i00", []string{"megaraid_sas"}},
		{"nvme by class", "pci:v00001B36d00000010sv00001AF4sd00001100bc01sc08i02", []string{"nvme"}},
		{"virtio-pci transport", "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00", []string{"virtio_pci"}},
		{"virtio-net on the virtio bus", "virtio:d00000001v00001AF4", []string{"virtio_net"}},
		{"virtio-rng", "virtio:d00000004v00001AF4", []string{"virtio_rng"}},
		{"SCSI disk needs sd_mod", "scsi:t-0x00", []string{"sd_mod"}},
		{"xhci by class", "pci:v00001B36d0000000Dsv00001AF4sd00001100bc0Csc03i30", []string{"xhci_pci"}},
		{"USB stick: glob with a [0-2] set, alias shared by uas and usb_storage", "usb:v13FDp3940d0150dc00dsc00dp00ic08isc06ip50in00", []string{"uas", "usb_storage"}},
		{"USB hub", "usb:v0000p0000d0000dc09dsc00dp00ic09isc00ip00in00", []string{"usbcore"}},
		{"PHY id with ? wildcards", "mdio:00000000001000100101011000011111", []string{"amd"}},
		{"input device with commas", "input:b0011v0001p0001eAB41-e0,1,4,11,14,k71,72,73,74,75,ram4,l0,1,2,sfw", []string{"evdev"}},
		{"host bridge: no module", "pci:v00008086d00001237sv00001AF4sd00001100bc06sc00i00", nil},
		{"built-in platform device", "platform:i8042", nil},
		{"not a modalias", "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, tab.Match(tc.modalias))
		})
	}
}

func TestGlob(t *testing.T) {
	for _, tc := range []struct {
		pattern, s string
		want       bool
	}{
		{"abc", "abc", true},
		{"abc", "abd", false},
		{"a*", "a", true},
		{"a*c", "abbbc", true},
		{"a*c", "abbbd", false},
		{"*b*d*", "abcde", true},
		{"a?c", "abc", true},
		{"a?c", "ac", false},
		{"d0[0-2]*", "d0150", true},
		{"d0[0-2]*", "d0350", false},
		{"d01[!0-2]", "d013", true},
		{"d01[^0-2]", "d011", false},
		{"[]]", "]", true},
		{"x[", "x[", true},   // malformed set is a literal '['
		{`a\*`, "a*", true},  // quoted star
		{`a\*`, "ab", false}, // ... is not a wildcard
		{"pci:v*d*sv*sd*bc01sc06i01*", "pci:v00008086d00002922sv00001AF4sd00001100bc01sc06i01", true},
		{"a/*", "a/b/c", true}, // '/' is an ordinary character for fnmatch without FNM_PATHNAME
	} {
		assert.Equal(t, tc.want, Glob(tc.pattern, tc.s), "Glob(%q, %q)", tc.pattern, tc.s)
	}
}

func TestParseAliasesErrors(t *testing.T) {
	tab, err := ParseAliases(strings.NewReader("# comment\n\nalias pci:v*d*sv*sd*bc01sc06i01* ahci\nalias virtio:d00000001v* virtio-net\n"))
	require.NoError(t, err)
	assert.Equal(t, 2, tab.Len())
	assert.Equal(t, []string{"virtio_net"}, tab.Match("virtio:d00000001v00001AF4"), "names normalised to underscores")

	for _, bad := range []string{"alias onlytwo\n", "softdep a pre: b\n", "alias a b c\n"} {
		_, err := ParseAliases(strings.NewReader(bad))
		assert.Error(t, err, bad)
	}
	var nilTable *AliasTable
	assert.Nil(t, nilTable.Match("pci:v0"))
}

// modules.alias comes with the image, but the matcher also runs on
// modaliases a device reports: neither may panic or hang.
func FuzzMatch(f *testing.F) {
	f.Add("alias pci:v00008086d*sv*sd*bc*sc*i* x\nalias usb:v13FDp3940d0[0-2]*dc*dsc*dp*ic*isc*ip*in* uas\n", "pci:v00008086d000010D3sv00008086sd00000000bc02sc00i00")
	f.Add("alias *[!a-]\\? m\n", "usb:v13FDp3940d0150")
	f.Add("alias [ x\n", "[")
	f.Fuzz(func(t *testing.T, file, modalias string) {
		tab, err := ParseAliases(strings.NewReader(file))
		if err != nil {
			return
		}
		_ = tab.Match(modalias)
	})
}

func BenchmarkMatch(b *testing.B) {
	tab := realAliases(b)
	b.ResetTimer()
	for b.Loop() {
		tab.Match("pci:v00008086d000010D3sv00008086sd00000000bc02sc00i00")
		tab.Match("usb:v13FDp3940d0150dc00dsc00dp00ic08isc06ip50in00")
	}
}

func TestParseSoftdeps(t *testing.T) {
	sd, err := ParseSoftdeps(strings.NewReader("# comment\nsoftdep libcrc32c pre: crc32c\nsoftdep ipmi_msghandler post: ipmi_devintf\nsoftdep cifs gcm\nsoftdep a-b pre: x y post: z\n"))
	require.NoError(t, err)
	assert.Equal(t, Softdeps{
		"libcrc32c":       {Pre: []string{"crc32c"}},
		"ipmi_msghandler": {Post: []string{"ipmi_devintf"}},
		"cifs":            {Pre: []string{"gcm"}},
		"a_b":             {Pre: []string{"x", "y"}, Post: []string{"z"}},
	}, sd)
	_, err = ParseSoftdeps(strings.NewReader("alias x y\n"))
	assert.Error(t, err)

	tab, err := ParseAliases(strings.NewReader("alias crc32c crc32c_generic\nalias crc32c crc32c_intel\n"))
	require.NoError(t, err)
	known := func(n string) bool { return n == "libcrc32c" }
	assert.Equal(t, []string{"crc32c_generic", "crc32c_intel"}, Resolve("crc32c", known, tab), "an alias names every module behind it")
	assert.Equal(t, []string{"libcrc32c"}, Resolve("libcrc32c", known, tab))
}
