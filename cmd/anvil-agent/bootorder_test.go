package main

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/agent"
)

func TestGatedNetworkWaitsForItsDrivers(t *testing.T) {
	gate := make(chan struct{})
	n := gatedNetwork{Network: agent.StaticMACs{"52:54:00:00:00:01"}, gate: gate}

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := n.Up(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded, "no network before the NIC drivers are loaded")

	got := make(chan []string)
	go func() {
		macs, _ := n.Up(context.Background())
		got <- macs
	}()
	select {
	case <-got:
		t.Fatal("Up returned before the gate opened")
	case <-time.After(20 * time.Millisecond):
	}
	close(gate)
	select {
	case macs := <-got:
		assert.Equal(t, []string{"52:54:00:00:00:01"}, macs)
	case <-time.After(time.Second):
		t.Fatal("Up still waits after the gate opened")
	}
}

func TestOpenGates(t *testing.T) {
	g := openGates()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	// Closed gates win over an ended context only by select's chance, so
	// wait on a live one.
	assert.NoError(t, wait(context.Background(), g.network))
	assert.NoError(t, wait(context.Background(), g.disks))
	assert.ErrorIs(t, wait(ctx, make(chan struct{})), context.Canceled)
}
