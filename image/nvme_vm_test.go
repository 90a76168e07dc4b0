//go:build vm

package image

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/hardware/erase"
)

// TestVMNVMeFormatErase runs the agent's erase_devices against QEMU's
// emulated NVMe controllers for real: a guest program (image/internal/
// vmerase) fills both namespaces with a pattern, plans the erase (NVMe
// Format through the admin ioctl, no fallback to overwriting) and runs it
// with read-back verification. The host then checks the result and that
// no byte of the pattern is left in the disk files.
func TestVMNVMeFormatErase(t *testing.T) {
	res, disks := runVMErase(t, "", "52:54:00:a1:00:03", []string{"ANVIL-FMT-0001", "ANVIL-FMT-0002"})
	if len(res.Devices) != 2 {
		t.Fatalf("want 2 NVMe devices, got %s", toJSON(res))
	}
	for _, d := range res.Devices {
		t.Logf("%s: %s via %s (plan: %s; attempts %s)", d.Plan.Device, d.Status, d.Method, d.Plan.Reason, toJSON(d.Attempts))
		if d.Status != erase.StatusErased || !strings.HasPrefix(string(d.Method), "nvme_format") {
			t.Errorf("%s: %s by %q, want erased by an NVMe format", d.Plan.Device, d.Status, d.Method)
		}
		if d.Plan.NVMe == nil {
			t.Errorf("%s: the plan has no NVMe identify data", d.Plan.Device)
		}
	}
	for _, f := range disks {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.IndexByte(data, 0x5a); i >= 0 {
			t.Errorf("%s: the pattern survived the format at offset %d", f, i)
		}
	}
}

// TestVMSoftwareRAIDErase: the guest partitions both namespaces (an 8 MiB
// partition outside the array, then a member), builds a RAID1 over the
// members with the image's mdadm and fills the array and the other
// partitions with a pattern. erase_devices must erase the array through
// md and the other partitions on their own, leave the member disks alone
// (so the array survives), and leave no run of the pattern anywhere in
// the disk files, as seen from the host.
func TestVMSoftwareRAIDErase(t *testing.T) {
	res, disks := runVMErase(t, "raid", "52:54:00:a1:00:04", []string{"ANVIL-MDE-0001", "ANVIL-MDE-0002"})
	got := map[string]erase.DeviceResult{}
	for _, d := range res.Devices {
		t.Logf("%s: %s via %s (%s)", d.Plan.Device, d.Status, d.Method, d.Plan.Reason)
		got[d.Plan.Device] = d
	}
	for _, dev := range []string{"/dev/md0", "/dev/nvme0n1p1", "/dev/nvme1n1p1"} {
		// Zeroing (BLKZEROOUT or overwrite: a single zero pass here) is
		// all a partition or an array can get; no drive command reaches it.
		if d, ok := got[dev]; !ok || d.Status != erase.StatusErased || (d.Method != erase.MethodZeroOut && d.Method != erase.MethodOverwrite) {
			t.Errorf("%s: want erased by zeroing, got %s by %q: %s", dev, d.Status, d.Method, d.Error)
		}
	}
	for _, dev := range []string{"/dev/nvme0n1", "/dev/nvme1n1"} {
		if d := got[dev]; d.Status != erase.StatusSkipped || !strings.Contains(d.Plan.Reason, "members of software RAID md0") {
			t.Errorf("%s: want skipped as holding a member of md0, got %s (%s)", dev, d.Status, d.Plan.Reason)
		}
	}
	run := bytes.Repeat([]byte{0x5a}, 512)
	for _, f := range disks {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.Index(data, run); i >= 0 {
			t.Errorf("%s: the pattern survived the erase at offset %d", f, i)
		}
		if !bytes.Equal(data[512:520], []byte("EFI PART")) {
			t.Errorf("%s: the partition table holding the array's member is gone", f)
		}
	}
}

// runVMErase boots the agent image with image/internal/vmerase (given
// mode as its argument) in place of the agent, two NVMe disks of the given
// serials, and returns the erase result it printed and the disk files.
func runVMErase(t *testing.T, mode, mac string, serials []string) (erase.Result, []string) {
	t.Helper()
	cfg, m := buildVMImage(t)
	if mode == "raid" && m.Mdadm == nil {
		t.Skip("image built without mdadm")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "vmerase")
	if err := BuildAgent(context.Background(), cfg.RepoDir, "./image/internal/vmerase", bin); err != nil {
		t.Fatal(err)
	}
	// The script stands in for the agent, so it loads the drivers itself
	// (coldplug is the agent binary under another name).
	script := "#!/bbin/gosh\n/bin/coldplug\n/bin/vmerase " + mode + "\nshutdown halt\n"
	ov := NewArchive()
	addKmodTools(t, ov, cfg)
	ov.AddBytes(AgentPath, []byte(script), 0o755)
	if err := ov.AddFile("bin/vmerase", bin, 0o755); err != nil {
		t.Fatal(err)
	}
	overlay := filepath.Join(dir, "vmerase.cpio.gz")
	if _, err := ov.WriteGzipFile(overlay); err != nil {
		t.Fatal(err)
	}
	initrd := filepath.Join(dir, "initramfs.cpio.gz")
	if err := Concat(initrd, filepath.Join(cfg.CacheDir, m.Base.Path), overlay); err != nil {
		t.Fatal(err)
	}
	// No controller: anvil.api= on the command line only marks the ramdisk.
	v := startVM(t, vmBoot{kernel: filepath.Join(cfg.OutDir, "vmlinuz"), initrd: initrd}, mac, "127.0.0.1:9", serials)
	select {
	case <-v.exited:
	case <-time.After(3 * time.Minute):
		t.Fatal("VM did not power off within 3 minutes")
	}
	raw, _ := os.ReadFile(v.serial)
	log := string(raw)
	if i := strings.Index(log, "VMERASE-ERROR "); i >= 0 {
		t.Errorf("guest: %s", strings.SplitN(log[i:], "\n", 2)[0])
	}
	i := strings.Index(log, "VMERASE-RESULT ")
	if i < 0 {
		t.Fatalf("no result on the console:\n%s", log)
	}
	line := strings.TrimSpace(strings.SplitN(log[i+len("VMERASE-RESULT "):], "\n", 2)[0])
	var res erase.Result
	if err := json.Unmarshal([]byte(line), &res); err != nil {
		t.Fatalf("result %q: %v", line, err)
	}
	return res, v.disks
}
