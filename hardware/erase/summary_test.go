package erase

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestSummaries(t *testing.T) {
	tests := []struct {
		name string
		got  interface{ Summary() string }
		want string
	}{
		{"erase: erased, skipped and failed devices", Result{Devices: []DeviceResult{
			{Plan: DevicePlan{Device: "/dev/nvme0n1", Size: 960e9}, Status: StatusErased, Method: MethodNVMeCrypto, Seconds: 3.04},
			{Plan: DevicePlan{Device: "/dev/sr0", Reason: "virtual media"}, Status: StatusSkipped},
			{Plan: DevicePlan{Device: "/dev/sda"}, Status: StatusFailed, Error: "verification found data at LBA 8"},
		}}, "/dev/nvme0n1 erased by " + string(MethodNVMeCrypto) + ", verified (960.0 GB, 3.0 s); /dev/sr0 skipped: virtual media; /dev/sda failed: verification found data at LBA 8"},
		{"erase: nothing", Result{}, "no devices to erase"},
		{"metadata: signatures named once per disk", MetadataResult{Devices: []MetadataDisk{
			{Device: "/dev/sda", Status: StatusErased, Wipes: []MetadataWipe{
				{Device: "/dev/sda1", Found: []Signature{{Type: "ext4"}}},
				{Device: "/dev/sda", Found: []Signature{{Type: "gpt"}, {Type: "gpt-backup"}, {Type: "ext4"}}},
			}},
			{Device: "/dev/sdb", Status: StatusErased, Wipes: []MetadataWipe{{Device: "/dev/sdb"}}},
			{Device: "/dev/sr0", Status: StatusSkipped, Reason: "read-only device"},
		}}, "/dev/sda metadata wiped (removed ext4, gpt, gpt-backup; 2 device(s) checked); /dev/sdb metadata wiped (no signatures found; 1 device(s) checked); /dev/sr0 skipped: read-only device"},
		{"metadata: nothing", MetadataResult{}, "no devices to wipe"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.got.Summary())
		})
	}
}
