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
	cfg, m := buildVMImage(t)
	dir := t.TempDir()
	bin := filepath.Join(dir, "vmerase")
	if err := BuildAgent(context.Background(), cfg.RepoDir, "./image/internal/vmerase", bin); err != nil {
		t.Fatal(err)
	}
	script := "#!/bbin/gosh\n/bin/vmerase\nshutdown halt\n"
	ov := NewArchive()
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
	v := startVM(t, vmBoot{kernel: filepath.Join(cfg.OutDir, "vmlinuz"), initrd: initrd}, "52:54:00:a1:00:03", "127.0.0.1:9",
		[]string{"ANVIL-FMT-0001", "ANVIL-FMT-0002"})
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
	if len(res.Devices) != 2 {
		t.Fatalf("want 2 NVMe devices, got %s", line)
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
	for _, f := range v.disks {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if i := bytes.IndexByte(data, 0x5a); i >= 0 {
			t.Errorf("%s: the pattern survived the format at offset %d", f, i)
		}
	}
}
