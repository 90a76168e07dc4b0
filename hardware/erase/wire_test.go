package erase

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/disk"
	"github.com/anvil-metal/anvil/protocol"
)

// TestResultReadsAsProtocolEraseResult: the controller reads the agent's
// erase result through protocol.EraseResult (for sanitization records);
// a real overwrite of a file, planned from a disk with an identity, must
// arrive there with its identity, method, passes, verification and times.
func TestResultReadsAsProtocolEraseResult(t *testing.T) {
	dev := filepath.Join(t.TempDir(), "disk")
	require.NoError(t, os.WriteFile(dev, make([]byte, 1<<20), 0o600))
	guard := hardware.NewGuard(hardware.Environment{}, []string{dev})
	d := disk.Disk{Name: "disk", Path: dev, Size: 1 << 20, LogicalBlockSize: 512, Vendor: "ACME", Model: "Spinner 9000",
		Serial: "SN-123", WWN: "0x5000c500a1b2c3d4", Controller: "sata", Rotational: true}
	pol := DefaultPolicy()
	pol.AllowZeroOut = false
	plans := Plan(context.Background(), []disk.Disk{d}, pol, nil, guard)
	require.Len(t, plans, 1)
	res, err := (&Eraser{Opener: guard}).Erase(context.Background(), plans, pol, nil)
	require.NoError(t, err)
	raw, err := json.Marshal(res)
	require.NoError(t, err)

	var wire protocol.EraseResult
	require.NoError(t, json.Unmarshal(raw, &wire))
	require.Len(t, wire.Devices, 1)
	w := wire.Devices[0]
	assert.Equal(t, protocol.DeviceIdentity{Vendor: "ACME", Model: "Spinner 9000", Serial: "SN-123", WWN: "0x5000c500a1b2c3d4", Controller: "sata"}, w.Plan.DeviceIdentity)
	assert.Equal(t, dev, w.Plan.Device)
	assert.Equal(t, uint64(1<<20), w.Plan.Size)
	assert.True(t, w.Plan.Rotational)
	assert.Equal(t, "erased", w.Status)
	assert.Equal(t, "overwrite", w.Method)
	assert.Equal(t, uint64(1<<20), w.Bytes)
	require.NotEmpty(t, w.Attempts)
	a := w.Attempts[len(w.Attempts)-1]
	assert.Equal(t, passes(pol), a.Passes)
	require.NotNil(t, a.Verification)
	assert.Equal(t, res.Devices[0].Attempts[len(w.Attempts)-1].Verification, a.Verification)
	assert.Positive(t, a.Verification.Samples)
	require.NotNil(t, w.StartedAt)
	require.NotNil(t, w.FinishedAt)
	assert.False(t, w.FinishedAt.Before(*w.StartedAt))
}

// TestAbortStopsAnOverwriteBetweenChunks: cancelling an overwrite (an
// operator's abort) stops it at the next chunk; the result says the
// device failed as aborted and how many bytes were written.
func TestAbortStopsAnOverwriteBetweenChunks(t *testing.T) {
	const size = 256 << 20
	dev := filepath.Join(t.TempDir(), "disk")
	f, err := os.Create(dev)
	require.NoError(t, err)
	require.NoError(t, f.Truncate(size))
	require.NoError(t, f.Close())
	guard := hardware.NewGuard(hardware.Environment{}, []string{dev})
	plans := []DevicePlan{{Device: dev, Size: size, Action: ActionErase, Methods: []Method{MethodOverwrite}}}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	res, err := (&Eraser{Opener: guard}).Erase(ctx, plans, DefaultPolicy(), func(p hardware.Progress) {
		if p.BytesDone > 0 {
			cancel()
		}
	})
	var pe *protocol.Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, protocol.ErrTypeAborted, pe.Type)
	d := res.Devices[0]
	assert.Equal(t, StatusFailed, d.Status)
	assert.Contains(t, d.Error, "context canceled")
	assert.Positive(t, d.Bytes, "the bytes written before the abort")
	assert.Less(t, d.Bytes, uint64(size)*uint64(passes(DefaultPolicy())), "it stopped early")
	assert.Contains(t, res.Summary(), "failed after writing")
}
