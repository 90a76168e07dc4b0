package vbmc_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc/vbmc"
)

func TestQEMUArgs(t *testing.T) {
	dir := t.TempDir()
	cfg := vbmc.QEMUConfig{
		StateDir: dir,
		Disks:    []vbmc.QEMUDisk{{Path: "nvme0.raw", SizeMiB: 8, Serial: "SN-0001"}, {Path: "nvme1.raw", SizeMiB: 4}},
		NIC:      &vbmc.QEMUNIC{MAC: "52:54:00:12:34:56", HostFwd: []string{"tcp:127.0.0.1:19999-:9999"}, GuestFwd: []string{"tcp:10.0.2.100:8080-tcp:127.0.0.1:18080"}},
	}
	q, err := vbmc.NewQEMU(nil, cfg)
	require.NoError(t, err)
	st, err := os.Stat(filepath.Join(dir, "nvme0.raw"))
	require.NoError(t, err)
	assert.EqualValues(t, 8<<20, st.Size(), "disk created sparse at its size")

	tests := map[string]struct {
		dev      string
		contains []string
		excludes []string
	}{
		"pxe boots the NIC first": {vbmc.BootPXE,
			[]string{"-accel tcg", "virtio-net-pci,netdev=net0,mac=52:54:00:12:34:56,bootindex=1", "user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:19999-:9999,guestfwd=tcp:10.0.2.100:8080-tcp:127.0.0.1:18080", "nvme,drive=disk0,serial=SN-0001 ", "virtio-rng-pci", "serial.log,append=on", "qmp.sock,server=on,wait=off"},
			[]string{"-kernel", "-daemonize", "kvm"}},
		"disk boots the first NVMe": {vbmc.BootDisk, []string{"nvme,drive=disk0,serial=SN-0001,bootindex=1", "nvme,drive=disk1,serial=ANVIL-DISK-1 "}, []string{"netdev=net0,mac=52:54:00:12:34:56,bootindex"}},
		"cdrom":                     {vbmc.BootCDROM, []string{"-boot order=d"}, nil},
		"bios":                      {vbmc.BootBIOS, []string{"-boot menu=on"}, nil},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			line := strings.Join(q.Args(tc.dev), " ") + " "
			for _, c := range tc.contains {
				assert.Contains(t, line, c)
			}
			for _, c := range tc.excludes {
				assert.NotContains(t, line, c)
			}
		})
	}

	cfg.Kernel, cfg.Initrd, cfg.Append = "vmlinuz", "/abs/initrd.cpio", "console=ttyS0"
	q, err = vbmc.NewQEMU(nil, cfg)
	require.NoError(t, err)
	line := strings.Join(q.Args(vbmc.BootPXE), " ")
	assert.Contains(t, line, "-kernel "+filepath.Join(dir, "vmlinuz")+" -initrd /abs/initrd.cpio -append console=ttyS0")
	assert.NotContains(t, line, "bootindex", "direct kernel boot stands in for PXE")
	assert.NotContains(t, strings.Join(q.Args(vbmc.BootDisk), " "), "-kernel")

	_, err = vbmc.NewQEMU(nil, vbmc.QEMUConfig{})
	require.Error(t, err)
}
