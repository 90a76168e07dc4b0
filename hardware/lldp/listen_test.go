package lldp

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPhysicalInterfaces(t *testing.T) {
	dir := t.TempDir()
	for _, n := range []string{"eno1", "lo", "br0", "enp2s0"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, n), 0o755))
	}
	// In sysfs "device" is a link to the PCI device; what matters is
	// that it resolves.
	for _, n := range []string{"eno1", "enp2s0"} {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, "pci", n), 0o755))
		require.NoError(t, os.Symlink(filepath.Join(dir, "pci", n), filepath.Join(dir, n, "device")))
	}
	got, err := PhysicalInterfaces(dir)
	require.NoError(t, err)
	assert.Equal(t, []string{"eno1", "enp2s0"}, got)
	_, err = PhysicalInterfaces(filepath.Join(dir, "absent"))
	assert.Error(t, err)
}

func TestCollectNothingToListenOn(t *testing.T) {
	start := time.Now()
	got := Collect(context.Background(), []string{"no-such-nic0"}, Options{Window: 5 * time.Second})
	assert.Empty(t, got)
	assert.Less(t, time.Since(start), time.Second, "no socket: nothing to wait for")
}
