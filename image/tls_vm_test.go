//go:build vm

package image

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestVMAgentPinsTheControllerCertificate (#15): the ramdisk is told the
// controller's certificate fingerprint on its kernel command line. A
// second controller with a certificate of its own, at the address the
// agent was given and expecting the very same node, gets nothing from the
// agent: no lookup, no inventory, no steps. Once the address leads to the
// right controller (restarted there, its self-signed certificate reused),
// the agent looks up and inspection finishes. One TCG boot.
func TestVMAgentPinsTheControllerCertificate(t *testing.T) {
	kernel, initrd := vmDirect(t)
	right := startController(t, "--tls-self-signed")
	rogue := startController(t, "--tls-self-signed")
	fp := readFingerprint(t, right)
	if other := readFingerprint(t, rogue); other == fp {
		t.Fatalf("both controllers have certificate %s", fp)
	}
	const mac, name = "52:54:00:a1:15:01", "pinned"
	right.startInspection(t, name, mac)
	rogue.startInspection(t, name, mac)

	boot := vmBoot{kernel: kernel, initrd: initrd,
		extraArgs: []string{"anvil.api=https://" + guestAPI, "anvil.api_fingerprint=" + fp}}
	v := startVM(t, boot, mac, "127.0.0.1:"+rogue.port, []string{"ANVIL-TLS-0001"})

	// The agent reaches the rogue controller and refuses it, loudly.
	deadline := time.Now().Add(3 * time.Minute)
	for {
		s, _ := os.ReadFile(v.serial)
		if i := strings.Index(string(s), "REFUSING the server"); i >= 0 {
			line, _, _ := strings.Cut(string(s[i:]), "\n")
			t.Logf("after %v, on the console: %s", time.Since(v.started).Round(time.Millisecond), line)
			if !strings.Contains(line, fp) {
				t.Errorf("the refusal does not name the pinned fingerprint %s", fp)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no refusal on the console within 3 minutes")
		}
		select {
		case <-v.exited:
			t.Fatalf("QEMU exited")
		case <-time.After(200 * time.Millisecond):
		}
	}
	n := rogue.mustCall(t, "GET", "/v1/nodes/"+name, nil)
	dii, _ := n["driver_internal_info"].(map[string]any)
	if n["provision_state"] != "inspect wait" || dii["agent_last_heartbeat"] != nil || dii["agent_boot_id"] != nil {
		t.Errorf("the rogue controller's node moved: provision_state %v, driver_internal_info %v", n["provision_state"], dii)
	}
	if !strings.Contains(rogue.log(), "bad certificate") {
		t.Errorf("the rogue controller logged no refused handshake:\n%s", rogue.log())
	}

	// The right controller takes over the address the agent dials.
	port := rogue.port
	rogue.kill()
	right.kill()
	right.start(t, "127.0.0.1:"+port)
	if again := readFingerprint(t, right); again != fp {
		t.Fatalf("the restarted controller has certificate %s, want %s (reused)", again, fp)
	}
	switched := time.Now()
	right.waitState(t, name, "manageable", 3*time.Minute)
	t.Logf("inspection finished %v after the switch", time.Since(switched).Round(time.Millisecond))
	_, inv := right.call(t, "GET", "/v1/nodes/"+name+"/inventory", nil)
	if !strings.Contains(toJSON(inv), "ANVIL-TLS-0001") {
		t.Errorf("inventory lacks the VM's disk: %s", toJSON(inv))
	}
}

func readFingerprint(t *testing.T, c *controller) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(c.dir, "anvil-tls.fingerprint"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.TrimSpace(string(b))
}
