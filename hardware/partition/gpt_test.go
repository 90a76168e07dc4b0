package partition

import (
	"os"
	"strings"
	"testing"

	"github.com/anvil-metal/anvil/hardware/internal/testdev"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseGUIDMixedEndian(t *testing.T) {
	g, err := parseGUID(TypeLinuxRAID)
	require.NoError(t, err)
	// A19D880F-05FC-4D3B-A006-743F0F84911E on disk:
	assert.Equal(t, []byte{0x0F, 0x88, 0x9D, 0xA1, 0xFC, 0x05, 0x3B, 0x4D, 0xA0, 0x06, 0x74, 0x3F, 0x0F, 0x84, 0x91, 0x1E}, g[:])
	_, err = parseGUID("nope")
	assert.Error(t, err)
}

func TestWriteGPTRejectsWhatDoesNotFit(t *testing.T) {
	f, err := os.Create(t.TempDir() + "/d")
	require.NoError(t, err)
	defer f.Close()
	tests := []struct {
		name  string
		size  uint64
		parts []Part
	}{
		{"tiny device", 16 << 10, []Part{{Type: TypeLinuxFS}}},
		{"partition too big", 8 << 20, []Part{{Type: TypeLinuxFS, Size: 8 << 20}}},
		{"bad type", 8 << 20, []Part{{Type: "xyz"}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := WriteGPT(f, tt.size, 512, tt.parts)
			assert.Error(t, err)
		})
	}
}

// TestWriteGPTKernelAndBlkidAgree writes a table on a loop device and checks
// it from outside: blkid sees a GPT and the kernel creates the partitions
// with the sizes we asked for.
func TestWriteGPTKernelAndBlkidAgree(t *testing.T) {
	dev := testdev.Loop(t, 64<<20, true)
	testdev.Need(t, "blkid")
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	require.NoError(t, err)
	layout, err := WriteGPT(f, 64<<20, 512, []Part{
		{Name: "esp", Type: TypeEFISystem, Size: 8 << 20},
		{Name: "raid", Type: TypeLinuxRAID},
	})
	require.NoError(t, err)
	require.NoError(t, f.Sync())
	require.NoError(t, Activate(f, layout))
	t.Cleanup(func() { Forget(f, len(layout.Start)); f.Close() })

	assert.Equal(t, []uint64{1 << 20, 9 << 20}, layout.Start)
	assert.Equal(t, uint64(8<<20), layout.Size[0])

	out := testdev.Run(t, "blkid", "-p", "-o", "export", dev)
	assert.Contains(t, out, "PTTYPE=gpt")
	name := strings.TrimPrefix(dev, "/dev/")
	for i, want := range layout.Size {
		p := dev + "p" + string(rune('1'+i))
		testdev.WaitFor(t, p)
		b, err := os.ReadFile("/sys/class/block/" + name + "p" + string(rune('1'+i)) + "/size")
		require.NoError(t, err)
		assert.Equal(t, want/512, parseUint(strings.TrimSpace(string(b))), p)
	}
}

func parseUint(s string) uint64 {
	var n uint64
	for _, c := range s {
		n = n*10 + uint64(c-'0')
	}
	return n
}
