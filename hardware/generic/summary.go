package generic

import (
	"fmt"
	"strings"

	"github.com/anvil-metal/anvil/internal/redact"
)

// Summary says which devices erase_devices_express formatted and which
// got a metadata wipe.
func (r ExpressResult) Summary() string {
	var parts []string
	if r.NVMe != nil {
		parts = append(parts, r.NVMe.Summary())
	}
	if r.Metadata != nil {
		parts = append(parts, r.Metadata.Summary())
	}
	return strings.Join(parts, "; ")
}

// Summary says what write_image put where. The URL loses its query and
// credentials: signed (temporary) URLs carry secrets there.
func (r WriteImageResult) Summary() string {
	i := r.Image
	if i.PartitionReread == "" {
		// Set only once the image was written, verified and flushed: this
		// is the partial result of a failed write.
		return fmt.Sprintf("%s image %s not written to %s: stopped after %.1f MB downloaded and %.1f MB written",
			i.Format, redact.URL(i.URL), i.Device, float64(i.BytesDownloaded)/1e6, float64(i.BytesWritten)/1e6)
	}
	s := fmt.Sprintf("%s image %s (%.1f MB downloaded, %s verified) written to %s (%.1f MB at %.0f MB/s); partition table re-read: %s",
		i.Format, redact.URL(i.URL), float64(i.BytesDownloaded)/1e6, i.ChecksumAlgo, i.Device, float64(i.BytesWritten)/1e6, i.MBPerSecond, i.PartitionReread)
	if c := r.ConfigDrive; c != nil && c.Table != "" && c.SizeBytes > 0 {
		verb := "written to its existing"
		if c.Created {
			verb = "written to a new"
		}
		s += fmt.Sprintf("; configdrive (%d bytes, %s) %s %s partition %d at %d MiB", c.ISOBytes, redact.URL(c.Source), verb, c.Table, c.Partition, c.OffsetBytes>>20)
	}
	return s
}
