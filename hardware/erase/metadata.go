package erase

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/disk"
	"github.com/anvil-metal/anvil/protocol"
)

// MetadataWipe is the outcome of wiping one device (disk or partition).
type MetadataWipe struct {
	Device       string      `json:"device"`
	Found        []Signature `json:"found,omitempty"`     // before the wipe
	Remaining    []Signature `json:"remaining,omitempty"` // after; non-empty means failure
	BytesZeroed  int64       `json:"bytes_zeroed"`
	Verification string      `json:"verification,omitempty"`
	Error        string      `json:"error,omitempty"`
}

// MetadataDisk groups the wipes of one disk: partitions first, then the
// disk itself, or the reason it was skipped.
type MetadataDisk struct {
	Device  string         `json:"device"`
	Status  Status         `json:"status"`
	Reason  string         `json:"reason,omitempty"`
	Wipes   []MetadataWipe `json:"wipes,omitempty"`
	Seconds float64        `json:"seconds"`
}

// MetadataResult is the result of erase_devices_metadata.
type MetadataResult struct {
	Devices []MetadataDisk `json:"devices"`
	Seconds float64        `json:"seconds"`
}

// WipeMetadata removes partition tables and filesystem, LVM and md
// signatures from one device, in pure Go (no wipefs in the ramdisk): it
// records what it finds, zeroes the metadata regions, and checks both that
// the regions read back as zeros and that no signature is detected any more.
// lbs is the logical block size (alignment for O_DIRECT).
func WipeMetadata(ctx context.Context, o Opener, path string, lbs uint64) (MetadataWipe, error) {
	w := MetadataWipe{Device: path}
	fail := func(err error) (MetadataWipe, error) {
		w.Error = err.Error()
		return w, err
	}
	f, err := openDirectForWrite(o, path)
	if err != nil {
		return fail(err)
	}
	defer f.Close()
	sz, err := deviceSize(f)
	if err != nil {
		return fail(err)
	}
	size := int64(sz)
	// Everything is read back through the same descriptor (opened through
	// the guard), never by re-opening the path.
	flushBuffers(f)
	w.Found = DetectSignatures(alignedReader{f}, size)
	buf, free, err := alignedBuffer(1 << 20)
	if err != nil {
		return fail(err)
	}
	defer free()
	// 4 KiB alignment suits O_DIRECT on 512-byte and 4Kn devices alike.
	regions := metadataRegions(size, int64(max(lbs, 4096)))
	for _, r := range regions {
		if err := ctx.Err(); err != nil {
			return fail(err)
		}
		for off := r.off; off < r.off+r.n; {
			n := min(int64(len(buf)), r.off+r.n-off)
			if _, err := f.WriteAt(buf[:n], off); err != nil {
				return fail(fmt.Errorf("zero %s at %d: %w", path, off, err))
			}
			off += n
			w.BytesZeroed += n
		}
	}
	if err := f.Sync(); err != nil {
		return fail(fmt.Errorf("sync %s: %w", path, err))
	}
	flushBuffers(f)
	rf := f
	for _, r := range regions {
		got := make([]byte, r.n)
		if _, err := (alignedReader{rf}).ReadAt(got, r.off); err != nil {
			return fail(fmt.Errorf("read back %s at %d: %w", path, r.off, err))
		}
		if i := slices.IndexFunc(got, func(b byte) bool { return b != 0 }); i >= 0 {
			return fail(fmt.Errorf("%s: byte %d is not zero after the wipe", path, r.off+int64(i)))
		}
	}
	w.Remaining = DetectSignatures(alignedReader{rf}, size)
	if len(w.Remaining) > 0 {
		return fail(fmt.Errorf("%s: signatures remain after the wipe: %v", path, w.Remaining))
	}
	w.Verification = fmt.Sprintf("%d regions read back as zero, no signature detected", len(regions))
	return w, nil
}

// alignedReader satisfies io.ReaderAt on a file that may be O_DIRECT by
// reading through an aligned bounce buffer in aligned chunks.
type alignedReader struct{ f *os.File }

func (a alignedReader) ReadAt(p []byte, off int64) (int, error) {
	const blk = 4096
	start := off / blk * blk
	end := (off + int64(len(p)) + blk - 1) / blk * blk
	buf, free, err := alignedBuffer(int(end - start))
	if err != nil {
		return 0, err
	}
	defer free()
	n, err := a.f.ReadAt(buf, start)
	if n < int(off-start) {
		return 0, err
	}
	c := copy(p, buf[off-start:n])
	if c < len(p) {
		return c, err
	}
	return c, nil
}

// MetadataOptions are the policy knobs erase_devices_metadata honours.
type MetadataOptions struct {
	Shared        SharedCheck // shared-storage filesystems refuse the step unless allowed
	SkipRemovable bool        // the policy's skip_removable, as for erase_devices
}

// EraseMetadata is erase_devices_metadata: for each eligible disk, wipe
// every partition (last first), then the disk, so md superblocks living on
// partitions (crowbar-core#15) go too. Software RAID arrays are wiped as
// devices; their members are not, and a disk with members among its
// partitions keeps its partition table and has only its other partitions
// wiped (see mdraid.go). Skips virtual media, optical drives, dm devices,
// read-only disks, removable ones when the policy says so, and
// guard-protected devices, recording why. A disk holding a shared-storage
// filesystem fails the step before any device is written, unless
// opts.Shared.Allow is set.
func EraseMetadata(ctx context.Context, disks []disk.Disk, o Opener, opts MetadataOptions, progress hardware.ProgressFunc) (MetadataResult, error) {
	shared := opts.Shared
	start := time.Now()
	var res MetadataResult
	skip := func(d disk.Disk) string {
		reason := skipReason(d, o)
		switch {
		case reason != "":
		case d.ReadOnly:
			reason = "read-only device"
		case d.Removable && opts.SkipRemovable:
			reason = "removable device (skip_removable is set)"
		}
		return reason
	}
	var refused []string
	for _, d := range disks {
		if skip(d) != "" {
			continue
		}
		if r := shared.refusal(d.Path); r != nil {
			refused = append(refused, r.Error())
			res.Devices = append(res.Devices, MetadataDisk{Device: d.Path, Status: StatusFailed, Reason: r.Error()})
		}
	}
	if len(refused) > 0 {
		res.Seconds = time.Since(start).Seconds()
		return res, &protocol.Error{Type: protocol.ErrTypeProtectedDevice, Code: 500,
			Message: "metadata erase refused before writing anything", Details: strings.Join(refused, "; ")}
	}
	var failed []string
	for i, d := range disks {
		md := MetadataDisk{Device: d.Path}
		t0 := time.Now()
		var targets []string
		keepTable := partialMDMember(d) && skip(withoutMDPartitions(d)) == ""
		if keepTable {
			// The partition table stays (it locates the members); the
			// other partitions are wiped like any device.
			md.Reason = "partition table kept: " + mdMemberReason(d)
			for _, p := range otherPartitions(d) {
				targets = append(targets, p.Path)
			}
		} else {
			if reason := skip(d); reason != "" {
				md.Status, md.Reason = StatusSkipped, reason
				res.Devices = append(res.Devices, md)
				continue
			}
			if why := mdUnwritable(d); why != "" {
				md.Status, md.Reason = StatusFailed, why
				failed = append(failed, d.Path+": "+why)
				res.Devices = append(res.Devices, md)
				continue
			}
			for _, p := range d.Partitions {
				targets = append(targets, p.Path)
			}
		}
		slices.Sort(targets)
		slices.Reverse(targets)
		if !keepTable {
			targets = append(targets, d.Path)
		}
		md.Status = StatusErased
		for _, t := range targets {
			if err := ctx.Err(); err != nil {
				md.Status, md.Reason = StatusFailed, err.Error()
				break
			}
			w, err := WipeMetadata(ctx, o, t, d.LogicalBlockSize)
			md.Wipes = append(md.Wipes, w)
			if err != nil {
				md.Status, md.Reason = StatusFailed, err.Error()
				if errors.Is(err, hardware.ErrProtected) {
					break
				}
			}
		}
		switch {
		case md.Status != StatusErased:
			failed = append(failed, d.Path+": "+md.Reason)
		case !keepTable:
			if f, err := o.OpenForWrite(d.Path, 0); err == nil {
				_ = rereadPartitions(f) // drop the kernel's view of the old partitions
				f.Close()
			}
		}
		md.Seconds = time.Since(t0).Seconds()
		res.Devices = append(res.Devices, md)
		progress.Report(hardware.Progress{Percent: 100 * float64(i+1) / float64(len(disks)), Device: d.Path, Message: d.Path + ": metadata " + string(md.Status)})
	}
	res.Seconds = time.Since(start).Seconds()
	if len(failed) > 0 {
		typ := protocol.ErrTypeBlockDeviceErase
		if errors.Is(ctx.Err(), context.Canceled) {
			typ = protocol.ErrTypeAborted
		}
		return res, &protocol.Error{Type: typ, Code: 500, Message: "metadata erase failed", Details: strings.Join(failed, "; ")}
	}
	return res, nil
}
