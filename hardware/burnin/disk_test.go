package burnin

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/internal/testdev"
	"github.com/anvil-metal/anvil/protocol"
)

var outside = hardware.Environment{Evidence: "test"}

func TestFillCheck(t *testing.T) {
	buf := make([]byte, 4*block)
	fill(buf, 8192, 1)
	assert.Equal(t, -1, check(buf, 8192, 1))
	assert.Equal(t, 0, check(buf, 8192, 2), "a block of the previous pass is stale")
	assert.Equal(t, 0, check(buf, 0, 1), "a block written elsewhere is misplaced")
	buf[2*block+17] ^= 0x10
	assert.Equal(t, 2*block, check(buf, 8192, 1))
}

func TestDiskWritesAndVerifiesOnlyGuardedDisks(t *testing.T) {
	a := testdev.Loop(t, 16<<20, false)
	b := testdev.Loop(t, 12<<20, false)
	other := testdev.Loop(t, 8<<20, false)
	guard := hardware.NewGuard(outside, []string{a, b})
	var last hardware.Progress
	res, err := Disk(context.Background(), DiskOptions{Loops: 2, Devices: []string{a, b, other}, Opener: guard, Segment: 1 << 20},
		func(p hardware.Progress) { last = p })
	require.NoError(t, err)
	require.Len(t, res.Devices, 3)
	for i, size := range []uint64{16 << 20, 12 << 20} {
		d := res.Devices[i]
		assert.Equal(t, DiskPassed, d.Status, d.Error)
		assert.Equal(t, size, d.Size)
		assert.Equal(t, 2*size, d.BytesWritten)
		assert.Equal(t, 2*size, d.BytesRead)
		assert.InDelta(t, 2.0, d.Passes, 0.001)
		assert.True(t, d.Direct)
		assert.Greater(t, d.WriteMBps, 0.0)
	}
	assert.Equal(t, DiskSkipped, res.Devices[2].Status)
	assert.Contains(t, res.Devices[2].Error, "allow-list")
	assert.Contains(t, res.Summary(), other+" skipped")
	_ = last // progress comes every 2 s; the test may end sooner
}

func TestDiskTimeBased(t *testing.T) {
	a := testdev.Loop(t, 4<<20, false)
	res, err := Disk(context.Background(), DiskOptions{Loops: 1, Runtime: time.Second, Devices: []string{a}, Opener: hardware.NewGuard(outside, []string{a})}, nil)
	require.NoError(t, err)
	assert.InDelta(t, 1, res.Seconds, 1)
	assert.Greater(t, res.Devices[0].Passes, 1.0, "the runtime, not the loops, decides")
}

func TestDiskIOErrorNamesTheDisk(t *testing.T) {
	testdev.Need(t, "dmsetup")
	loop := testdev.Loop(t, 8<<20, false)
	name := fmt.Sprintf("anvil-burnin-test-%d", time.Now().UnixNano())
	// 4 MiB that work, then 4 MiB that fail every request (dm "error").
	table := fmt.Sprintf("0 8192 linear %s 0\n8192 8192 error\n", loop)
	cmd := exec.Command("dmsetup", "create", name)
	cmd.Stdin = stringsReader(table)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("device mapper unavailable: %v: %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("dmsetup", "remove", "--retry", name).Run() })
	dev := filepath.Join("/dev/mapper", name)
	good := testdev.Loop(t, 4<<20, false)
	res, err := Disk(context.Background(), DiskOptions{Loops: 1, Devices: []string{dev, good}, Opener: hardware.NewGuard(outside, []string{dev, good}), Segment: 1 << 20}, nil)
	var pe *protocol.Error
	require.ErrorAs(t, err, &pe)
	assert.Contains(t, pe.Message, dev)
	d := res.Devices[0]
	assert.Equal(t, DiskFailed, d.Status)
	require.NotEmpty(t, d.Failures)
	assert.Equal(t, "write", d.Failures[0].Op)
	assert.Equal(t, uint64(4<<20), d.Failures[0].Offset)
	assert.Equal(t, uint64(4<<20), d.BytesRead, "what was tested before the error")
	assert.Equal(t, DiskPassed, res.Devices[1].Status, "the other disk is still tested")
}

func TestDiskAbort(t *testing.T) {
	a := testdev.Loop(t, 8<<20, false)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(300*time.Millisecond, cancel)
	start := time.Now()
	res, err := Disk(ctx, DiskOptions{Runtime: time.Hour, Devices: []string{a}, Opener: hardware.NewGuard(outside, []string{a})}, nil)
	assert.Less(t, time.Since(start), 3*time.Second)
	var pe *protocol.Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, protocol.ErrTypeAborted, pe.Type)
	assert.NotZero(t, res.Devices[0].BytesWritten, "the partial result is kept")
	assert.Equal(t, DiskFailed, res.Devices[0].Status)
}

func TestDiskNothingAllowed(t *testing.T) {
	a := testdev.Loop(t, 4<<20, false)
	_, err := Disk(context.Background(), DiskOptions{Loops: 1, Devices: []string{a}, Opener: hardware.NewGuard(outside, []string{"/dev/nonexistent"})}, nil)
	var pe *protocol.Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, protocol.ErrTypeProtectedDevice, pe.Type)
}
func stringsReader(s string) *strings.Reader { return strings.NewReader(s) }
