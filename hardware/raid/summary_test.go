package raid

import (
	"testing"

	"github.com/anvil-metal/anvil/hardware/erase"
	"github.com/stretchr/testify/assert"
)

func TestSummaries(t *testing.T) {
	tests := []struct {
		name string
		got  interface{ Summary() string }
		want string
	}{
		{"created", CreateResult{Arrays: []CreatedArray{{Device: "/dev/md0", Level: "raid1", Members: []string{"/dev/nvme0n1p1", "/dev/nvme1n1p1"}, ArrayState: "clean"}}},
			"/dev/md0 created: raid1 over /dev/nvme0n1p1, /dev/nvme1n1p1 (clean)"},
		{"nothing created", CreateResult{}, "no arrays created"},
		{"deleted", DeleteResult{
			Arrays:       []ArrayTeardown{{Array: "/dev/md0", Level: "raid1", Members: []string{"/dev/sda1", "/dev/sdb1"}, Stopped: true}, {Array: "/dev/md1", Skipped: "held by the host"}},
			MembersWiped: []erase.MetadataWipe{{Device: "/dev/sda1"}, {Device: "/dev/sdb1"}}, DisksWiped: []erase.MetadataWipe{{Device: "/dev/sda"}},
		}, "/dev/md0 stopped (raid1 over /dev/sda1, /dev/sdb1); /dev/md1 skipped: held by the host; 2 member and 1 disk superblock area(s) wiped"},
		{"array left running", DeleteResult{
			Arrays:       []ArrayTeardown{{Array: "/dev/md0", Skipped: "protected by the device guard: /dev/sdb2"}},
			MembersWiped: []erase.MetadataWipe{{Device: "/dev/sda1"}},
			DisksKept:    []KeptDisk{{Disk: "/dev/sda", Reason: "partition /dev/sda2 belongs to /dev/md0, which was left running"}},
		}, "/dev/md0 skipped: protected by the device guard: /dev/sdb2; 1 member and 0 disk superblock area(s) wiped; /dev/sda partition table kept: partition /dev/sda2 belongs to /dev/md0, which was left running"},
		{"nothing to delete", DeleteResult{}, "no arrays found; 0 member and 0 disk superblock area(s) wiped"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, tt.got.Summary())
		})
	}
}
