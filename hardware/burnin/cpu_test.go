package burnin

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/protocol"
)

func TestWorkUnitKnownAnswers(t *testing.T) {
	buf := make([]byte, 4096)
	for i := range buf {
		buf[i] = byte(i*7 + 3)
	}
	require.NoError(t, workUnit(0, buf))
	buf[100] ^= 1
	assert.ErrorContains(t, workUnit(0, buf), "sha256")
}

func TestCPUPasses(t *testing.T) {
	var last hardware.Progress
	res, err := CPU(context.Background(), CPUOptions{Workers: 2, Duration: 2500 * time.Millisecond}, func(p hardware.Progress) { last = p })
	require.NoError(t, err)
	assert.Equal(t, 2, res.Workers)
	assert.Len(t, res.CPUs, 2)
	for _, w := range res.CPUs {
		assert.NotZero(t, w.Units)
		assert.Zero(t, w.Errors)
	}
	assert.Greater(t, res.UnitsPerSec, 0.0)
	assert.InDelta(t, 2.5, res.Seconds, 1)
	assert.Contains(t, last.Message, "left")
	assert.Contains(t, res.Summary(), "all answers right")
}

func TestCPUWrongAnswerNamesTheCPU(t *testing.T) {
	cpus := allowedCPUs()
	bad := cpus[len(cpus)-1]
	o := CPUOptions{Workers: len(cpus), Duration: 300 * time.Millisecond, unit: func(cpu int, buf []byte) error {
		if cpu == bad {
			return errors.New("sha256 mismatch")
		}
		return workUnit(cpu, buf)
	}}
	res, err := CPU(context.Background(), o, nil)
	var pe *protocol.Error
	require.ErrorAs(t, err, &pe)
	assert.Contains(t, pe.Message, "CPU(s) [")
	assert.Contains(t, res.Failed, bad)
	assert.Contains(t, res.Summary(), "sha256 mismatch")
}

func TestCPUAbortStopsAtOnce(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	start := time.Now()
	res, err := CPU(ctx, CPUOptions{Workers: 1, Duration: time.Hour}, nil)
	assert.Less(t, time.Since(start), 2*time.Second)
	var pe *protocol.Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, protocol.ErrTypeAborted, pe.Type)
	assert.NotZero(t, res.Units, "the partial result is kept")
	assert.Contains(t, res.Summary(), "stopped")
}
