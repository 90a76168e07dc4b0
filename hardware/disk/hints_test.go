package disk

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSelectRootDevice(t *testing.T) {
	nvmeSata := discover(t, "nvme-sata").Disks // nvme0n1 894 GiB, sda 3726 GiB HDD, sdb 447 GiB SSD
	raid := discover(t, "md-raid1").Disks
	vmedia := discover(t, "vmedia-usb").Disks
	dvd := discover(t, "udevless-dvd").Disks // sda 447 GiB, vdb ir-vfd-dev floppy, sr1 writable 4.4 GiB USB DVD
	tests := []struct {
		name    string
		disks   []Disk
		hints   map[string]any
		want    string
		wantErr string
	}{
		{"no hints: smallest disk >= 4 GiB", nvmeSata, nil, "sdb", ""},
		{"size equality (int from Go)", nvmeSata, map[string]any{"size": 894}, "nvme0n1", ""},
		{"size equality (JSON number)", nvmeSata, map[string]any{"size": float64(447)}, "sdb", ""},
		{"size >= operator", nvmeSata, map[string]any{"size": ">= 1000"}, "sda", ""},
		{"size < operator", nvmeSata, map[string]any{"size": "< 500"}, "sdb", ""},
		{"size <or>", nvmeSata, map[string]any{"size": "<or> 1 <or> 894"}, "nvme0n1", ""},
		{"model exact, case-insensitive", nvmeSata, map[string]any{"model": "intel ssdsc2kb48"}, "sdb", ""},
		{"model <in>", nvmeSata, map[string]any{"model": "<in> SAMSUNG"}, "nvme0n1", ""},
		{"serial", nvmeSata, map[string]any{"serial": "ZC18ABCD"}, "sda", ""},
		{"wwn", nvmeSata, map[string]any{"wwn": "0x55cd2e414f8a0b1c"}, "sdb", ""},
		{"vendor + rotational", nvmeSata, map[string]any{"vendor": "ATA", "rotational": false}, "sdb", ""},
		{"rotational as string", nvmeSata, map[string]any{"rotational": "true"}, "sda", ""},
		{"name without /dev", nvmeSata, map[string]any{"name": "sda"}, "sda", ""},
		{"name with /dev", nvmeSata, map[string]any{"name": "/dev/nvme0n1"}, "nvme0n1", ""},
		{"name s!=", nvmeSata, map[string]any{"name": "s!= /dev/nvme0n1", "rotational": false}, "sdb", ""},
		{"by_path", nvmeSata, map[string]any{"by_path": "/dev/disk/by-path/pci-0000:3b:00.0-nvme-1"}, "nvme0n1", ""},
		{"no match", nvmeSata, map[string]any{"serial": "nope"}, "", "no disk matches"},
		{"unknown hint", nvmeSata, map[string]any{"colour": "blue"}, "", "unsupported root device hint"},
		{"bad operator for ints", nvmeSata, map[string]any{"size": "<in> 4"}, "", "not valid for integers"},
		{"md members are never chosen", raid, map[string]any{"name": "sda"}, "", "no disk matches"},
		{"md array itself may be chosen", raid, map[string]any{"name": "md0"}, "md0", ""},
		{"read-only and virtual media skipped", vmedia, nil, "sdc", ""},
		{"read-only disk never matches", vmedia, map[string]any{"name": "sdd"}, "", "no disk matches"},
		{"a writable DVD is not the smallest disk", dvd, nil, "sda", ""},
		{"optical drive never matches", dvd, map[string]any{"name": "sr1"}, "", "no disk matches"},
		{"labelled virtual floppy never matches", dvd, map[string]any{"name": "vdb"}, "", "no disk matches"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := SelectRootDevice(tt.disks, tt.hints)
			if tt.wantErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, got.Name)
		})
	}
}
