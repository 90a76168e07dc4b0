package health

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sysfsFromGrep builds a sysfs tree under a temporary root from
// "path:value" lines, the output of grep over sysfs files as the captures
// in testdata/edac were posted. Files a capture does not show do not exist
// (ReadEDAC reads a missing count as 0, as for a driver without it).
func sysfsFromGrep(t *testing.T, name string) string {
	b, err := os.ReadFile(filepath.Join("testdata", "edac", name))
	require.NoError(t, err)
	root := t.TempDir()
	n := 0
	for _, l := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		p, v, ok := strings.Cut(l, ":")
		require.True(t, ok, l)
		require.True(t, strings.HasPrefix(p, "/sys/devices/system/edac/"), l)
		full := filepath.Join(root, p)
		require.NoError(t, os.MkdirAll(filepath.Dir(full), 0o755))
		require.NoError(t, os.WriteFile(full, []byte(v+"\n"), 0o644))
		n++
	}
	require.NotZero(t, n)
	return root
}

func TestEDACRealCaptures(t *testing.T) {
	// Ubuntu 20.04 (kernel 5.8) server whose driver names ranks, not
	// DIMMs: mc0/rank4 has one corrected error. ReadEDAC used to read
	// dimmN directories only, so this error could not be placed (and with
	// no controller total in the capture, was not seen at all).
	mcs, err := ReadEDAC(sysfsFromGrep(t, "edac-utils-issue-15.grep"))
	require.NoError(t, err)
	require.Len(t, mcs, 4)
	for i, mc := range mcs {
		assert.Equal(t, "mc"+string(rune('0'+i)), mc.Name)
		var labels []string
		for _, d := range mc.DIMMs {
			labels = append(labels, d.Label)
		}
		assert.Equal(t, []string{mc.Name + "/rank0", mc.Name + "/rank1", mc.Name + "/rank4", mc.Name + "/rank5"}, labels)
	}
	assert.Equal(t, uint64(1), mcs[0].DIMMs[2].Corrected)
	assert.Equal(t, []Finding{
		{Check: "edac", Device: "mc0/rank4", Message: "1 corrected memory errors since boot (at most 10 accepted)"},
	}, JudgeEDAC(mcs, DefaultThresholds()))

	// An i10nm_edac (Ice Lake server) DIMM with 4 corrected errors, by
	// the label the driver gives it.
	mcs, err = ReadEDAC(sysfsFromGrep(t, "node-exporter-issue-3722-i10nm.grep"))
	require.NoError(t, err)
	require.Len(t, mcs, 1)
	assert.Equal(t, MemoryController{Name: "mc7", DIMMs: []EDACDIMM{{Label: "CPU_SrcID#1_MC#3_Chan#0_DIMM#0", Corrected: 4}}}, mcs[0])
	assert.Equal(t, []Finding{
		{Check: "edac", Device: "CPU_SrcID#1_MC#3_Chan#0_DIMM#0", Message: "4 corrected memory errors since boot (at most 10 accepted)"},
	}, JudgeEDAC(mcs, DefaultThresholds()))
	th := DefaultThresholds()
	th.MemMaxCorrected = 3
	assert.True(t, JudgeEDAC(mcs, th)[0].Failure)

	// An older kernel with only the legacy csrowN layout: the controller's
	// totals are judged.
	mcs, err = ReadEDAC(sysfsFromGrep(t, "netdata-issue-1508-server-b.grep"))
	require.NoError(t, err)
	assert.Equal(t, []MemoryController{{Name: "mc0"}}, mcs)
	assert.Empty(t, JudgeEDAC(mcs, DefaultThresholds()))
}
