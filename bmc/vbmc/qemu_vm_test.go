//go:build vm

package vbmc_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc/vbmc"
)

func skipWithoutQEMU(t *testing.T) {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skipf("qemu-system-x86_64 not installed (Debian package qemu-system-x86): %v", err)
	}
}

// procState returns the state letter of pid from /proc ("" if gone).
func procState(pid int) string {
	b, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "stat"))
	if err != nil {
		return ""
	}
	s := string(b)
	i := strings.LastIndex(s, ")")
	if i < 0 || i+2 >= len(s) {
		return ""
	}
	return s[i+2 : i+3]
}

// A real QEMU (TCG) sitting in SeaBIOS: power on, QMP status, reset, an
// ignored ACPI shutdown forced off after the timeout, power off, no zombie.
func TestQEMUBackendLifecycle(t *testing.T) {
	skipWithoutQEMU(t)
	ctx := context.Background()
	dir := t.TempDir()
	q, err := vbmc.NewQEMU(nil, vbmc.QEMUConfig{
		StateDir:               dir,
		MemoryMiB:              128,
		Disks:                  []vbmc.QEMUDisk{{Path: "nvme0.raw", SizeMiB: 16, Serial: "SN-VM-0001"}},
		NIC:                    &vbmc.QEMUNIC{},
		ShutdownTimeoutSeconds: 1,
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })

	status := func() string {
		var st string
		require.Eventually(t, func() bool {
			var err error
			st, err = vbmc.QMPStatus(ctx, q.QMPSocket())
			return err == nil
		}, 10*time.Second, 10*time.Millisecond, "QMP never answered")
		return st
	}
	start := time.Now()
	require.NoError(t, q.PowerOn(ctx, vbmc.BootDisk))
	on, err := q.On(ctx)
	require.NoError(t, err)
	assert.True(t, on)
	assert.Equal(t, "running", status())
	t.Logf("QEMU start to QMP ready: %s", time.Since(start))

	require.NoError(t, q.Reset(ctx, vbmc.BootDisk), "system_reset over QMP")
	assert.Equal(t, "running", status())

	// A boot device change restarts the process (boot order is fixed at start).
	require.NoError(t, q.Reset(ctx, vbmc.BootPXE))
	assert.Equal(t, "running", status())

	// SeaBIOS without an OS ignores the ACPI power button: forced off.
	require.NoError(t, q.Shutdown(ctx))
	require.Eventually(t, func() bool { on, _ := q.On(ctx); return !on }, 10*time.Second, 50*time.Millisecond)

	require.NoError(t, q.PowerOn(ctx, vbmc.BootDisk))
	pidOut, err := os.ReadFile(filepath.Join(dir, "qemu.log"))
	require.NoError(t, err)
	assert.Contains(t, string(pidOut), "-accel tcg")
	require.NoError(t, q.PowerOff(ctx))
	on, _ = q.On(ctx)
	assert.False(t, on)
	_, err = os.Stat(q.SerialLog())
	assert.NoError(t, err, "serial log kept in the state dir")

	// No QEMU left behind, not even a zombie.
	out, _ := exec.Command("pgrep", "-f", dir).Output()
	for _, pid := range strings.Fields(string(out)) {
		n, _ := strconv.Atoi(pid)
		assert.Empty(t, procState(n), "process %s still exists (state %s)", pid, procState(n))
	}
}
