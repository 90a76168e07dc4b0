package diskcheck

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/protocol"
)

const gib = 1 << 30

var (
	sataA = protocol.Disk{Name: "/dev/sda", Serial: "QM00001", Model: "QEMU HARDDISK", Size: 64 << 20, Controller: "scsi", ByPath: "pci-0000:00:1f.2-ata-1"}
	sataB = protocol.Disk{Name: "/dev/sdb", Serial: "QM00002", Model: "QEMU HARDDISK", Size: 64 << 20, Controller: "scsi", ByPath: "pci-0000:00:1f.2-ata-2"}
	nvme  = protocol.Disk{Name: "/dev/nvme0n1", Serial: "S64FNE0R812345", WWN: "eui.0025388b71b2c7a1", Model: "SAMSUNG MZQL2960HCJR", Size: 960 * gib, Controller: "nvme"}
	ahci  = protocol.PCIDevice{Address: "0000:00:1f.2", Vendor: "8086", Device: "2922", Class: "010601", Modules: []string{"ahci"}}
	mega  = protocol.PCIDevice{Address: "0000:00:05.0", Vendor: "1000", Device: "005b", Class: "010400"}
	nic   = protocol.PCIDevice{Address: "0000:00:02.0", Vendor: "8086", Device: "10d3", Class: "020000"}
)

func inv(pci []protocol.PCIDevice, disks ...protocol.Disk) protocol.Inventory {
	if pci == nil {
		pci = []protocol.PCIDevice{}
	}
	return protocol.Inventory{Disks: disks, PCI: pci}
}

func with(d protocol.Disk, f func(*protocol.Disk)) protocol.Disk { f(&d); return d }

func TestCompare(t *testing.T) {
	inspected := inv(nil, sataA, sataB, nvme)
	cases := []struct {
		name      string
		inspected *protocol.Inventory
		deployed  []protocol.Disk
		props     map[string]any
		seen      protocol.Inventory
		fail      bool
		missing   []string // serials
		added     []string
		replaced  int
		errHas    []string
		sumHas    []string
	}{
		{name: "all there", inspected: &inspected, seen: inv(nil, sataA, sataB, nvme),
			sumHas: []string{"expected 3 disks", "seen 3"}},
		{name: "two missing behind a blacklisted driver", inspected: &inspected, seen: inv([]protocol.PCIDevice{ahci}, nvme), fail: true,
			missing: []string{"QM00001", "QM00002"},
			errHas: []string{"nothing was erased", "2 expected disks not found",
				"serial QM00001 (QEMU HARDDISK, 64.0 MiB, expected from inspection)", "serial QM00002",
				"SATA controller 0000:00:1f.2 (8086:2922) has no driver", "has ahci for it", "seen: serial S64FNE0R812345"}},
		{name: "matched by WWN when the serial reads differently", inspected: &inspected,
			seen: inv(nil, sataA, sataB, with(nvme, func(d *protocol.Disk) { d.Serial = "S64FNE0R812345    " + "X"; d.Name = "/dev/nvme1n1" }))},
		{name: "serial compared without case and padding", inspected: &inspected,
			seen: inv(nil, with(sataA, func(d *protocol.Disk) { d.Serial = " qm00001 " }), sataB, nvme)},
		{name: "serial match wins over size", inspected: &inspected,
			seen: inv(nil, with(sataA, func(d *protocol.Disk) { d.Size = 32 << 20 }), sataB, nvme)},
		{name: "identity-less disk within size tolerance",
			inspected: &protocol.Inventory{Disks: []protocol.Disk{{Name: "/dev/vda", Size: 10 * gib, Controller: "virtio"}}},
			seen:      inv(nil, protocol.Disk{Name: "/dev/vda", Size: 10*gib - 50<<20, Controller: "virtio"})},
		{name: "identity-less disk outside size tolerance", fail: true, missing: []string{""},
			inspected: &protocol.Inventory{Disks: []protocol.Disk{{Name: "/dev/vda", Size: 10 * gib, Controller: "virtio"}}},
			seen:      inv(nil, protocol.Disk{Name: "/dev/vda", Size: 8 * gib, Controller: "virtio"}), added: []string{""},
			errHas: []string{"/dev/vda (10.0 GiB, expected from inspection)"}},
		{name: "replaced disk in the same slot is reported, not a failure", inspected: &inspected,
			seen:     inv(nil, sataA, with(sataB, func(d *protocol.Disk) { d.Serial = "NEW0042" }), nvme),
			replaced: 1, sumHas: []string{"replaced: serial QM00002 (QEMU HARDDISK, 64.0 MiB, expected from inspection) by serial NEW0042"}},
		{name: "a disk replaced by one in another slot: the old one is missing", inspected: &inspected,
			seen: inv(nil, sataA, nvme, with(sataB, func(d *protocol.Disk) {
				d.Name, d.Serial, d.ByPath = "/dev/sdc", "NEW0043", "pci-0000:00:1f.2-ata-3"
			})), fail: true, missing: []string{"QM00002"}, added: []string{"NEW0043"},
			errHas: []string{"1 expected disk not found: serial QM00002", "seen: ", "serial NEW0043"}},
		{name: "identity-less disk at the edge of the size tolerance",
			inspected: &protocol.Inventory{Disks: []protocol.Disk{{Name: "/dev/vda", Size: 100 * gib, Controller: "virtio"}}},
			seen:      inv(nil, protocol.Disk{Name: "/dev/vda", Size: 99 * gib, Controller: "virtio"})},
		{name: "identity-less disk just past the size tolerance", fail: true, missing: []string{""}, added: []string{""},
			inspected: &protocol.Inventory{Disks: []protocol.Disk{{Name: "/dev/vda", Size: 100 * gib, Controller: "virtio"}}},
			seen:      inv(nil, protocol.Disk{Name: "/dev/vda", Size: 99*gib - 1, Controller: "virtio"})},
		{name: "identity-less disk of another model is not the expected one", fail: true, missing: []string{""}, added: []string{""},
			inspected: &protocol.Inventory{Disks: []protocol.Disk{{Name: "/dev/vda", Model: "Disk A", Size: 10 * gib}}},
			seen:      inv(nil, protocol.Disk{Name: "/dev/vda", Model: "Disk B", Size: 10 * gib})},
		{name: "added since inspection is reported, not a failure", inspected: &protocol.Inventory{Disks: []protocol.Disk{sataA}},
			seen: inv(nil, sataA, sataB), added: []string{"QM00002"}, sumHas: []string{"added since: serial QM00002"}},
		{name: "disk kept from deploy though inspection is older", inspected: &protocol.Inventory{Disks: []protocol.Disk{sataA}},
			deployed: []protocol.Disk{sataB}, seen: inv(nil, sataA), fail: true, missing: []string{"QM00002"},
			errHas: []string{"expected from deploy"}},
		{name: "root device serial hint names a disk", props: map[string]any{"root_device": map[string]any{"serial": "s== QM00009"}},
			seen: inv(nil, sataA), fail: true, missing: []string{"QM00009"}, added: []string{"QM00001"}, errHas: []string{"serial QM00009 (expected from properties.root_device)"}},
		{name: "root device hint on an inspected disk merges", inspected: &inspected,
			props: map[string]any{"root_device": map[string]any{"wwn": "EUI.0025388B71B2C7A1", "serial": "<in> QM"}},
			seen:  inv(nil, sataA, sataB, nvme)},
		{name: "never inspected, nothing seen", seen: inv([]protocol.PCIDevice{mega}), fail: true,
			errHas: []string{"no disks found", "RAID controller 0000:00:05.0 (1000:005b) has no driver (the ramdisk has no module for it)"}},
		{name: "diskless flag", props: map[string]any{"diskless": true}, seen: inv([]protocol.PCIDevice{mega}),
			sumHas: []string{"no disks present, allowed by properties.diskless", "RAID controller 0000:00:05.0"}},
		{name: "controller without driver fails even with all disks", inspected: &inspected, seen: inv([]protocol.PCIDevice{mega, nic}, sataA, sataB, nvme),
			fail: true, errHas: []string{"RAID controller", "storage_without_driver_ok"}},
		{name: "acknowledged by vendor:device", inspected: &inspected, props: map[string]any{"storage_without_driver_ok": []any{"1000:005B"}},
			seen: inv([]protocol.PCIDevice{mega}, sataA, sataB, nvme), sumHas: []string{"acknowledged: RAID controller"}},
		{name: "acknowledged by short address", inspected: &inspected, props: map[string]any{"storage_without_driver_ok": "00:05.0, 1234:5678"},
			seen: inv([]protocol.PCIDevice{mega}, sataA, sataB, nvme)},
		{name: "NIC without a driver is no erase failure", inspected: &inspected, seen: inv([]protocol.PCIDevice{nic}, sataA, sataB, nvme)},
		{name: "declared disk count", props: map[string]any{"disk_count": float64(2)}, seen: inv(nil, sataA), fail: true, added: []string{"QM00001"},
			errHas: []string{"properties.disk_count is 2 but 1 disk is seen"}},
		{name: "virtual media, optical, md, ram and unattached loop are not disks", fail: true,
			seen: inv(nil, protocol.Disk{Name: "/dev/sr0", Optical: true, Size: gib}, protocol.Disk{Name: "/dev/sdc", VirtualMedia: true, Size: gib},
				protocol.Disk{Name: "/dev/md0", Controller: "md", Size: gib}, protocol.Disk{Name: "/dev/ram0", Size: 16 << 20}, protocol.Disk{Name: "/dev/loop0"}),
			errHas: []string{"no disks found"}},
		{name: "an attached loop device is a disk (agent with an allow-list)", seen: inv(nil, protocol.Disk{Name: "/dev/loop3", Size: 64 << 20, Controller: "loop"}),
			added: []string{""}},
		{name: "a removable stick seen at inspection may go", inspected: &protocol.Inventory{Disks: []protocol.Disk{sataA, {Name: "/dev/sdc", Serial: "USB1", Removable: true}}},
			seen: inv(nil, sataA)},
		{name: "older agent without PCI list", inspected: &inspected, seen: protocol.Inventory{Disks: []protocol.Disk{sataA, sataB, nvme}},
			sumHas: []string{"does not report PCI devices"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			props := tc.props
			if props == nil {
				props = map[string]any{}
			}
			e, err := Expect(tc.inspected, tc.deployed, props)
			require.NoError(t, err)
			r := Compare(e, tc.seen)
			assert.Equal(t, tc.fail, r.Failed(), "error: %s", r.Error())
			var missing, added []string
			for _, d := range r.Missing {
				missing = append(missing, d.Serial)
			}
			for _, d := range r.Added {
				added = append(added, d.Serial)
			}
			assert.Equal(t, tc.missing, missing)
			assert.Equal(t, tc.added, added)
			assert.Len(t, r.Replaced, tc.replaced)
			if !tc.fail {
				assert.Empty(t, r.Error())
			}
			for _, s := range tc.errHas {
				assert.Contains(t, r.Error(), s)
			}
			for _, s := range tc.sumHas {
				assert.Contains(t, r.Summary(), s)
			}
		})
	}
}

func TestExpectRefusesBadFlags(t *testing.T) {
	for _, props := range []map[string]any{
		{"diskless": "maybe"},
		{"disk_count": "two"},
		{"disk_count": -1.0},
		{"disk_count": 1.5},
		{"storage_without_driver_ok": 3.0},
		{"storage_without_driver_ok": []any{"8086:2922", 7.0}},
	} {
		_, err := Expect(nil, nil, props)
		assert.Error(t, err, "%v", props)
	}
	e, err := Expect(nil, nil, map[string]any{"diskless": "true", "disk_count": "0"})
	require.NoError(t, err)
	assert.Equal(t, "properties.diskless", e.Diskless)
}

func TestFormatSize(t *testing.T) {
	assert.Equal(t, "512 B", FormatSize(512))
	assert.Equal(t, "64.0 MiB", FormatSize(64<<20))
	assert.Equal(t, "894.3 GiB", FormatSize(960_197_124_096))
}
