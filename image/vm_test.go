//go:build vm

package image

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/bmc/vbmc"
	"github.com/anvil-metal/anvil/protocol"
)

// guestfwdEnv switches the test binary into a one-connection TCP relay:
// slirp's guestfwd "cmd:" form runs the binary once per guest connection
// with the connection on stdin/stdout. (The "tcp:host:port" form opens a
// single host connection when QEMU starts and funnels every guest
// connection into it, which breaks as soon as the server closes it.)
const guestfwdEnv = "ANVIL_VM_GUESTFWD"

func TestMain(m *testing.M) {
	// A second forward (e.g. to an image server) names its target as an
	// argument: slirp runs "cmd:" through argv, not a shell.
	for _, a := range os.Args[1:] {
		if addr, ok := strings.CutPrefix(a, relayFlag); ok {
			os.Exit(relay(addr))
		}
	}
	if addr := os.Getenv(guestfwdEnv); addr != "" {
		os.Exit(relay(addr))
	}
	os.Exit(m.Run())
}

// relayFlag makes the test binary a relay to the address that follows.
const relayFlag = "-anvil-relay="

func relay(addr string) int {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, "guestfwd relay:", err)
		return 1
	}
	done := make(chan struct{})
	go func() {
		_, _ = io.Copy(c, os.Stdin)
		_ = c.(*net.TCPConn).CloseWrite()
		close(done)
	}()
	_, _ = io.Copy(os.Stdout, c)
	c.Close()
	return 0
}

// apiVersion is the microversion the test speaks (inventory needs 1.81+).
const apiVersion = "1.82"

// sizeBudget bounds the compressed initramfs (kernel not included).
const sizeBudget = InitramfsBudget

// guestAPI is where the agent finds the controller: slirp forwards it.
const guestAPI = "10.0.2.100:6385"

// vmImage builds the image (the u-root base is cached in out/; the agent
// overlay is rebuilt so the VM runs the agent of this checkout).
func vmImage(tb testing.TB) (kernel, initrd string) {
	tb.Helper()
	cfg, m := buildVMImage(tb)
	return filepath.Join(cfg.OutDir, "vmlinuz"), filepath.Join(cfg.OutDir, InitramfsName(m.Compression))
}

// vmDirect is vmImage for direct boots under SeaBIOS: the PVH kernel
// (PVHName) when the build has one. It boots the same kernel 2.7 s sooner
// under TCG, where decompressing Debian's xz bzImage is slow; the tests
// that boot through iPXE, GRUB, OVMF or an ISO boot the bzImage.
func vmDirect(tb testing.TB) (kernel, initrd string) {
	tb.Helper()
	cfg, m := buildVMImage(tb)
	return DirectKernel(cfg.OutDir), filepath.Join(cfg.OutDir, InitramfsName(m.Compression))
}

func buildVMImage(tb testing.TB) (Config, *Manifest) {
	tb.Helper()
	for _, bin := range []string{"qemu-system-x86_64", "apt-get", "dpkg", "depmod"} {
		if _, err := exec.LookPath(bin); err != nil {
			tb.Skipf("%s not installed: %v", bin, err)
		}
	}
	repo, err := filepath.Abs("..")
	if err != nil {
		tb.Fatal(err)
	}
	cfg := DefaultConfig(repo)
	if pkg := os.Getenv("ANVIL_VM_KERNEL_PACKAGE"); pkg != "" {
		// e.g. linux-image-amd64, the generic kernel with the drivers
		// real hardware needs; built next to the default image.
		cfg.KernelPackage, cfg.OutDir = pkg, filepath.Join(repo, "out", "image-"+pkg)
	}
	v, _ := builtImages.LoadOrStore(cfg.OutDir, &builtImage{})
	b := v.(*builtImage)
	b.once.Do(func() {
		start := time.Now()
		b.m, b.err = Build(context.Background(), slog.New(slog.NewTextHandler(tbWriter{tb}, nil)), cfg)
		if b.err == nil {
			tb.Logf("image ready in %v: initramfs %d bytes (base cached: %v), kernel %s", time.Since(start).Round(time.Millisecond),
				b.m.Initramfs.Bytes, b.m.Base.Cached, b.m.Kernel.Release)
		}
	})
	m, err := b.m, b.err
	if err != nil {
		tb.Fatalf("Build() = %v", err)
	}
	if m.Initramfs.Bytes > sizeBudget {
		tb.Errorf("initramfs is %d bytes compressed, over the %d byte budget", m.Initramfs.Bytes, sizeBudget)
	}
	return cfg, m
}

// builtImages holds the images this run of the test binary built, by
// output directory: the VM tests boot the same image, and each Build
// (agent compile, overlay, compression, ISO) took 28–60 s, a third of the
// VM suite's time in CI. Tests that change an image copy it first.
var builtImages sync.Map // OutDir -> *builtImage

type builtImage struct {
	once sync.Once
	m    *Manifest
	err  error
}

type tbWriter struct{ tb testing.TB }

func (w tbWriter) Write(p []byte) (int, error) {
	w.tb.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// controller is a running anvil-controller binary.
type controller struct {
	url  string
	port string
	mu   sync.Mutex
	logs bytes.Buffer

	bin, dir string
	args     []string
	cmd      *exec.Cmd
	// hc trusts the controller's self-signed certificate (--tls-self-signed)
	// by its fingerprint; plain otherwise.
	hc *http.Client
}

var listenRE = regexp.MustCompile(`anvil-controller listening"? addr=(\S+)(?: url=(\S+))?`)

func startController(tb testing.TB, extraArgs ...string) *controller {
	tb.Helper()
	return startControllerOn(tb, "127.0.0.1:0", extraArgs...)
}

// startControllerOn is startController listening on listen (e.g. a
// bridge's address inside a test's network namespace).
func startControllerOn(tb testing.TB, listen string, extraArgs ...string) *controller {
	tb.Helper()
	dir := tb.TempDir()
	bin := filepath.Join(dir, "anvil-controller")
	build := exec.Command("go", "build", "-o", bin, "./cmd/anvil-controller")
	build.Dir = ".."
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		tb.Fatalf("build controller: %v\n%s", err, out)
	}
	c := &controller{bin: bin, dir: dir, args: extraArgs}
	c.start(tb, listen)
	tb.Cleanup(func() {
		c.kill()
		if tb.Failed() {
			tb.Logf("controller log:\n%s", c.log())
		}
	})
	return c
}

// start runs the controller binary on listen with its database in c.dir.
func (c *controller) start(tb testing.TB, listen string) {
	tb.Helper()
	cmd := exec.Command(c.bin, append([]string{"--listen", listen, "--database", "sqlite://" + filepath.Join(c.dir, "anvil.db"),
		"--heartbeat-interval", "2s"}, c.args...)...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		tb.Fatal(err)
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	c.cmd = cmd
	addr := make(chan []string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			c.mu.Lock()
			c.logs.WriteString(sc.Text() + "\n")
			c.mu.Unlock()
			if m := listenRE.FindStringSubmatch(sc.Text()); m != nil {
				addr <- m
			}
		}
	}()
	select {
	case m := <-addr:
		c.url = "http://" + m[1]
		if m[2] != "" {
			c.url = m[2]
		}
		_, c.port, _ = net.SplitHostPort(m[1])
		c.hc = http.DefaultClient
		if fp, err := os.ReadFile(filepath.Join(c.dir, "anvil-tls.fingerprint")); err == nil {
			pin, err := protocol.ParseFingerprint(string(fp))
			if err != nil {
				tb.Fatal(err)
			}
			c.hc = &http.Client{Transport: &http.Transport{TLSClientConfig: protocol.PinnedTLSConfig(pin)}}
		}
	case <-time.After(30 * time.Second):
		tb.Fatalf("controller did not start:\n%s", c.log())
	}
}

// kill stops the controller at once (SIGKILL), as a crash would.
func (c *controller) kill() {
	if c.cmd != nil && c.cmd.Process != nil {
		_ = c.cmd.Process.Kill()
		_ = c.cmd.Wait()
	}
}

// restart kills the controller and starts it again on the same port and
// database (the guest's relay keeps pointing at that port).
func (c *controller) restart(tb testing.TB) {
	tb.Helper()
	c.kill()
	c.start(tb, "127.0.0.1:"+c.port)
}

func (c *controller) log() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.logs.String()
}

// call sends a request at apiVersion and decodes a JSON object answer.
func (c *controller) call(tb testing.TB, method, path string, body any) (int, map[string]any) {
	tb.Helper()
	var r io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			tb.Fatal(err)
		}
		r = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, c.url+path, r)
	if err != nil {
		tb.Fatal(err)
	}
	req.Header.Set("X-OpenStack-Ironic-API-Version", apiVersion)
	req.Header.Set("Content-Type", "application/json")
	res, err := c.hc.Do(req)
	if err != nil {
		tb.Fatalf("%s %s: %v", method, path, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var m map[string]any
	_ = json.Unmarshal(raw, &m)
	if res.StatusCode >= 300 {
		tb.Logf("%s %s = %d: %s", method, path, res.StatusCode, raw)
	}
	return res.StatusCode, m
}

func (c *controller) mustCall(tb testing.TB, method, path string, body any) map[string]any {
	tb.Helper()
	code, m := c.call(tb, method, path, body)
	if code >= 300 {
		tb.Fatalf("%s %s = HTTP %d, want 2xx", method, path, code)
	}
	return m
}

// waitState polls the node until provision_state is want.
func (c *controller) waitState(tb testing.TB, node, want string, timeout time.Duration) map[string]any {
	tb.Helper()
	deadline := time.Now().Add(timeout)
	for {
		_, n := c.call(tb, "GET", "/v1/nodes/"+node, nil)
		if n["provision_state"] == want {
			return n
		}
		if time.Now().After(deadline) {
			tb.Fatalf("node %s: provision_state %v, want %q after %v (last_error %v)", node, n["provision_state"], want, timeout, n["last_error"])
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// vm is a QEMU child process.
type vm struct {
	cmd     *exec.Cmd
	serial  string
	started time.Time
	exited  chan struct{}
	disks   []string // the NVMe disks' backing files
}

// vmBoot says how a VM boots: directly from kernel and initrd, or over the
// network (pxe): QEMU's iPXE gets a script from slirp's TFTP that chains to
// the controller's /v1/boot/{pxeNode}/ipxe.
type vmBoot struct {
	kernel, initrd string
	extraArgs      []string
	pxe            bool
	pxeNode        string // set by inspectWithVM once the node exists
	// cmdline replaces anvil.api=... on a direct boot (a stock Ironic's
	// ipa-api-url=...); netOpts are more slirp options, e.g.
	// "hostfwd=tcp:127.0.0.1:PORT-:9999" for a server in the guest.
	cmdline string
	netOpts []string
	// prepareDisk runs on each disk's backing file before QEMU starts.
	prepareDisk func(path string)
	// netns runs QEMU (with its guestfwd relays and hostfwd listeners)
	// inside that network namespace; "" = the host's.
	netns string
}

// nicROM leaves the NIC's iPXE option ROM out of direct kernel boots:
// SeaBIOS boots the -kernel image without it, and initialising it costs
// about 0.35 s of TCG time that says nothing about our image. PXE boots
// need it.
func nicROM(boot vmBoot) string {
	if boot.pxe {
		return ""
	}
	return ",romfile="
}

// startVM boots the image with two NVMe disks and a virtio NIC on a
// restricted slirp network whose only way out is the guestfwd to the
// controller.
func startVM(tb testing.TB, boot vmBoot, mac, controllerAddr string, disks []string) *vm {
	tb.Helper()
	dir := tb.TempDir()
	self, err := os.Executable()
	if err != nil {
		tb.Fatal(err)
	}
	if strings.ContainsAny(self, " ,") {
		tb.Skipf("test binary path %q cannot be used in a QEMU option", self)
	}
	args := []string{"-accel", "tcg", "-m", "512", "-smp", "1", "-nographic", "-no-reboot", "-monitor", "none"}
	netdev := "user,id=n0,restrict=on,guestfwd=tcp:" + guestAPI + "-cmd:" + self
	for _, o := range boot.netOpts {
		netdev += "," + o
	}
	if !boot.pxe {
		kargs := "anvil.api=http://" + guestAPI
		if boot.cmdline != "" {
			kargs = boot.cmdline
		}
		args = append(args, "-kernel", boot.kernel, "-initrd", boot.initrd,
			"-append", "console=ttyS0 panic=-1 "+kargs+strings.Join(append([]string{""}, boot.extraArgs...), " "))
	} else {
		tftp := filepath.Join(dir, "tftp")
		script := "#!ipxe\nchain http://" + guestAPI + "/v1/boot/" + boot.pxeNode + "/ipxe\n"
		if err := os.MkdirAll(tftp, 0o755); err != nil {
			tb.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tftp, "boot.ipxe"), []byte(script), 0o644); err != nil {
			tb.Fatal(err)
		}
		args = append(args, "-boot", "n")
		netdev += ",tftp=" + tftp + ",bootfile=boot.ipxe"
	}
	args = append(args,
		"-netdev", netdev,
		"-device", "virtio-net-pci,netdev=n0,mac="+mac+nicROM(boot),
		"-device", "virtio-rng-pci",
		"-serial", "file:"+filepath.Join(dir, "serial.log"),
	)
	var files []string
	var qd []vbmc.QEMUDisk
	for i, d := range disks {
		f := filepath.Join(dir, fmt.Sprintf("nvme%d.raw", i+1))
		files = append(files, f)
		if err := os.WriteFile(f, nil, 0o644); err != nil {
			tb.Fatal(err)
		}
		if err := os.Truncate(f, 64<<20); err != nil {
			tb.Fatal(err)
		}
		qd = append(qd, vbmc.QEMUDisk{Path: f, Serial: d})
	}
	diskArgs, err := vbmc.DiskArgs(qd, false)
	if err != nil {
		tb.Fatal(err)
	}
	args = append(args, diskArgs...)
	for _, f := range files {
		if boot.prepareDisk != nil {
			boot.prepareDisk(f)
		}
	}
	v := &vm{serial: filepath.Join(dir, "serial.log"), exited: make(chan struct{}), disks: files}
	v.cmd = exec.Command("qemu-system-x86_64", args...)
	if boot.netns != "" {
		// ip netns exec execs QEMU: the pid stays QEMU's.
		v.cmd = exec.Command("ip", append([]string{"netns", "exec", boot.netns, "qemu-system-x86_64"}, args...)...)
	}
	v.cmd.Env = append(os.Environ(), guestfwdEnv+"="+controllerAddr)
	var qout bytes.Buffer
	v.cmd.Stdout, v.cmd.Stderr = &qout, &qout
	v.started = time.Now()
	if err := v.cmd.Start(); err != nil {
		tb.Fatalf("start qemu: %v", err)
	}
	go func() { _ = v.cmd.Wait(); close(v.exited) }()
	tb.Cleanup(func() {
		v.stop()
		if tb.Failed() {
			s, _ := os.ReadFile(v.serial)
			tb.Logf("qemu output:\n%s\nserial console:\n%s", qout.String(), s)
		}
	})
	return v
}

// inspection is what one boot into inspection measured.
type inspection struct {
	firstHeartbeat time.Duration // QEMU start -> agent_last_heartbeat (controller clock)
	// cpuAtHeartbeat is the CPU time QEMU had used when the heartbeat was
	// seen: close to the wall time on an idle host, and unlike wall time
	// not stretched when other work shares the cores.
	cpuAtHeartbeat time.Duration
	seenHeartbeat  time.Duration // QEMU start -> the poll that first saw it
	bootTimings    []any         // driver_internal_info.agent_boot_timings
	node           map[string]any
	vm             *vm
}

// stop kills QEMU now (cleanup would do it at the end of the test).
func (v *vm) stop() {
	_ = v.cmd.Process.Kill()
	<-v.exited
}

// startInspection enrols a fake-hardware node with a port for mac and
// moves it into inspection; the test boots the VM (fake-hardware's power
// actions are no-ops).
func (c *controller) startInspection(tb testing.TB, name, mac string) string {
	tb.Helper()
	node := c.mustCall(tb, "POST", "/v1/nodes", map[string]any{
		"driver": "fake-hardware", "name": name, "deploy_interface": "direct", "inspect_interface": "agent",
	})
	uuid, _ := node["uuid"].(string)
	c.mustCall(tb, "POST", "/v1/ports", map[string]any{"address": mac, "node_uuid": uuid})
	c.mustCall(tb, "PUT", "/v1/nodes/"+name+"/states/provision", map[string]any{"target": "manage"})
	c.waitState(tb, name, "manageable", time.Minute)
	c.mustCall(tb, "PUT", "/v1/nodes/"+name+"/states/provision", map[string]any{"target": "inspect"})
	return uuid
}

// inspectWithVM enrols a node for mac, starts inspection, boots the VM and
// waits for the controller to finish inspection (or, if untilHeartbeat, for
// the first heartbeat only).
func inspectWithVM(tb testing.TB, c *controller, boot vmBoot, name, mac string, disks []string, untilHeartbeat bool) inspection {
	tb.Helper()
	uuid := c.startInspection(tb, name, mac)

	// fake-hardware's power actions are no-ops: the test is the power.
	boot.pxeNode = uuid
	v := startVM(tb, boot, mac, "127.0.0.1:"+c.port, disks)
	res := inspection{vm: v}
	deadline := v.started.Add(4 * time.Minute)
	left := false // left manageable (inspection started)
	for {
		_, n := c.call(tb, "GET", "/v1/nodes/"+name, nil)
		state, _ := n["provision_state"].(string)
		dii, _ := n["driver_internal_info"].(map[string]any)
		if res.seenHeartbeat == 0 && dii["agent_last_heartbeat"] != nil {
			res.seenHeartbeat = time.Since(v.started)
			res.cpuAtHeartbeat = processCPU(v.cmd.Process.Pid)
			if ts, err := time.Parse(time.RFC3339Nano, fmt.Sprint(dii["agent_last_heartbeat"])); err == nil {
				res.firstHeartbeat = ts.Sub(v.started)
			}
			tb.Logf("first heartbeat %v after QEMU start (seen by polling after %v)", res.firstHeartbeat.Round(time.Millisecond), res.seenHeartbeat.Round(time.Millisecond))
		}
		if bt, ok := dii["agent_boot_timings"].([]any); ok && res.bootTimings == nil {
			res.bootTimings = bt
		}
		if state != "manageable" {
			left = true
		}
		switch {
		case untilHeartbeat && res.seenHeartbeat > 0:
			res.node = n
			return res
		case left && state == "manageable":
			res.node = n
			tb.Logf("inspection finished %v after QEMU start", time.Since(v.started).Round(time.Millisecond))
			return res
		case strings.HasSuffix(state, "failed"):
			tb.Fatalf("node %s: provision_state %q, last_error %v", name, state, n["last_error"])
		case time.Now().After(deadline):
			tb.Fatalf("node %s: provision_state %q after %v, want manageable after inspection", name, state, time.Since(v.started))
		}
		select {
		case <-v.exited:
			tb.Fatalf("QEMU exited during inspection (state %q)", state)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestVMInspection boots the agent ramdisk in QEMU against a real
// controller and checks the inventory it reports.
func TestVMInspection(t *testing.T) {
	kernel, initrd := vmDirect(t)
	c := startController(t)
	serials := []string{"ANVIL-NVME-0001", "ANVIL-NVME-0002"}
	res := inspectWithVM(t, c, vmBoot{kernel: kernel, initrd: initrd}, "vm-node", "52:54:00:a1:00:01", serials, false)

	if res.seenHeartbeat == 0 {
		t.Errorf("driver_internal_info.agent_last_heartbeat never appeared")
	}
	t.Logf("QEMU start -> first heartbeat: %v", res.firstHeartbeat.Round(time.Millisecond))

	// Inventory: both NVMe disks with size and serial.
	_, inv := c.call(t, "GET", "/v1/nodes/vm-node/inventory", nil)
	inventory, _ := inv["inventory"].(map[string]any)
	disks, _ := inventory["disks"].([]any)
	found := map[string]map[string]any{}
	for _, d := range disks {
		dm, _ := d.(map[string]any)
		if s, _ := dm["serial"].(string); s != "" {
			found[s] = dm
		}
	}
	for _, s := range serials {
		d, ok := found[s]
		if !ok {
			b, _ := json.MarshalIndent(disks, "", "  ")
			t.Errorf("inventory has no disk with serial %q; disks:\n%s", s, b)
			continue
		}
		if size, _ := d["size"].(float64); size != 64<<20 {
			t.Errorf("disk %v (serial %s): size %v, want %d", d["name"], s, d["size"], 64<<20)
		}
		t.Logf("disk %v serial %s size %v model %v", d["name"], s, d["size"], d["model"])
	}

	// Boot timings: recorded in driver_internal_info at the first heartbeat.
	if len(res.bootTimings) == 0 {
		t.Errorf("driver_internal_info.agent_boot_timings never appeared")
	} else {
		b, _ := json.Marshal(res.bootTimings)
		t.Logf("agent boot timings: %s", b)
	}
	// History: the agent's lookup is recorded.
	_, h := c.call(t, "GET", "/v1/nodes/vm-node/history", nil)
	events, _ := h["history"].([]any)
	var lines []string
	looked := false
	for _, e := range events {
		em, _ := e.(map[string]any)
		ev := fmt.Sprint(em["event"])
		lines = append(lines, fmt.Sprintf("%v %v %s", em["severity"], em["event_type"], ev))
		if strings.Contains(ev, "looked up") {
			looked = true
		}
	}
	if !looked {
		t.Errorf("history has no agent lookup event:\n%s", strings.Join(lines, "\n"))
	} else {
		t.Logf("history:\n%s", strings.Join(lines, "\n"))
	}
}

// BenchmarkVMBootToHeartbeat boots the ramdisk three times (one node each)
// per kernel form and reports the median QEMU start -> first heartbeat:
// the PVH kernel (QEMU's direct boot of the uncompressed ELF, what the VM
// tests use) against the budget, and the bzImage beside it.
func BenchmarkVMBootToHeartbeat(b *testing.B) {
	bzImage, initrd := vmImage(b)
	pvh, _ := vmDirect(b)
	c := startController(b)
	kernels := []struct{ name, path string }{{"pvh", pvh}, {"bzimage", bzImage}}
	if pvh == bzImage {
		b.Logf("the kernel has no PVH entry point: direct boot uses the bzImage")
		kernels = kernels[1:]
	}
	for i := 0; i < b.N; i++ {
		for ki, k := range kernels {
			var runs, cpus []time.Duration
			for j := 0; j < 3; j++ {
				name := fmt.Sprintf("bench-%s-%d-%d", k.name, i, j)
				mac := fmt.Sprintf("52:54:00:b%d:%02x:%02x", ki, i, j)
				res := inspectWithVM(b, c, vmBoot{kernel: k.path, initrd: initrd}, name, mac, []string{"ANVIL-NVME-0001", "ANVIL-NVME-0002"}, true)
				res.vm.stop()
				runs = append(runs, res.firstHeartbeat)
				cpus = append(cpus, res.cpuAtHeartbeat)
				b.Logf("boot %s: first heartbeat %v (QEMU CPU time %v); guest timings %s", name, res.firstHeartbeat.Round(time.Millisecond),
					res.cpuAtHeartbeat, toJSON(res.bootTimings))
			}
			sort.Slice(runs, func(i, j int) bool { return runs[i] < runs[j] })
			sort.Slice(cpus, func(i, j int) bool { return cpus[i] < cpus[j] })
			median := runs[len(runs)/2]
			prefix := "" // the first kernel's metrics are the budget's
			if ki > 0 {
				prefix = k.name + "-"
			}
			b.ReportMetric(median.Seconds(), prefix+"s-to-heartbeat(median)")
			b.ReportMetric(cpus[len(cpus)/2].Seconds(), prefix+"qemu-cpu-s-to-heartbeat(median)")
			// TCG timings scale with how busy the host is: say so next to them.
			load, _ := os.ReadFile("/proc/loadavg")
			b.Logf("%s: QEMU start -> first heartbeat: %v; median %v (budget %v); host load average %s", k.name, runs, median.Round(time.Millisecond),
				bootBudget, strings.TrimSpace(string(load)))
		}
	}
}

// processCPU is the user+system CPU time of a process (0 if unknown).
func processCPU(pid int) time.Duration {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0
	}
	// Fields after the parenthesised command name; utime and stime are
	// fields 14 and 15, in clock ticks (100 per second on Linux).
	s := string(raw)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	var ut, st int64
	fmt.Sscan(f[11], &ut)
	fmt.Sscan(f[12], &st)
	return time.Duration(ut+st) * time.Second / 100
}

// bootBudget is #14's budget for QEMU TCG direct boot -> first heartbeat
// (median of 3) with the default image.
const bootBudget = 8 * time.Second

// TestVMMdadm boots the base image with a script in place of the agent:
// the md modules load from modules-load.d and the packaged mdadm (dynamic,
// with its own libc and libudev) builds a RAID1 over the two NVMe disks.
// The same boot checks the CA bundle: a static Go program, built like the
// agent, loads the system roots as the agent's HTTPS client does.
func TestVMMdadm(t *testing.T) {
	cfg, m := buildVMImage(t)
	if m.Mdadm == nil {
		t.Skip("image built without mdadm")
	}
	dir := t.TempDir()
	ov := NewArchive()
	caCheck := ""
	if m.CACerts != nil {
		bin := buildCACheck(t, dir)
		if err := ov.AddFile("bin/cacheck", bin, 0o755); err != nil {
			t.Fatal(err)
		}
		caCheck = "/bin/cacheck\n"
	}
	addKmodTools(t, ov, cfg)
	script := `#!/bbin/gosh
/bin/coldplug
echo MDTEST-START
mdadm --version
mdadm --create /dev/md0 --level=1 --raid-devices=2 --metadata=1.2 --run --assume-clean /dev/nvme0n1 /dev/nvme1n1
echo MDTEST-RC=$?
cat /proc/mdstat
lsmod
` + caCheck + `echo MDTEST-END
shutdown halt
`
	ov.AddBytes(AgentPath, []byte(script), 0o755)
	overlay := filepath.Join(dir, "script.cpio.gz")
	if _, err := ov.WriteGzipFile(overlay); err != nil {
		t.Fatal(err)
	}
	initrd := filepath.Join(dir, "initramfs.cpio.gz")
	if err := Concat(initrd, filepath.Join(cfg.CacheDir, m.Base.Path), overlay); err != nil {
		t.Fatal(err)
	}
	// No controller: the guestfwd relay is never used.
	v := startVM(t, vmBoot{kernel: filepath.Join(cfg.OutDir, "vmlinuz"), initrd: initrd}, "52:54:00:a1:00:02", "127.0.0.1:9", []string{"ANVIL-MD-0001", "ANVIL-MD-0002"})
	select {
	case <-v.exited:
	case <-time.After(2 * time.Minute):
		t.Fatal("VM did not power off within 2 minutes")
	}
	raw, _ := os.ReadFile(v.serial)
	log := string(raw)
	start := strings.Index(log, "MDTEST-START")
	end := strings.Index(log, "MDTEST-END")
	if start < 0 || end < start {
		t.Fatalf("script did not run to the end; serial:\n%s", log)
	}
	out := log[start:end]
	t.Logf("guest:\n%s", out)
	for _, want := range []string{"mdadm - v", "MDTEST-RC=0", "md0 : active raid1", "[UU]", "raid1", "md_mod"} {
		if !strings.Contains(out, want) {
			t.Errorf("guest output has no %q", want)
		}
	}
	if m.CACerts != nil {
		var roots int
		if i := strings.Index(out, "CATEST roots="); i < 0 {
			t.Errorf("guest output has no CATEST line (x509.SystemCertPool failed?)")
		} else if _, err := fmt.Sscanf(out[i:], "CATEST roots=%d", &roots); err != nil || roots != m.CACerts.Certificates {
			t.Errorf("guest's system cert pool has %d roots (%v), want the bundle's %d", roots, err, m.CACerts.Certificates)
		}
	}
}

// buildCACheck builds a static program that prints how many roots Go's
// x509.SystemCertPool finds: in the guest that is the bundle, read the way
// the agent's HTTPS client reads it.
func buildCACheck(t *testing.T, dir string) string {
	t.Helper()
	src := filepath.Join(dir, "cacheck.go")
	prog := `package main

import (
	"crypto/x509"
	"fmt"
	"os"
)

func main() {
	pool, err := x509.SystemCertPool()
	if err != nil {
		fmt.Println("CATEST error:", err)
		os.Exit(1)
	}
	fmt.Printf("CATEST roots=%d\n", len(pool.Subjects()))
}
`
	if err := os.WriteFile(src, []byte(prog), 0o644); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "cacheck")
	build := exec.Command("go", "build", "-trimpath", "-ldflags", "-s -w", "-o", bin, src)
	build.Dir = dir // outside the module: a standard-library-only program
	build.Env = append(os.Environ(), "CGO_ENABLED=0", "GOAMD64=v1", "GOFLAGS=")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", src, err, out)
	}
	return bin
}

// TestVMPXEInspection network-boots the agent: QEMU's iPXE takes its
// script from slirp's TFTP, chains to the controller's per-node iPXE script,
// downloads the kernel and initramfs over HTTP from --boot-dir, and the
// agent then inspects the node as in TestVMInspection.
func TestVMPXEInspection(t *testing.T) {
	kernel, _ := vmImage(t)
	c := startController(t, "--boot-dir", filepath.Dir(kernel), "--public-url", "http://"+guestAPI)
	serials := []string{"ANVIL-NVME-0003", "ANVIL-NVME-0004"}
	res := inspectWithVM(t, c, vmBoot{pxe: true}, "pxe-node", "52:54:00:a1:00:03", serials, false)
	t.Logf("PXE: QEMU start -> first heartbeat: %v", res.firstHeartbeat.Round(time.Millisecond))
	_, inv := c.call(t, "GET", "/v1/nodes/pxe-node/inventory", nil)
	b, _ := json.Marshal(inv)
	for _, s := range serials {
		if !strings.Contains(string(b), s) {
			t.Errorf("inventory lacks disk %s: %s", s, b)
		}
	}
}
