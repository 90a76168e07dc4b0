//go:build vm

package vbmc_test

import (
	"context"
	"encoding/json"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc/vbmc"
)

// TestQEMUHardwareMatchesTheVM: what anvil-vbmc reports of a QEMU node
// (its Redfish inventory) is what the running VM has, as QEMU itself
// answers over QMP: CPUs, memory, disk sizes and NIC MACs (the first NIC
// without a configured MAC gets QEMU's default).
func TestQEMUHardwareMatchesTheVM(t *testing.T) {
	skipWithoutQEMU(t)
	ctx := context.Background()
	q, err := vbmc.NewQEMU(nil, vbmc.QEMUConfig{StateDir: t.TempDir(), CPUs: 2, MemoryMiB: 192,
		Disks: []vbmc.QEMUDisk{{Path: "nvme0.raw", SizeMiB: 16}, {Path: "sata0.raw", SizeMiB: 8, Bus: vbmc.BusAHCI}},
		NIC:   &vbmc.QEMUNIC{MoreMACs: []string{"52:54:00:aa:00:02"}}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	require.NoError(t, q.PowerOn(ctx, vbmc.BootDisk))
	qmp := func(cmd string, out any) {
		t.Helper()
		var raw json.RawMessage
		require.Eventually(t, func() bool {
			raw, err = vbmc.QMP(ctx, q.QMPSocket(), cmd, nil)
			return err == nil
		}, 10*time.Second, 20*time.Millisecond, "QMP %s: %v", cmd, err)
		require.NoError(t, json.Unmarshal(raw, out), string(raw))
	}
	h := q.Hardware()

	var cpus []map[string]any
	qmp("query-cpus-fast", &cpus)
	assert.Len(t, cpus, h.CPUs)
	var mem struct {
		Base int64 `json:"base-memory"`
	}
	qmp("query-memory-size-summary", &mem)
	assert.Equal(t, int64(h.MemoryMiB)<<20, mem.Base)
	var blocks []struct {
		Inserted *struct {
			Image struct {
				Size int64 `json:"virtual-size"`
			} `json:"image"`
		} `json:"inserted"`
	}
	qmp("query-block", &blocks)
	var vmSizes, reported []int64
	for _, b := range blocks {
		if b.Inserted != nil {
			vmSizes = append(vmSizes, b.Inserted.Image.Size)
		}
	}
	for _, d := range h.Disks {
		reported = append(reported, d.SizeBytes)
	}
	sort.Slice(vmSizes, func(i, j int) bool { return vmSizes[i] < vmSizes[j] })
	sort.Slice(reported, func(i, j int) bool { return reported[i] < reported[j] })
	assert.Equal(t, reported, vmSizes)
	var nics []struct {
		MAC string `json:"main-mac"`
	}
	qmp("query-rx-filter", &nics)
	var macs []string
	for _, n := range nics {
		macs = append(macs, n.MAC)
	}
	assert.ElementsMatch(t, h.MACs, macs)
	assert.Equal(t, []string{"52:54:00:12:34:56", "52:54:00:aa:00:02"}, h.MACs)
}
