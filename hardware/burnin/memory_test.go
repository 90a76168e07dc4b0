package burnin

import (
	"context"
	"encoding/binary"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/protocol"
)

func TestMemoryPasses(t *testing.T) {
	res, err := Memory(context.Background(), MemoryOptions{Workers: 2, Bytes: 16 << 20, Duration: 1500 * time.Millisecond}, nil)
	require.NoError(t, err)
	assert.Equal(t, uint64(16<<20), res.Bytes)
	assert.Greater(t, res.Passes, 0.25, "at least one pattern verified")
	assert.Zero(t, res.Errors)
	assert.Greater(t, res.MBPerSecond, 0.0)
	assert.Equal(t, []string{"walking-ones", "own-address", "random", "random-inverted"}, res.Patterns)
	assert.Contains(t, res.Summary(), "no errors")
}

func TestMemoryBadWordIsReported(t *testing.T) {
	o := MemoryOptions{Workers: 1, Bytes: 4 << 20, Duration: time.Second, corrupt: func(w []uint64) { w[1000] ^= 1 << 17 }}
	res, err := Memory(context.Background(), o, nil)
	var pe *protocol.Error
	require.ErrorAs(t, err, &pe)
	assert.Contains(t, pe.Message, "read back wrong")
	require.NotEmpty(t, res.Failures)
	f := res.Failures[0]
	assert.Equal(t, "walking-ones", f.Pattern)
	assert.NotEmpty(t, f.Virtual)
	if os.Geteuid() == 0 {
		assert.NotEmpty(t, f.Physical, "root reads frame numbers from pagemap")
		assert.Contains(t, res.Summary(), "physical")
	}
	assert.LessOrEqual(t, len(res.Failures), maxReported)
}

func TestMemoryAbort(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	res, err := Memory(ctx, MemoryOptions{Workers: 1, Bytes: 64 << 20, Duration: time.Hour}, nil)
	assert.Less(t, time.Since(start), 3*time.Second)
	var pe *protocol.Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, protocol.ErrTypeAborted, pe.Type)
	assert.NotEmpty(t, res.Stopped)
}

func TestMemoryTooLittle(t *testing.T) {
	_, err := Memory(context.Background(), MemoryOptions{Workers: 4, Bytes: 8, Duration: time.Second}, nil)
	var pe *protocol.Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, protocol.ErrTypeInvalidArgs, pe.Type)
}

func TestMemAvailable(t *testing.T) {
	root := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(root, "proc"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(root, "proc/meminfo"), []byte("MemTotal:        1000000 kB\nMemFree:          500000 kB\nMemAvailable:     700000 kB\n"), 0o644))
	got, err := MemAvailable(root)
	require.NoError(t, err)
	assert.Equal(t, uint64(700000<<10), got)
	_, err = MemAvailable(t.TempDir())
	assert.Error(t, err)
}

// SMBIOS structures as the kernel exposes them in
// /sys/firmware/dmi/entries/<type>-<n>/raw.
func type20(handle, dev uint16, startKB, endKB uint32) []byte {
	b := make([]byte, 0x13+2)
	b[0], b[1] = 20, 0x13
	binary.LittleEndian.PutUint16(b[2:], handle)
	binary.LittleEndian.PutUint32(b[4:], startKB)
	binary.LittleEndian.PutUint32(b[8:], endKB)
	binary.LittleEndian.PutUint16(b[12:], dev)
	return b
}

func type17(handle uint16, locator, bank string) []byte {
	b := make([]byte, 0x28)
	b[0], b[1] = 17, 0x28
	binary.LittleEndian.PutUint16(b[2:], handle)
	b[0x10], b[0x11] = 1, 2
	b = append(b, locator+"\x00"+bank+"\x00\x00"...)
	return b
}

func TestDIMMAt(t *testing.T) {
	root := t.TempDir()
	write := func(name string, b []byte) {
		dir := filepath.Join(root, "sys/firmware/dmi/entries", name)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "raw"), b, 0o644))
	}
	write("17-0", type17(0x1100, "DIMM_A1", "CPU0_A"))
	write("17-1", type17(0x1101, "DIMM_B1", "CPU0_B"))
	write("20-0", type20(0x1300, 0x1100, 0, 4<<20-1))     // first 4 GiB
	write("20-1", type20(0x1301, 0x1101, 4<<20, 8<<20-1)) // next 4 GiB
	assert.Equal(t, "DIMM_A1 (bank CPU0_A)", DIMMAt(root, 0x1000))
	assert.Equal(t, "DIMM_B1 (bank CPU0_B)", DIMMAt(root, 5<<30))
	assert.Equal(t, "", DIMMAt(root, 9<<30), "beyond every range")
	assert.Equal(t, "", DIMMAt(t.TempDir(), 0x1000), "no DMI tables")
	write("20-2", []byte{20, 4, 0, 0}) // truncated: ignored
	assert.Equal(t, "DIMM_A1 (bank CPU0_A)", DIMMAt(root, 0x1000))
}
