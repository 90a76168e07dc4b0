package vbmc_test

import (
	"fmt"
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
			[]string{"-accel tcg", "virtio-net-pci,netdev=net0,id=nic0,mac=52:54:00:12:34:56,bootindex=1", "user,id=net0,restrict=on,hostfwd=tcp:127.0.0.1:19999-:9999,guestfwd=tcp:10.0.2.100:8080-tcp:127.0.0.1:18080", "nvme,drive=disk0,serial=SN-0001 ", "virtio-rng-pci", "serial.log,append=on", "qmp.sock,server=on,wait=off"},
			[]string{"-kernel", "-daemonize", "kvm"}},
		"disk boots the first NVMe": {vbmc.BootDisk, []string{"nvme,drive=disk0,serial=SN-0001,bootindex=1", "nvme,drive=disk1,serial=ANVIL-DISK-1 "}, []string{"netdev=net0,id=nic0,mac=52:54:00:12:34:56,bootindex", "hubport"}},
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

// A second NIC on the same network (a bond's other link): a hub joins both
// NICs and the user network, whose forwards stay on the one slirp.
func TestQEMUArgsTwoNICsOnOneNetwork(t *testing.T) {
	q, err := vbmc.NewQEMU(nil, vbmc.QEMUConfig{StateDir: t.TempDir(), NIC: &vbmc.QEMUNIC{MAC: "52:54:00:00:00:01",
		GuestFwd: []string{"tcp:10.0.2.100:80-cmd:relay"}, MoreMACs: []string{"52:54:00:00:00:02"}}})
	require.NoError(t, err)
	line := strings.Join(q.Args(vbmc.BootCDROM), " ")
	assert.Contains(t, line, "-netdev user,id=uplink0,restrict=on,guestfwd=tcp:10.0.2.100:80-cmd:relay -netdev hubport,id=hub0uplink,hubid=0,netdev=uplink0 "+
		"-netdev hubport,id=net0,hubid=0 -device virtio-net-pci,netdev=net0,id=nic0,mac=52:54:00:00:00:01 "+
		"-netdev hubport,id=net1,hubid=0 -device virtio-net-pci,netdev=net1,id=nic1,mac=52:54:00:00:00:02")
	assert.Equal(t, 1, strings.Count(line, "user,"), "one user network")
}

// Disks on the storage controllers of real servers: the disks of one bus
// share its host adapter, NVMe disks each have their own controller, and
// the serials reach the guest.
func TestQEMUDiskBuses(t *testing.T) {
	tests := map[string]struct {
		disks     []vbmc.QEMUDisk
		bootFirst bool
		want      string
		err       string
	}{
		"two SATA disks share one AHCI controller": {
			disks: []vbmc.QEMUDisk{{Path: "/d/a.raw", Serial: "SATA-A", Bus: vbmc.BusAHCI}, {Path: "/d/b.raw", Serial: "SATA-B", Bus: vbmc.BusAHCI}},
			want: "-drive file=/d/a.raw,if=none,id=disk0,format=raw -device ahci,id=hba0 -device ide-hd,drive=disk0,bus=hba0.0,serial=SATA-A " +
				"-drive file=/d/b.raw,if=none,id=disk1,format=raw -device ide-hd,drive=disk1,bus=hba0.1,serial=SATA-B"},
		"SCSI adapters and NVMe side by side, boot from the first": {
			disks: []vbmc.QEMUDisk{{Path: "/d/m.raw", Serial: "MEGA", Bus: vbmc.BusMegaSAS}, {Path: "/d/n.raw", Serial: "NV"},
				{Path: "/d/l.raw", Serial: "LSI", Bus: vbmc.BusLSI}, {Path: "/d/m2.raw", Serial: "MEGA2", Bus: vbmc.BusMegaSAS}},
			bootFirst: true,
			want: "-drive file=/d/m.raw,if=none,id=disk0,format=raw -device megasas-gen2,id=hba0 -device scsi-hd,drive=disk0,bus=hba0.0,serial=MEGA,bootindex=1 " +
				"-drive file=/d/n.raw,if=none,id=disk1,format=raw -device nvme,drive=disk1,serial=NV " +
				"-drive file=/d/l.raw,if=none,id=disk2,format=raw -device lsi53c895a,id=hba1 -device scsi-hd,drive=disk2,bus=hba1.0,serial=LSI " +
				"-drive file=/d/m2.raw,if=none,id=disk3,format=raw -device scsi-hd,drive=disk3,bus=hba0.0,serial=MEGA2"},
		"virtio-scsi and LSI SAS": {
			disks: []vbmc.QEMUDisk{{Path: "/d/v.raw", Serial: "V", Bus: vbmc.BusVirtioSCSI}, {Path: "/d/s.raw", Serial: "S", Bus: vbmc.BusMPTSAS}},
			want: "-device virtio-scsi-pci,id=hba0 -device scsi-hd,drive=disk0,bus=hba0.0,serial=V " +
				"-drive file=/d/s.raw,if=none,id=disk1,format=raw -device mptsas1068,id=hba1 -device scsi-hd,drive=disk1,bus=hba1.0,serial=S"},
		"a disk through blkdebug error injection": {
			disks: []vbmc.QEMUDisk{{Path: "/d/bad.raw", Serial: "BAD", Blkdebug: "/d/bad.blkdebug"}},
			want:  "-drive file=blkdebug:/d/bad.blkdebug:/d/bad.raw,if=none,id=disk0,format=raw -device nvme,drive=disk0,serial=BAD"},
		"unknown bus": {disks: []vbmc.QEMUDisk{{Path: "/d/x.raw", Bus: "floppy"}}, err: `unknown bus "floppy"`},
		"more disks than AHCI ports": {disks: func() []vbmc.QEMUDisk {
			var ds []vbmc.QEMUDisk
			for i := range 7 {
				ds = append(ds, vbmc.QEMUDisk{Path: fmt.Sprintf("/d/%d.raw", i), Bus: vbmc.BusAHCI})
			}
			return ds
		}(), err: "6 ports"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			args, err := vbmc.DiskArgs(tc.disks, tc.bootFirst)
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Contains(t, strings.Join(args, " "), tc.want)
		})
	}

	// The backend attaches them the same way and boots the first disk.
	dir := t.TempDir()
	q, err := vbmc.NewQEMU(nil, vbmc.QEMUConfig{StateDir: dir, Disks: []vbmc.QEMUDisk{
		{Path: "sata0.raw", SizeMiB: 4, Serial: "SATA-0", Bus: vbmc.BusAHCI}, {Path: "nvme0.raw", SizeMiB: 4}}})
	require.NoError(t, err)
	line := strings.Join(q.Args(vbmc.BootDisk), " ") + " "
	assert.Contains(t, line, "-device ahci,id=hba0 -device ide-hd,drive=disk0,bus=hba0.0,serial=SATA-0,bootindex=1")
	assert.Contains(t, line, "-device nvme,drive=disk1,serial=ANVIL-DISK-1 ")
	_, err = vbmc.NewQEMU(nil, vbmc.QEMUConfig{StateDir: dir, Disks: []vbmc.QEMUDisk{{Path: "x.raw", SizeMiB: 4, Bus: "ide"}}})
	require.ErrorContains(t, err, `unknown bus "ide"`, "a bad bus is refused when the node is built, not at power on")
}
