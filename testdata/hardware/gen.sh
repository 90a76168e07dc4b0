#!/bin/sh
# Regenerates the sysfs snapshots in this directory. See README.md.
# Only plain files and relative symlinks; sizes are in 512-byte sectors as
# in real sysfs. Run from this directory: ./gen.sh
set -eu
cd "$(dirname "$0")"

w() { mkdir -p "$(dirname "$1")"; printf '%s\n' "$2" >"$1"; }
ln_rel() { mkdir -p "$(dirname "$2")"; ln -sfn "$1" "$2"; }

# disk ROOT NAME DEVPATH(under sys/devices) SECTORS RO REM ROT LBS PBS MAJ:MIN
disk() {
	root=$1 name=$2 devpath=$3 size=$4 ro=$5 rem=$6 rot=$7 lbs=$8 pbs=$9 mm=${10}
	d=$root/sys/devices/$devpath/block/$name
	w "$d/size" "$size"; w "$d/ro" "$ro"; w "$d/removable" "$rem"; w "$d/dev" "$mm"
	w "$d/queue/rotational" "$rot"; w "$d/queue/logical_block_size" "$lbs"
	w "$d/queue/physical_block_size" "$pbs"
	mkdir -p "$d/holders" "$d/slaves"
	ln_rel "../../devices/$devpath/block/$name" "$root/sys/class/block/$name"
	w "$root/dev/$name" ""
}
# bin FILE OFFSET FORMAT: write printf FORMAT's bytes at byte OFFSET of FILE
# (growing it with zeroes as needed), for device files carrying a label.
bin() { printf "$3" | dd of="$1" bs=1 seek="$2" conv=notrunc 2>/dev/null; }
# part ROOT DISK DEVPATH NAME NUM START SECTORS [ro]
part() {
	root=$1 dsk=$2 devpath=$3 name=$4 num=$5 start=$6 size=$7
	p=$root/sys/devices/$devpath/block/$dsk/$name
	w "$p/partition" "$num"; w "$p/start" "$start"; w "$p/size" "$size"
	if [ $# -ge 8 ]; then w "$p/ro" "$8"; fi
	mkdir -p "$p/holders"
	ln_rel "../../devices/$devpath/block/$dsk/$name" "$root/sys/class/block/$name"
	w "$root/dev/$name" ""
}

rm -rf nvme-sata md-raid1 vmedia-usb udevless-dvd

# --- nvme-sata: NVMe SSD with two partitions, a SATA HDD and a SATA SSD ---
R=nvme-sata
N=pci0000:00/0000:00:1d.0/0000:3b:00.0/nvme/nvme0
disk $R nvme0n1 $N 1875385008 0 0 0 512 4096 259:0
w $R/sys/devices/$N/model "SAMSUNG MZQL2960HCJR-00A07"
w $R/sys/devices/$N/serial "S64FNE0R812345"
w $R/sys/devices/$N/firmware_rev "GDC5302Q"
w $R/sys/devices/$N/block/nvme0n1/wwid "eui.36344630528123450025384500000001"
w $R/sys/devices/$N/block/nvme0n1/queue/discard_max_bytes "2199023255040"
w $R/sys/devices/$N/block/nvme0n1/queue/write_zeroes_max_bytes "131072"
ln_rel ../.. $R/sys/devices/$N/block/nvme0n1/device
part $R nvme0n1 $N nvme0n1p1 1 2048 1048576
part $R nvme0n1 $N nvme0n1p2 2 1050624 1874334351
S=pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0
disk $R sda $S 7814037168 0 0 1 512 4096 8:0
w $R/sys/devices/$S/vendor "ATA"
w $R/sys/devices/$S/model "ST4000NM0035-1V4"
w $R/sys/devices/$S/rev "TN03"
w $R/sys/devices/$S/wwid "naa.5000c500a1b2c3d4"
printf '\000\200\000\010ZC18ABCD' >$R/sys/devices/$S/vpd_pg80
ln_rel ../.. $R/sys/devices/$S/block/sda/device
T=pci0000:00/0000:00:17.0/ata2/host1/target1:0:0/1:0:0:0
disk $R sdb $T 937703088 0 0 0 512 512 8:16
w $R/sys/devices/$T/vendor "ATA"
w $R/sys/devices/$T/model "INTEL SSDSC2KB48"
w $R/sys/devices/$T/rev "0132"
w $R/sys/devices/$T/wwid "naa.55cd2e414f8a0b1c"
printf '\000\200\000\024BTYF12345678480BGN  ' >$R/sys/devices/$T/vpd_pg80
ln_rel ../.. $R/sys/devices/$T/block/sdb/device
ln_rel ../../nvme0n1 $R/dev/disk/by-path/pci-0000:3b:00.0-nvme-1
ln_rel ../../sda $R/dev/disk/by-path/pci-0000:00:17.0-ata-1
ln_rel ../../sda $R/dev/disk/by-path/pci-0000:00:17.0-ata-1.0
# an unattached loop device and a ram disk: both must be ignored
disk $R loop0 virtual 0 0 0 0 512 512 7:0
disk $R ram0 virtual 131072 0 0 0 512 4096 1:0

# --- md-raid1: two SATA SSDs, ESP + RAID member partition each, md0 RAID1 ---
R=md-raid1
A=pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0
B=pci0000:00/0000:00:17.0/ata2/host1/target1:0:0/1:0:0:0
for x in "sda $A 8:0 S4EVNX0M100001" "sdb $B 8:16 S4EVNX0M100002"; do
	set -- $x
	disk $R $1 $2 937703088 0 0 0 512 512 $3
	w $R/sys/devices/$2/vendor "ATA"; w $R/sys/devices/$2/model "Samsung SSD 860"
	w $R/sys/devices/$2/serial "$4"
	ln_rel ../.. $R/sys/devices/$2/block/$1/device
	part $R $1 $2 ${1}1 1 2048 1048576 0
	part $R $1 $2 ${1}2 2 1050624 936650000 0
	ln_rel ../../../../../../../../virtual/block/md0 $R/sys/devices/$2/block/$1/${1}2/holders/md0
done
disk $R md0 virtual 936386560 0 0 0 512 512 9:0
w $R/sys/devices/virtual/block/md0/md/level raid1
w $R/sys/devices/virtual/block/md0/md/array_state clean
w $R/sys/devices/virtual/block/md0/md/metadata_version 1.2
w $R/sys/devices/virtual/block/md0/md/sync_action idle
w $R/sys/devices/virtual/block/md0/md/degraded 0
ln_rel ../../../../pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0/block/sda/sda2 $R/sys/devices/virtual/block/md0/slaves/sda2
ln_rel ../../../../pci0000:00/0000:00:17.0/ata2/host1/target1:0:0/1:0:0:0/block/sdb/sdb2 $R/sys/devices/virtual/block/md0/slaves/sdb2

# --- vmedia-usb: a real virtio disk, IPA's config drive, a BMC virtual CD,
#     an HPE-style read-only install disk whose partition lacks "ro",
#     and a plain USB stick (removable, writable) ---
R=vmedia-usb
V=pci0000:00/0000:00:04.0/virtio1
disk $R vda $V 83886080 0 0 1 512 512 253:0
w $R/sys/devices/$V/block/vda/serial "vol-0a1b2c3d"
V2=pci0000:00/0000:00:05.0/virtio2
disk $R vdb $V2 2048 0 0 1 512 512 253:16
ln_rel ../../vdb $R/dev/disk/by-label/ir-vfd-dev
U=pci0000:00/0000:00:14.0/usb1/1-4/1-4:1.0/host6/target6:0:0/6:0:0:0
disk $R sr0 $U 1228800 1 1 1 2048 2048 11:0
w $R/sys/devices/$U/vendor "AMI"; w $R/sys/devices/$U/model "Virtual CDROM0"
w $R/sys/devices/$U/type 5
ln_rel ../.. $R/sys/devices/$U/block/sr0/device
H=pci0000:00/0000:00:1f.2/ata3/host2/target2:0:0/2:0:0:0
disk $R sdd $H 16777216 1 0 0 512 512 8:48
w $R/sys/devices/$H/vendor "HPE"; w $R/sys/devices/$H/model "LOGICAL VOLUME"
ln_rel ../.. $R/sys/devices/$H/block/sdd/device
part $R sdd $H sdd1 1 2048 16775168
K=pci0000:00/0000:00:14.0/usb1/1-2/1-2:1.0/host7/target7:0:0/7:0:0:0
disk $R sdc $K 30031872 0 1 1 512 512 8:32
w $R/sys/devices/$K/vendor "SanDisk"; w $R/sys/devices/$K/model "Cruzer Blade"
ln_rel ../.. $R/sys/devices/$K/block/sdc/device
part $R sdc $K sdc1 1 2048 30029824 0

# --- udevless-dvd: as the u-root ramdisk sees it, no /dev/disk at all. IPA's
#     virtual floppy is known only by the FAT label inside dev/vdb; sda has
#     an ext4 label that is not IPA's; real DVD drives (SATA with a pressed
#     disc, USB with a writable one, SATA without a disc) are optical,
#     not virtual media ---
R=udevless-dvd
S=pci0000:00/0000:00:17.0/ata1/host0/target0:0:0/0:0:0:0
disk $R sda $S 937703088 0 0 0 512 512 8:0
w $R/sys/devices/$S/vendor "ATA"; w $R/sys/devices/$S/model "INTEL SSDSC2KB48"
w $R/sys/devices/$S/type 0
ln_rel ../.. $R/sys/devices/$S/block/sda/device
# ext4 superblock at 1024, enough of it for blkid: inode and block counts,
# 4 KiB blocks, magic 0xEF53 (+56), dynamic revision, ext4 incompat features,
# s_volume_name (+120)
bin $R/dev/sda 1024 '\200\000\000\000\000\004'
bin $R/dev/sda 1048 '\002'
bin $R/dev/sda 1080 '\123\357'
bin $R/dev/sda 1100 '\001'
bin $R/dev/sda 1120 '\302\002'
bin $R/dev/sda 1144 'cloudimg-rootfs'
bin $R/dev/sda 2047 '\000'                 # end of the superblock
V2=pci0000:00/0000:00:05.0/virtio2
disk $R vdb $V2 2880 0 0 1 512 512 253:16
# FAT12 1.44 MB floppy as mkfs.fat -n ir-vfd-dev lays it out: BPB (512-byte
# sectors, 1 per cluster, 1 reserved, 2 FATs of 9 sectors, 224 root
# entries), extended boot record with the label at 0x2B, boot signature, and
# the volume-label entry first in the root directory at (1+2*9)*512.
bin $R/dev/vdb 0 '\353\074\220mkfs.fat\000\002\001\001\000\002\340\000\100\013\360\011\000\022\000\002\000'
bin $R/dev/vdb 38 '\051\022\064\126\170ir-vfd-dev FAT12   '
bin $R/dev/vdb 510 '\125\252'
bin $R/dev/vdb 9728 'ir-vfd-dev \010'
bin $R/dev/vdb 16895 '\000'                # end of the 224-entry root directory
D=pci0000:00/0000:00:17.0/ata2/host1/target1:0:0/1:0:0:0
disk $R sr0 $D 8388608 1 1 1 2048 2048 11:0
w $R/sys/devices/$D/vendor "HL-DT-ST"; w $R/sys/devices/$D/model "DVD+-RW GU90N"
w $R/sys/devices/$D/rev "A1C2"; w $R/sys/devices/$D/type 5
ln_rel ../.. $R/sys/devices/$D/block/sr0/device
X=pci0000:00/0000:00:14.0/usb1/1-3/1-3:1.0/host8/target8:0:0/8:0:0:0
disk $R sr1 $X 9180416 0 1 1 2048 2048 11:1
w $R/sys/devices/$X/vendor "ASUS"; w $R/sys/devices/$X/model "SDRW-08D2S-U"
w $R/sys/devices/$X/type 5
ln_rel ../.. $R/sys/devices/$X/block/sr1/device
E=pci0000:00/0000:00:17.0/ata3/host2/target2:0:0/2:0:0:0
disk $R sr2 $E 0 1 1 1 2048 2048 11:2
w $R/sys/devices/$E/vendor "TSSTcorp"; w $R/sys/devices/$E/model "DVD-ROM SN-108DN"
w $R/sys/devices/$E/type 5
ln_rel ../.. $R/sys/devices/$E/block/sr2/device

# CPU/memory/network for the inventory test (nvme-sata)
R=nvme-sata
cat >$R/proc-cpuinfo.tmp <<'CPU'
processor	: 0
vendor_id	: GenuineIntel
model name	: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz
physical id	: 0
core id		: 0
flags		: fpu vme de pse tsc msr pae mce cx8 apic sep lm

processor	: 1
vendor_id	: GenuineIntel
model name	: Intel(R) Xeon(R) Gold 6338 CPU @ 2.00GHz
physical id	: 0
core id		: 1
flags		: fpu vme de pse tsc msr pae mce cx8 apic sep lm

CPU
mkdir -p $R/proc; mv $R/proc-cpuinfo.tmp $R/proc/cpuinfo
for c in 0 1; do
	w $R/sys/devices/system/cpu/cpu$c/topology/physical_package_id 0
	w $R/sys/devices/system/cpu/cpu$c/topology/core_id $c
	w $R/sys/devices/system/cpu/cpu$c/online 1
done
printf 'MemTotal:       65536000 kB\nMemFree:        60000000 kB\n' >$R/proc/meminfo
w $R/sys/devices/system/memory/block_size_bytes 8000000
for m in 0 1 2 3 4 5 6 7; do w $R/sys/devices/system/memory/memory$m/online 1; done
E=pci0000:00/0000:00:1c.0/0000:01:00.0/net/eno1
w $R/sys/devices/$E/address "3c:ec:ef:12:34:56"
w $R/sys/devices/$E/carrier 1
w $R/sys/devices/$E/addr_assign_type 0
w $R/sys/devices/$E/speed 10000
ln_rel ../../devices/$E $R/sys/class/net/eno1
w $R/sys/devices/virtual/net/lo/address "00:00:00:00:00:00"
ln_rel ../../devices/virtual/net/lo $R/sys/class/net/lo
