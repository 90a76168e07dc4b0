//go:build vm

package image

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/agent/ipa/ipatest"
)

// ironicPriorities are Ironic's own step priority overrides, as a site
// would set them: the IPA-era knob turns erase_devices off, the generic
// one moves erase_devices_metadata. Both act on the step list the agent
// returns, so the agent must name and prioritise its steps as IPA does.
const ironicPriorities = `
[deploy]
erase_devices_priority = 0
[conductor]
clean_step_priority_override = deploy.erase_devices_metadata:98
`

// TestVMStockIronic boots the real ramdisk in QEMU (TCG) with a stock
// Ironic's kernel arguments and lets Debian's Ironic 21.4 (ipatest: noauth,
// SQLite, fake-hardware with the direct deploy interface) drive it through
// Ironic's own baremetal CLI. The guest reaches Ironic through the
// guestfwd cmd: relay (10.0.2.100:6385); Ironic calls the agent back at
// the callback_url it advertises (ipa-advertise-host/port), a slirp
// hostfwd to the guest's port 9999.
//
// Ironic's conductor sends a HEAD of its own to the image URL it hands
// the agent, so that URL must reach one server from Ironic and from the
// guest. Ironic, QEMU and the image server therefore run in a network
// namespace the test makes, where 10.0.2.100 (the guest's guestfwd
// address) is a local address too; the namespace has no route elsewhere,
// so nothing any of them sends leaves it.
//
// One boot: automated cleaning (provide) with Ironic's priority overrides;
// a manual clean, for which the agent must notice that Ironic dropped its
// token and look itself up again; a deploy whose image fails its SHA-256
// (deploy failed, our words in last_error); the same deploy again with
// the right SHA-256, after which the agent powers the VM off. The host
// reads the VM's disks after each step.
func TestVMStockIronic(t *testing.T) {
	if why := ipatest.Available(); why != "" {
		t.Skip(why)
	}
	if os.Geteuid() != 0 {
		t.Skip("needs root for its network namespace (CI runs as root)")
	}
	kernel, initrd := vmDirect(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	guestHost, _, _ := net.SplitHostPort(guestAPI)
	ns := ipatest.NewNetns(t, guestHost+"/32")
	ir := ipatest.Start(t, ipatest.Options{AgentURL: "http://" + guestAPI, Extra: ironicPriorities, Netns: ns})
	img := newImageServer(t, ns, 5<<20+512)
	const mac = "52:54:00:1b:0c:02"
	ir.MustBaremetal(ctx, "node", "create", "--driver", "fake-hardware", "--name", "vm-node",
		"--deploy-interface", "direct", "--boot-interface", "fake", "--power-interface", "fake",
		"--management-interface", "noop")
	uuid := ir.Field(ctx, "vm-node", "uuid")
	ir.MustBaremetal(ctx, "port", "create", mac, "--node", uuid)
	ir.MustBaremetal(ctx, "node", "manage", "vm-node", "--wait", "60")

	const size = 64 << 20
	agentPort := ipatest.FreePort(t)
	cmdline := fmt.Sprintf("ipa-api-url=http://%s ipa-advertise-host=127.0.0.1 ipa-advertise-port=%d ipa-global-request-id=req-anvil-vm BOOTIF=01-%s",
		guestAPI, agentPort, strings.ReplaceAll(mac, ":", "-"))
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	v := startVM(t, vmBoot{kernel: kernel, initrd: initrd, cmdline: cmdline, netns: ns.Name,
		netOpts: []string{fmt.Sprintf("hostfwd=tcp:127.0.0.1:%d-:%d", agentPort, 9999),
			"guestfwd=tcp:" + ipaImageHost + "-cmd:" + self + " " + relayFlag + ipaImageHost},
		prepareDisk: func(path string) { writePattern(t, path, size) },
	}, mac, strings.TrimPrefix(ir.URL, "http://"), []string{"ANVIL-IPA-0001", "ANVIL-IPA-0002"})

	wait := func(what string, args ...string) {
		t.Helper()
		start := time.Now()
		if _, err := ir.Baremetal(ctx, args...); err != nil {
			s, _ := os.ReadFile(v.serial)
			t.Fatalf("%s: %v\nlast_error: %s\nserial console:\n%s\nironic log:\n%s", what, err,
				ir.Field(ctx, "vm-node", "last_error"), tailBytes(s, 6000), ir.LogTail(4000))
		}
		t.Logf("%s: %s", what, time.Since(start).Round(time.Millisecond))
	}
	disks := func() [][]byte {
		t.Helper()
		var out [][]byte
		for _, f := range v.disks {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, b)
		}
		return out
	}

	// 1. provide: Ironic boots the agent (fake power: it is already
	// booting), which looks the node up, heartbeats, and is asked for its
	// clean steps; with the overrides only erase_devices_metadata runs,
	// at priority 98.
	wait("automated cleaning (provide, while the VM boots)", "node", "provide", "vm-node", "--wait", "600")
	t.Logf("QEMU start to available: %s", time.Since(v.started).Round(time.Millisecond))
	if got := ir.Field(ctx, "vm-node", "provision_state"); got != "available" {
		t.Fatalf("provision_state %q after provide, want available", got)
	}
	for i, d := range disks() {
		if bytes.Contains(d, []byte("EFI PART")) {
			t.Errorf("disk %d: a GPT header survived erase_devices_metadata", i)
		}
		if d[size/2] != 0x5a {
			t.Errorf("disk %d: the middle was erased: erase_devices ran although [deploy]erase_devices_priority = 0", i)
		}
	}
	log := ir.LogTail(1 << 30)
	executed := regexp.MustCompile(`Executing (\{.*?\}) on node`).FindAllStringSubmatch(log, -1)
	if len(executed) != 1 {
		t.Errorf("Ironic executed %d clean steps, want erase_devices_metadata alone: %v", len(executed), executed)
	}
	for _, e := range executed {
		if !strings.Contains(e[1], "'step': 'erase_devices_metadata'") || !strings.Contains(e[1], "'priority': 98") {
			t.Errorf("Ironic executed %s, want erase_devices_metadata at the overridden priority 98", e[1])
		}
	}

	// 2. manual cleaning from manageable, in the same boot: Ironic wiped
	// the token when cleaning ended, so the agent has to look itself up
	// again to get a new one. The disks get fresh GPT signatures first.
	ir.MustBaremetal(ctx, "node", "manage", "vm-node", "--wait", "60")
	for _, f := range v.disks {
		writeAt(t, f, 512, []byte("EFI PART"))
	}
	wait("manual cleaning (erase_devices_metadata) after a re-lookup", "node", "clean", "vm-node", "--wait", "600",
		"--clean-steps", `[{"interface": "deploy", "step": "erase_devices_metadata"}]`)
	if got := ir.Field(ctx, "vm-node", "provision_state"); got != "manageable" {
		t.Fatalf("provision_state %q after manual cleaning, want manageable", got)
	}
	for i, d := range disks() {
		if bytes.Contains(d[:1<<20], []byte("EFI PART")) {
			t.Errorf("disk %d: manual erase_devices_metadata left the GPT header", i)
		}
	}

	// 3. a deploy whose image fails its SHA-256, then 4. the same deploy
	// with the right one, in the same boot: the agent stays up after a
	// failed deploy (Ironic's fake power cannot switch it off) and looks
	// itself up again for the next. Without automated cleaning, provide
	// needs no agent. The image goes to the disk the root device hint
	// names.
	bad := sha256.Sum256([]byte("not the image"))
	setImage := func(sum string, more ...string) {
		ir.MustBaremetal(ctx, append([]string{"node", "set", "vm-node", "--instance-info", "image_source=" + img.url,
			"--instance-info", "image_os_hash_algo=sha256", "--instance-info", "image_os_hash_value=" + sum}, more...)...)
	}
	setImage(hex.EncodeToString(bad[:]), "--no-automated-clean", "--property", `root_device={"serial": "ANVIL-IPA-0001"}`)
	ir.MustBaremetal(ctx, "node", "provide", "vm-node", "--wait", "60")
	start := time.Now()
	if _, err := ir.Baremetal(ctx, "node", "deploy", "vm-node", "--wait", "600"); err == nil {
		t.Fatalf("a deploy with a wrong SHA-256 succeeded")
	}
	t.Logf("deploy with a wrong SHA-256, until it failed: %s", time.Since(start).Round(time.Millisecond))
	st := ir.Fields(ctx, "vm-node", "provision_state", "last_error")
	lastErr := st["last_error"]
	if st["provision_state"] != "deploy failed" {
		t.Fatalf("provision_state %q after a wrong checksum, want deploy failed\nlast_error: %s\nironic log:\n%s",
			st["provision_state"], lastErr, ir.LogTail(4000))
	}
	t.Logf("last_error after the wrong SHA-256: %s", lastErr)
	for _, want := range []string{"Deploy step deploy.write_image failed",
		"checksum mismatch: image is sha256:" + img.sha256 + ", expected sha256:" + hex.EncodeToString(bad[:])} {
		if !strings.Contains(lastErr, want) {
			t.Errorf("last_error lacks %q", want)
		}
	}

	// The sum is known only once the image is written (IPA too checks it
	// while writing): the host finds what last_error says, the image's
	// first MiB zeroed so the disk cannot boot it, the rest written.
	// Zero it all, so that only the next deploy can put the image there.
	head := disks()[0][:len(img.data)]
	if !bytes.Equal(head[:1<<20], make([]byte, 1<<20)) {
		t.Errorf("after the failed write the first MiB of disk 1 is not zeroed")
	}
	if !bytes.Equal(head[1<<20:], img.data[1<<20:]) {
		t.Errorf("after the failed write disk 1 does not hold the rest of the image: did the agent write to another disk?")
	}
	for _, f := range v.disks {
		writeAt(t, f, 0, make([]byte, len(img.data)))
	}
	setImage(img.sha256)
	wait("deploy with the right SHA-256, from deploy failed", "node", "deploy", "vm-node", "--wait", "600")
	deployed := time.Now()
	if got := ir.Field(ctx, "vm-node", "provision_state"); got != "active" {
		t.Fatalf("provision_state %q after deploy, want active", got)
	}
	// Ironic's last words to the agent are standby.power_off: the VM
	// switches itself off, and its disks are then all written.
	select {
	case <-v.exited:
		t.Logf("the VM was off %s after baremetal's deploy --wait returned", time.Since(deployed).Round(time.Millisecond))
	case <-time.After(2 * time.Minute):
		t.Fatalf("the VM still runs 2 minutes after the deploy ended: standby.power_off did not switch it off")
	}
	d := disks()
	if !bytes.Equal(d[0][:len(img.data)], img.data) {
		t.Errorf("disk 1 (serial ANVIL-IPA-0001, the root device hint) does not start with the image")
	}
	if !bytes.Equal(d[1][:len(img.data)], make([]byte, len(img.data))) {
		t.Errorf("disk 2 was written although the root device hint names disk 1")
	}
	reqs := img.requests()
	t.Logf("image server requests: %s", strings.Join(reqs, "; "))
	var ironicHead, agentGet bool
	for _, r := range reqs {
		ironicHead = ironicHead || strings.HasPrefix(r, "HEAD ") && strings.Contains(r, "python-requests")
		agentGet = agentGet || strings.HasPrefix(r, "GET ") && !strings.Contains(r, "python-requests")
	}
	if !ironicHead || !agentGet {
		t.Errorf("want a HEAD from Ironic's conductor and a GET from the agent at the same URL, got %v", reqs)
	}

	sent := ir.AgentCommands()
	t.Logf("commands Ironic sent: %s", ipatest.FormatCounts(sent))
	if sent["clean.get_clean_steps"] == 0 || sent["clean.execute_clean_step"] != 2 {
		t.Errorf("Ironic sent %v; want get_clean_steps and two execute_clean_step", sent)
	}
	for _, c := range []string{"deploy.get_deploy_steps", "deploy.execute_deploy_step", "standby.get_partition_uuids",
		"image.install_bootloader", "standby.power_off"} {
		if sent[c] == 0 {
			t.Errorf("Ironic never sent %s", c)
		}
	}
	serial, _ := os.ReadFile(v.serial)
	if n := bytes.Count(serial, []byte("ipa: lookup succeeded")); n < 3 {
		t.Errorf("the agent looked itself up %d times, want at least 3 (boot, then each time Ironic dropped the token)", n)
	}
	unknown := regexp.MustCompile(`ipa: unknown command.* command=(\S+)`).FindAllSubmatch(serial, -1)
	t.Logf("commands answered \"unknown command\": %d", len(unknown))
	for _, u := range unknown {
		t.Errorf("the agent answered \"unknown command\" to %s", u[1])
	}
}

// ipaImageHost is where the guest finds the image server, through a
// guestfwd relay; inside the test's namespace (which holds guestAPI's
// host) it is the server's own address, where Ironic finds it too.
const ipaImageHost = "10.0.2.100:8080"

// imageServer serves a random whole-disk image at ipaImageHost inside a
// namespace and records who asked for it.
type imageServer struct {
	url, sha256 string
	data        []byte
	mu          sync.Mutex
	reqs        []string
}

func newImageServer(t *testing.T, ns *ipatest.Netns, size int) *imageServer {
	t.Helper()
	s := &imageServer{url: "http://" + ipaImageHost + "/disk.raw", data: make([]byte, size)}
	_, _ = rand.Read(s.data)
	sum := sha256.Sum256(s.data)
	s.sha256 = hex.EncodeToString(sum[:])
	ln, err := ns.Listen("tcp", ipaImageHost)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.reqs = append(s.reqs, r.Method+" "+r.URL.Path+" ("+r.UserAgent()+")")
		s.mu.Unlock()
		if r.URL.Path != "/disk.raw" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Length", fmt.Sprint(len(s.data)))
		if r.Method != http.MethodHead {
			_, _ = w.Write(s.data)
		}
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return s
}

func (s *imageServer) requests() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.reqs...)
}

// writeAt writes b at off in the file at path.
func writeAt(t *testing.T, path string, off int64, b []byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteAt(b, off); err != nil {
		t.Fatal(err)
	}
}
