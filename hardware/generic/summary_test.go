package generic

import (
	"testing"

	"github.com/anvil-metal/anvil/hardware/erase"
	"github.com/anvil-metal/anvil/hardware/imagewrite"
	"github.com/stretchr/testify/assert"
)

func TestWriteImageSummaryHidesURLSecrets(t *testing.T) {
	r := WriteImageResult{Image: imagewrite.Result{
		Device: "/dev/nvme0n1", URL: "https://user:pw@images.example/os.qcow2?temp_url_sig=abc&temp_url_expires=1#x",
		Format: "qcow2", ChecksumAlgo: "sha256", BytesDownloaded: 812e6, BytesWritten: 4294967296, MBPerSecond: 951.4, PartitionReread: "ok",
	}}
	assert.Equal(t, "qcow2 image https://images.example/os.qcow2 (812.0 MB downloaded, sha256 verified) written to /dev/nvme0n1 (4295.0 MB at 951 MB/s); partition table re-read: ok", r.Summary())

	// The partial result of a failed write must not read as a success.
	r.Image.PartitionReread, r.Image.BytesWritten = "", 8388608
	assert.Equal(t, "qcow2 image https://images.example/os.qcow2 not written to /dev/nvme0n1: stopped after 812.0 MB downloaded and 8.4 MB written", r.Summary())
}

func TestExpressSummaryCoversBothParts(t *testing.T) {
	r := ExpressResult{
		NVMe:     &erase.Result{Devices: []erase.DeviceResult{{Plan: erase.DevicePlan{Device: "/dev/nvme0n1", Size: 1e9}, Status: erase.StatusErased, Method: erase.MethodNVMeUserData, Seconds: 1}}},
		Metadata: &erase.MetadataResult{Devices: []erase.MetadataDisk{{Device: "/dev/sda", Status: erase.StatusErased, Wipes: []erase.MetadataWipe{{Device: "/dev/sda"}}}}},
	}
	assert.Equal(t, "/dev/nvme0n1 erased by nvme_format_user_data_erase, verified (1.0 GB, 1.0 s); /dev/sda metadata wiped (no signatures found; 1 device(s) checked)", r.Summary())
}
