package verify

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-metal/anvil/protocol"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func inspected() protocol.Inventory {
	return protocol.Inventory{
		CPU:    protocol.CPU{ModelName: "Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz", Count: 64, Architecture: "x86_64"},
		Memory: protocol.Memory{Total: 260_000 << 20, PhysicalMB: 262144},
		Disks: []protocol.Disk{
			{Name: "/dev/sda", Size: 480 << 30, Model: "SAMSUNG MZ7LH480", Serial: "S45PNA0M500001", Controller: "scsi"},
			{Name: "/dev/nvme0n1", Size: 3840 << 30, Model: "INTEL SSDPF2KX038TZ", Serial: "PHAC1234003P8PGN", Controller: "nvme"},
			{Name: "/dev/sr0", Size: 1 << 30, Optical: true, Controller: "scsi"},
		},
		Interfaces: []protocol.NIC{
			{Name: "eno1", MACAddress: "3c:ec:ef:00:00:01", SpeedMbps: 25000},
			{Name: "eno2", MACAddress: "3c:ec:ef:00:00:02", SpeedMbps: 25000},
		},
		PCI: []protocol.PCIDevice{
			{Address: "0000:17:00.0", Vendor: "8086", Device: "159b", Class: "020000", Driver: "ice"},
			{Address: "0000:17:00.1", Vendor: "8086", Device: "159b", Class: "020000", Driver: "ice"},
			{Address: "0000:b1:00.0", Vendor: "8086", Device: "0b60", Class: "010802", Driver: "nvme"},
		},
	}
}

func baseExpected() Expected {
	inv := inspected()
	return Expected{CPUs: 64, CPUArch: "x86_64", MemoryMB: 262144, LocalGB: 3839, Inspected: &inv}
}

func baseSeen() Seen {
	inv := inspected()
	return Seen{Inventory: inv, RootDisk: &inv.Disks[1], DIMMs: []DIMM{{"DIMM A1", 32768}, {"DIMM A2", 32768}}}
}

func lines(ds []Difference) []string {
	out := []string{}
	for _, d := range ds {
		out = append(out, d.String())
	}
	return out
}

func TestCompare(t *testing.T) {
	tests := []struct {
		name     string
		exp      func(*Expected)
		seen     func(*Seen)
		failures []string
		accepted []string // differences reported but not failed
	}{
		{name: "unchanged machine passes"},
		{name: "fewer cpus", seen: func(s *Seen) { s.Inventory.CPU.Count = 32 },
			failures: []string{"cpus (properties): 64 → 32"}},
		{name: "more cpus is an improvement", seen: func(s *Seen) { s.Inventory.CPU.Count = 96 },
			accepted: []string{"cpus (properties): 64 → 96 (improvement, accepted)"}},
		{name: "other architecture", seen: func(s *Seen) { s.Inventory.CPU.Architecture = "aarch64" },
			failures: []string{"cpu_arch (properties): x86_64 → aarch64"}},
		{name: "memory within one percent passes", seen: func(s *Seen) { s.Inventory.Memory.PhysicalMB = 262144 - 2048 }},
		{name: "a lost 32 GiB DIMM fails", seen: func(s *Seen) { s.Inventory.Memory.PhysicalMB = 262144 - 32768 },
			failures: []string{"memory (properties): 262144 MiB → 229376 MiB online memory blocks (32768 MiB short; 2621 MiB accepted)"}},
		{name: "small VM: 768 of 1024 MiB fails", exp: func(e *Expected) { e.MemoryMB = 1024 },
			seen:     func(s *Seen) { s.Inventory.Memory.PhysicalMB = 768 },
			failures: []string{"memory (properties): 1024 MiB → 768 MiB online memory blocks (256 MiB short; 128 MiB accepted)"}},
		{name: "MemTotal basis when blocks are unreadable: 4% short passes",
			seen: func(s *Seen) { s.Inventory.Memory.PhysicalMB, s.Inventory.Memory.Total = 0, (262144-10486)<<20 }},
		{name: "MemTotal basis: 10% short fails",
			seen:     func(s *Seen) { s.Inventory.Memory.PhysicalMB, s.Inventory.Memory.Total = 0, (262144-26215)<<20 },
			failures: []string{"memory (properties): 262144 MiB → 235929 MiB MemTotal (26215 MiB short; 13107 MiB accepted)"}},
		{name: "more memory is an improvement", seen: func(s *Seen) { s.Inventory.Memory.PhysicalMB = 524288 },
			accepted: []string{"memory (properties): 262144 MiB → 524288 MiB online memory blocks (improvement, accepted)"}},
		{name: "missing disk named by serial",
			seen: func(s *Seen) {
				s.Inventory.Disks = s.Inventory.Disks[1:]
			},
			failures: []string{"disk S45PNA0M500001 (inspection): 480.0 GiB SAMSUNG MZ7LH480 at /dev/sda → missing"}},
		{name: "smaller replacement disk fails, the old serial missing and the new one accepted",
			seen: func(s *Seen) {
				s.Inventory.Disks[0] = protocol.Disk{Name: "/dev/sda", Size: 240 << 30, Model: "SAMSUNG MZ7LH240", Serial: "S45PNA0M900009", Controller: "scsi"}
			},
			failures: []string{"disk S45PNA0M500001 (inspection): 480.0 GiB SAMSUNG MZ7LH480 at /dev/sda → missing"},
			accepted: []string{"disk S45PNA0M900009 (inspection): absent → added: 240.0 GiB SAMSUNG MZ7LH240 at /dev/sda (improvement, accepted)"}},
		{name: "same serial, smaller size", seen: func(s *Seen) { s.Inventory.Disks[0].Size = 240 << 30 },
			failures: []string{"disk S45PNA0M500001 (inspection): 480.0 GiB → 240.0 GiB"}},
		{name: "added disk is an improvement; optical and md ignored",
			seen: func(s *Seen) {
				s.Inventory.Disks = append(s.Inventory.Disks,
					protocol.Disk{Name: "/dev/sdb", Size: 960 << 30, Model: "MICRON 5300", Serial: "MTFD0001", Controller: "scsi"},
					protocol.Disk{Name: "/dev/md0", Size: 100 << 30, Controller: "md"})
				s.Inventory.Disks[2].Optical = true
			},
			accepted: []string{"disk MTFD0001 (inspection): absent → added: 960.0 GiB MICRON 5300 at /dev/sdb (improvement, accepted)"}},
		{name: "disk without serial is matched by name and size",
			exp: func(e *Expected) { e.Inspected.Disks[0].Serial = "" },
			seen: func(s *Seen) {
				s.Inventory.Disks[0].Serial = ""
				s.Inventory.Disks[0].Size = 100 << 30
			},
			failures: []string{"disk /dev/sda (inspection): 480.0 GiB SAMSUNG MZ7LH480 at /dev/sda → missing"},
			accepted: []string{"disk /dev/sda (inspection): absent → added: 100.0 GiB SAMSUNG MZ7LH480 at /dev/sda (improvement, accepted)"}},
		{name: "local_gb of a smaller root disk",
			seen: func(s *Seen) {
				d := protocol.Disk{Name: "/dev/nvme0n1", Size: 1920 << 30, Serial: "PHAC1234003P8PGN", Controller: "nvme"}
				s.Inventory.Disks[1], s.RootDisk = d, &d
			},
			failures: []string{"local_gb (properties): 3839 GiB → 1919 GiB (root disk PHAC1234003P8PGN)", "disk PHAC1234003P8PGN (inspection): 3840.0 GiB → 1920.0 GiB"}},
		{name: "root device hints match no disk",
			exp: func(e *Expected) { e.RootDeviceHints = map[string]any{"serial": "GONE"} },
			seen: func(s *Seen) {
				s.RootDisk, s.RootError = nil, "no disk matches the root device hints: map[serial:GONE]"
			},
			failures: []string{"root_device (properties): a disk matching map[serial:GONE] → no disk matches the root device hints: map[serial:GONE]"}},
		{name: "missing NIC by MAC and a slower link",
			seen: func(s *Seen) {
				s.Inventory.Interfaces = []protocol.NIC{{Name: "eno1", MACAddress: "3C:EC:EF:00:00:01", SpeedMbps: 10000}}
			},
			failures: []string{"nic 3c:ec:ef:00:00:01 (inspection): 25000 Mb/s link → 10000 Mb/s", "nic 3c:ec:ef:00:00:02 (inspection): present (eno2) → missing"}},
		{name: "link down", seen: func(s *Seen) { s.Inventory.Interfaces[1].SpeedMbps = 0 },
			failures: []string{"nic 3c:ec:ef:00:00:02 (inspection): 25000 Mb/s link → no link"}},
		{name: "PCI function gone and one added",
			seen: func(s *Seen) {
				s.Inventory.PCI = append(s.Inventory.PCI[:1:1], s.Inventory.PCI[2], protocol.PCIDevice{Address: "0000:ca:00.0", Vendor: "15b3", Device: "1017", Class: "020000"})
			},
			failures: []string{"pci 0000:17:00.1 (inspection): network controller 8086:159b → missing"},
			accepted: []string{"pci 0000:ca:00.0 (inspection): absent → added: network controller 15b3:1017 (improvement, accepted)"}},
		{name: "never inspected: properties only", exp: func(e *Expected) { e.Inspected = nil },
			seen: func(s *Seen) { s.Inventory.Disks = s.Inventory.Disks[1:] }},
		{name: "profile: cpu model, DIMMs, disk and NIC models",
			exp: func(e *Expected) {
				e.Profile = &Profile{CPUModel: "gold 6338", DIMMCount: 2, DIMMSizeMB: 32768, DiskCount: 2,
					DiskModels: []string{"MZ7LH480", "SSDPF2KX038TZ"}, NICModels: []string{"8086:159b", "8086:159b"}}
			}},
		{name: "profile: wrong CPU, a smaller DIMM, a missing disk model",
			exp: func(e *Expected) {
				e.Profile = &Profile{CPUModel: "Gold 6348", DIMMCount: 2, DIMMSizeMB: 32768, DiskModels: []string{"MZ7LH480", "MZ7LH480"}}
			},
			seen: func(s *Seen) { s.DIMMs[1].SizeMB = 16384 },
			failures: []string{
				"cpu_model (hardware_profile): Gold 6348 → Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz",
				"dimm DIMM A2 (hardware_profile): 32768 MiB → 16384 MiB",
				"disk_model (hardware_profile): MZ7LH480 → missing (present: SAMSUNG MZ7LH480, INTEL SSDPF2KX038TZ)",
			},
			accepted: []string{"disk_model (hardware_profile): not listed → added: INTEL SSDPF2KX038TZ (improvement, accepted)"}},
		{name: "profile: DIMMs unknown without SMBIOS",
			exp:      func(e *Expected) { e.Profile = &Profile{DIMMCount: 2} },
			seen:     func(s *Seen) { s.DIMMs = nil },
			failures: []string{"dimm (hardware_profile): 2 DIMMs of 0 MiB → unknown: the firmware lists no memory devices (SMBIOS type 17)"}},
		{name: "exact profile fails improvements",
			exp:      func(e *Expected) { e.Profile = &Profile{Exact: true} },
			seen:     func(s *Seen) { s.Inventory.CPU.Count = 96 },
			failures: []string{"cpus (properties): 64 → 96"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			exp, seen := baseExpected(), baseSeen()
			if tc.exp != nil {
				tc.exp(&exp)
			}
			if tc.seen != nil {
				tc.seen(&seen)
			}
			res := Compare(exp, seen)
			var accepted []Difference
			for _, d := range res.Differences {
				if !d.Failure {
					accepted = append(accepted, d)
				}
			}
			assert.ElementsMatch(t, nonNil(tc.failures), lines(res.Failures()))
			assert.ElementsMatch(t, nonNil(tc.accepted), lines(accepted))
		})
	}
}

func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

func TestFromProperties(t *testing.T) {
	e, err := FromProperties(map[string]any{"cpus": "8", "memory_mb": float64(1024), "local_gb": 9, "cpu_arch": "x86_64",
		"root_device": map[string]any{"serial": "S1"}, "hardware_profile": map[string]any{"dimm_count": 4, "exact": true}}, nil, nil)
	require.NoError(t, err)
	assert.Equal(t, 8, e.CPUs)
	assert.Equal(t, uint64(1024), e.MemoryMB)
	assert.Equal(t, uint64(9), e.LocalGB)
	assert.Equal(t, map[string]any{"serial": "S1"}, e.RootDeviceHints)
	assert.Equal(t, &Profile{DIMMCount: 4, Exact: true}, e.Profile)

	// The step's own profile wins over the node's.
	e, err = FromProperties(map[string]any{"hardware_profile": map[string]any{"dimm_count": 4}}, nil, `{"disk_count": 2}`)
	require.NoError(t, err)
	assert.Equal(t, &Profile{DiskCount: 2}, e.Profile)

	for _, bad := range []map[string]any{
		{"memory_mb": "lots"}, {"cpus": -1.0}, {"local_gb": 1.5},
		{"hardware_profile": map[string]any{"dimm_cuont": 4}}, {"hardware_profile": "not json"},
	} {
		_, err := FromProperties(bad, nil, nil)
		assert.Error(t, err, "%v", bad)
	}
}

func TestParseInventory(t *testing.T) {
	inv, err := ParseInventory(map[string]any{"disks": []any{map[string]any{"name": "/dev/vda", "serial": "D1", "size": float64(1 << 30)}}})
	require.NoError(t, err)
	require.Len(t, inv.Disks, 1)
	assert.Equal(t, "D1", inv.Disks[0].Serial)
	inv, err = ParseInventory(nil)
	require.NoError(t, err)
	assert.Nil(t, inv)
	_, err = ParseInventory(map[string]any{"disks": "many"})
	assert.Error(t, err)
}

func TestDIMMs(t *testing.T) {
	root := t.TempDir()
	for name, file := range map[string]string{"17-0": "qemu-dimm0.raw", "17-1": "server-ddr4-empty.raw", "17-2": "server-ddr5-64g.raw", "17-3": "extended-size.raw"} {
		src, err := os.ReadFile(filepath.Join("testdata", "smbios", file))
		require.NoError(t, err)
		dir := filepath.Join(root, "sys", "firmware", "dmi", "entries", name)
		require.NoError(t, os.MkdirAll(dir, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(dir, "raw"), src, 0o644))
	}
	dimms, err := DIMMs(root)
	require.NoError(t, err)
	assert.Equal(t, []DIMM{{"DIMM 0", 1024}, {"P0 CHANNEL A", 65536}, {"CPU1_DIMM_A1", 131072}}, dimms)

	none, err := DIMMs(t.TempDir())
	require.NoError(t, err)
	assert.Nil(t, none)
}

func TestParseMemoryDeviceRefusesGarbage(t *testing.T) {
	for _, b := range [][]byte{nil, {17}, {4, 0x28}, append([]byte{17, 0xff}, make([]byte, 30)...),
		append(append([]byte{17, 0x15}, make([]byte, 10)...), 0xff, 0x7f, 0, 0, 0, 0, 0, 0, 0)} {
		_, _, err := ParseMemoryDevice(b)
		assert.Error(t, err, "%x", b)
	}
}

func FuzzParseMemoryDevice(f *testing.F) {
	b, err := os.ReadFile(filepath.Join("testdata", "smbios", "qemu-dimm0.raw"))
	require.NoError(f, err)
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		d, ok, err := ParseMemoryDevice(b)
		if err != nil || !ok {
			return
		}
		assert.False(t, strings.ContainsRune(d.Locator, 0))
	})
}
