//go:build vm

package image

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"regexp"
	"strings"
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
// SQLite, fake-hardware with the direct deploy interface, on loopback)
// drive it through Ironic's own baremetal CLI. The guest reaches Ironic
// through the guestfwd cmd: relay (10.0.2.100:6385); Ironic calls the
// agent back at the callback_url it advertises (ipa-advertise-host/port),
// a slirp hostfwd on the host's loopback to the guest's port 9999.
//
// One boot: automated cleaning (provide) with Ironic's priority overrides,
// then a manual clean, for which the agent must notice that Ironic dropped
// its token and look itself up again. The host reads the VM's disks.
//
// Deploying is left to TestStockIronicDrivesTheAgent (cmd/anvil-agent):
// Ironic's conductor checks the image URL it hands the agent with a HEAD
// request of its own, and no URL reaches the same server from both the
// host's loopback and the guest without traffic leaving the machine.
func TestVMStockIronic(t *testing.T) {
	if why := ipatest.Available(); why != "" {
		t.Skip(why)
	}
	kernel, initrd := vmImage(t)
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()

	ir := ipatest.Start(t, ipatest.Options{AgentURL: "http://" + guestAPI, Extra: ironicPriorities})
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
	v := startVM(t, vmBoot{kernel: kernel, initrd: initrd, cmdline: cmdline,
		netOpts:     []string{fmt.Sprintf("hostfwd=tcp:127.0.0.1:%d-:%d", agentPort, 9999)},
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

	sent := ir.AgentCommands()
	t.Logf("commands Ironic sent: %s", ipatest.FormatCounts(sent))
	if sent["clean.get_clean_steps"] == 0 || sent["clean.execute_clean_step"] != 2 {
		t.Errorf("Ironic sent %v; want get_clean_steps and two execute_clean_step", sent)
	}
	serial, _ := os.ReadFile(v.serial)
	if n := bytes.Count(serial, []byte("ipa: lookup succeeded")); n < 2 {
		t.Errorf("the agent looked itself up %d times, want 2 (boot, then after Ironic dropped the token)", n)
	}
	if bytes.Contains(serial, []byte("ipa: unknown command")) {
		t.Errorf("the agent answered \"unknown command\":\n%s", tailBytes(serial, 4000))
	}
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
