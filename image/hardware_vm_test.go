//go:build vm

package image

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/bmc/vbmc"
)

// serverVariant is one emulated real-server machine for the default image.
type serverVariant struct {
	name string
	// nic is the QEMU NIC model; twoNICs adds a second one of the same
	// model and takes the first one's link down (an uncabled port 1).
	nic     string
	twoNICs bool
	// disk is the controller the one test disk hangs off (a vbmc.QEMUDisk
	// Bus): ahci, megasas-gen2, virtio-scsi or nvme.
	disk string
	uefi bool
}

// serverVariants covers every NIC model, every disk controller and both
// firmwares with four boots instead of the 16 of the full cross product.
// QEMU 7.2 has no igb (added in 8.0): e1000e stands for Intel.
var serverVariants = []serverVariant{
	{name: "e1000e-ahci-seabios", nic: "e1000e", disk: "ahci"},
	{name: "virtio2-megasas-ovmf", nic: "virtio-net-pci", twoNICs: true, disk: "megasas-gen2", uefi: true},
	{name: "e1000e-nvme-ovmf", nic: "e1000e", disk: "nvme", uefi: true},
	{name: "virtio2-virtioscsi-seabios", nic: "virtio-net-pci", twoNICs: true, disk: "virtio-scsi"},
}

// diskArgs attaches file as the variant's disk with the given serial.
func (v serverVariant) diskArgs(t *testing.T, file, serial string) []string {
	args, err := vbmc.DiskArgs([]vbmc.QEMUDisk{{Path: file, Serial: serial, Bus: v.disk}}, false)
	if err != nil {
		t.Fatal(err)
	}
	return args
}

// ovmfArgs boots UEFI: Debian's OVMF code read-only, a private copy of
// its variable store.
func ovmfArgs(tb testing.TB, dir string) []string {
	code, vars := "/usr/share/OVMF/OVMF_CODE_4M.fd", "/usr/share/OVMF/OVMF_VARS_4M.fd"
	for _, f := range []string{code, vars} {
		if _, err := os.Stat(f); err != nil {
			tb.Skipf("OVMF not installed (apt-get install ovmf): %v", err)
		}
	}
	b, err := os.ReadFile(vars)
	if err != nil {
		tb.Fatal(err)
	}
	own := filepath.Join(dir, "OVMF_VARS.fd")
	if err := os.WriteFile(own, b, 0o644); err != nil {
		tb.Fatal(err)
	}
	return []string{"-drive", "if=pflash,format=raw,readonly=on,file=" + code, "-drive", "if=pflash,format=raw,file=" + own}
}

// TestVMServerHardware boots the default image (generic kernel, modules
// by class, coldplug) on emulated server hardware and, for each variant,
// checks that the agent heartbeats, that inspection lists the disk with
// its size and serial, and that a manual clean with erase_devices wipes
// the pattern-filled disk, read back from the host.
func TestVMServerHardware(t *testing.T) {
	// SeaBIOS variants boot the PVH kernel, OVMF ones the bzImage (OVMF
	// has no PVH loader): both kernels are exercised here.
	bzImage, initrd := vmImage(t)
	pvh, _ := vmDirect(t)
	c := startController(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var summary []string
	for i, v := range serverVariants {
		ok := t.Run(v.name, func(t *testing.T) {
			kernel := pvh
			if v.uefi {
				kernel = bzImage
			}
			hb := runServerVariant(t, c, self, kernel, initrd, v, i)
			summary = append(summary, fmt.Sprintf("%-28s first heartbeat %5.1fs after QEMU start", v.name, hb.Seconds()))
		})
		if !ok {
			summary = append(summary, fmt.Sprintf("%-28s FAILED", v.name))
		}
	}
	t.Logf("boot -> first heartbeat per variant (TCG):\n%s", strings.Join(summary, "\n"))
}

func runServerVariant(t *testing.T, c *controller, self, kernel, initrd string, v serverVariant, i int) time.Duration {
	dir := t.TempDir()
	const size = 64 << 20
	serial := fmt.Sprintf("ANVIL-HW-%04d", i+1)
	disk := filepath.Join(dir, "disk.raw")
	writePattern(t, disk, size)
	macs := []string{fmt.Sprintf("52:54:00:b0:%02x:01", i)}
	if v.twoNICs {
		macs = append(macs, fmt.Sprintf("52:54:00:b0:%02x:02", i))
	}

	// The port is on the first MAC: with two NICs that is the uncabled
	// one, so the lookup only finds the node if the agent sends every MAC.
	name := "hw-" + v.name
	node := c.mustCall(t, "POST", "/v1/nodes", map[string]any{
		"driver": "fake-hardware", "name": name, "deploy_interface": "direct", "inspect_interface": "agent",
	})
	c.mustCall(t, "POST", "/v1/ports", map[string]any{"address": macs[0], "node_uuid": node["uuid"]})
	c.mustCall(t, "PUT", "/v1/nodes/"+name+"/states/provision", map[string]any{"target": "manage"})
	c.waitState(t, name, "manageable", time.Minute)
	c.mustCall(t, "PUT", "/v1/nodes/"+name+"/states/provision", map[string]any{"target": "inspect"})

	args := []string{"-accel", "tcg", "-m", "512", "-smp", "1", "-display", "none", "-no-reboot", "-S",
		"-kernel", kernel, "-initrd", initrd,
		"-append", "console=ttyS0 panic=-1 anvil.api=http://" + guestAPI,
		// Two serial ports, as servers have: the kernel prints on ttyS0,
		// the agent copies the kernel log and its own to ttyS1.
		"-serial", "file:" + filepath.Join(dir, "serial.log"),
		"-serial", "file:" + filepath.Join(dir, "serial1.log"),
		"-device", "virtio-rng-pci"}
	monitor := filepath.Join(dir, "monitor.sock")
	args = append(args, "-monitor", "unix:"+monitor+",server,nowait")
	if v.uefi {
		args = append(args, ovmfArgs(t, dir)...)
	}
	for n, mac := range macs {
		// Every NIC on its own restricted slirp network; only the last
		// one's link is up.
		args = append(args, "-netdev", fmt.Sprintf("user,id=net%d,restrict=on,guestfwd=tcp:%s-cmd:%s", n, guestAPI, self),
			"-device", fmt.Sprintf("%s,netdev=net%d,mac=%s,id=nic%d", v.nic, n, mac, n))
	}
	args = append(args, v.diskArgs(t, disk, serial)...)
	cmd := exec.Command("qemu-system-x86_64", args...)
	cmd.Env = append(os.Environ(), guestfwdEnv+"=127.0.0.1:"+c.port)
	var qout bytes.Buffer
	cmd.Stdout, cmd.Stderr = &qout, &qout
	if err := cmd.Start(); err != nil {
		t.Fatalf("start qemu: %v", err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	stop := func() {
		_ = cmd.Process.Kill()
		<-exited
	}
	t.Cleanup(func() {
		stop()
		if t.Failed() {
			s, _ := os.ReadFile(filepath.Join(dir, "serial.log"))
			t.Logf("qemu %v\nqemu output:\n%s\nserial console:\n%s", args, qout.String(), tailBytes(s, 8000))
		}
	})
	// Paused (-S) until the first port's link is down, so the guest never
	// sees it with a carrier.
	hmp := []string{"cont"}
	if v.twoNICs {
		hmp = []string{"set_link nic0 off", "cont"}
	}
	monitorCommands(t, monitor, hmp)
	started := time.Now()

	// Inspection: heartbeat, then the inventory.
	var firstHeartbeat time.Duration
	deadline := started.Add(5 * time.Minute)
	for left := false; ; {
		_, n := c.call(t, "GET", "/v1/nodes/"+name, nil)
		state, _ := n["provision_state"].(string)
		dii, _ := n["driver_internal_info"].(map[string]any)
		if firstHeartbeat == 0 && dii["agent_last_heartbeat"] != nil {
			if ts, err := time.Parse(time.RFC3339Nano, fmt.Sprint(dii["agent_last_heartbeat"])); err == nil {
				firstHeartbeat = ts.Sub(started)
			}
			t.Logf("%s: first heartbeat %v after QEMU start (QEMU CPU time %v)", v.name, firstHeartbeat.Round(time.Millisecond), processCPU(cmd.Process.Pid))
		}
		left = left || state != "manageable"
		if left && state == "manageable" {
			break
		}
		if strings.HasSuffix(state, "failed") || time.Now().After(deadline) {
			t.Fatalf("inspection: provision_state %q, last_error %v", state, n["last_error"])
		}
		select {
		case <-exited:
			t.Fatalf("QEMU exited during inspection (state %q)", state)
		case <-time.After(200 * time.Millisecond):
		}
	}
	_, inv := c.call(t, "GET", "/v1/nodes/"+name+"/inventory", nil)
	inventory, _ := inv["inventory"].(map[string]any)
	disks, _ := inventory["disks"].([]any)
	var found map[string]any
	for _, d := range disks {
		if dm, _ := d.(map[string]any); dm["serial"] == serial {
			found = dm
		}
	}
	if found == nil {
		t.Fatalf("inventory has no disk with serial %s: %s", serial, toJSON(disks))
	}
	if found["size"] != float64(size) {
		t.Errorf("disk %v: size %v, want %d", found["name"], found["size"], size)
	}
	t.Logf("%s: inventory disk %v serial %v size %v model %v", v.name, found["name"], found["serial"], found["size"], found["model"])
	// BMC serial-over-LAN may show either port: both carry the boot.
	for _, f := range []string{"serial.log", "serial1.log"} {
		out, _ := os.ReadFile(filepath.Join(dir, f))
		for _, want := range []string{"] Linux version ", "msg=anvil-agent ", "coldplug done"} {
			if !bytes.Contains(out, []byte(want)) {
				t.Errorf("%s has no %q", f, want)
			}
		}
	}

	// Cleaning in the same boot: the agent keeps looking up after
	// inspection, and finds the node again once it is cleaning.
	c.mustCall(t, "PUT", "/v1/nodes/"+name+"/states/provision", map[string]any{"target": "clean",
		"clean_steps": []map[string]any{{"interface": "deploy", "step": "erase_devices"}}})
	c.waitState(t, name, "manageable", 4*time.Minute)
	stop()
	assertErasedFile(t, disk, serial)
	return firstHeartbeat
}

// monitorCommands runs HMP commands on QEMU's monitor socket, each after
// the prompt, so none is lost when the connection closes.
func monitorCommands(t *testing.T, sock string, cmds []string) {
	t.Helper()
	var conn net.Conn
	var err error
	for range 200 {
		if conn, err = net.Dial("unix", sock); err == nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err != nil {
		t.Fatalf("QEMU monitor: %v", err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	var seen []byte
	prompt := func() {
		buf := make([]byte, 4096)
		for !bytes.HasSuffix(bytes.TrimRight(seen, " "), []byte("(qemu)")) {
			n, err := conn.Read(buf)
			if err != nil {
				t.Fatalf("QEMU monitor: %v (read so far %q)", err, seen)
			}
			seen = append(seen, buf[:n]...)
		}
		seen = nil
	}
	prompt()
	for _, cmd := range cmds {
		if _, err := fmt.Fprintf(conn, "%s\n", cmd); err != nil {
			t.Fatalf("QEMU monitor %q: %v", cmd, err)
		}
		prompt()
	}
}

// assertErasedFile reads a disk image from the host: neither the pattern
// nor a GPT header writePattern put there may remain.
func assertErasedFile(t *testing.T, path, serial string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(data, []byte("EFI PART")) {
		t.Errorf("%s: a GPT header survived erase_devices", serial)
	}
	if i := bytes.IndexByte(data, 0x5a); i >= 0 {
		t.Errorf("%s: the test pattern survived erase_devices at offset %d", serial, i)
	}
}

// addKmodTools puts the agent binary (built by Build) into a test overlay
// as /bin/anvil-kmod with the coldplug and modprobe links: a script that
// replaces the agent must load the drivers itself.
func addKmodTools(tb testing.TB, ov *Archive, cfg Config) {
	tb.Helper()
	if err := ov.AddFile("bin/anvil-kmod", filepath.Join(cfg.CacheDir, "anvil-agent"), 0o755); err != nil {
		tb.Fatal(err)
	}
	AddKmodLinks(ov, "/bin/anvil-kmod")
}
