//go:build vm

package image

import (
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestVMNetbootTimelineTFTPMissing (issue #36): an OVMF node whose DHCP is
// answered (the controller's full-mode DHCP offers snponly.efi) but whose
// boot file is missing from the controller's --boot-dir. Its agent never
// calls back; the timeout's last_error says where the boot stopped (the
// failed TFTP request, not only "timeout"), and its boot timeline lists
// the DHCP exchange and the failed TFTP request.
func TestVMNetbootTimelineTFTPMissing(t *testing.T) {
	// No image of ours is booted: the controller serves an empty boot
	// directory, so snponly.efi is missing.
	if !inNamespace(t, "TestVMNetbootTimelineTFTPMissing", func() string { return "unused" }) {
		return
	}
	emptyDir := t.TempDir()
	provisioningBridge(t, 1)
	c := startControllerOn(t, bridgeIP.String()+":0", "--allow-insecure-noauth", "--boot-dir", emptyDir,
		"--boot-dhcp", "full", "--boot-interface", "br0", "--boot-dhcp-range", "10.88.0.100-10.88.0.150",
		"--agent-boot-timeout", "50s", "--timeout-check-interval", "2s")
	n := &netbootNode{name: "nb-missing", mac: "52:54:00:88:05:01", firmware: "uefi"}
	enrolNode(t, c, n.name, n.mac)
	start := time.Now()
	c.mustCall(t, "PUT", "/v1/nodes/"+n.name+"/states/provision", map[string]any{"target": "provide"})
	c.waitState(t, n.name, "clean wait", time.Minute)
	n.start(t, "tap0")
	failed := waitFor(t, c, n.name, 3*time.Minute, func(m map[string]any) bool { return m["provision_state"] == "clean failed" })
	n.stop()
	msg, _ := failed["last_error"].(string)
	t.Logf("[%6.1fs] clean failed: %s", time.Since(start).Seconds(), msg)
	if !strings.HasPrefix(msg, "Timeout in clean wait: the agent ramdisk never called back within 50s") {
		t.Errorf("last_error does not start with the timeout: %q", msg)
	}
	where := regexp.MustCompile(`Where the boot stopped: TFTP of snponly\.efi to 10\.88\.0\.\d+ failed at \d\d:\d\d:\d\d UTC: file not found`)
	if !where.MatchString(msg) {
		t.Errorf("last_error does not name the failed TFTP request as the last stage reached: %q", msg)
	}

	_, tl := c.call(t, "GET", "/v1/nodes/"+n.name+"/boot-timeline?limit=1", nil)
	boots, _ := tl["boots"].([]any)
	if len(boots) != 1 {
		t.Fatalf("boot timeline: %v", tl)
	}
	var lines []string
	for _, s := range boots[0].(map[string]any)["stages"].([]any) {
		m := s.(map[string]any)
		lines = append(lines, fmt.Sprintf("%s %s | %s | %s", m["at"], m["stage"], m["outcome"], m["detail"]))
	}
	text := strings.Join(lines, "\n")
	t.Logf("boot timeline:\n%s", text)
	for _, want := range []*regexp.Regexp{
		regexp.MustCompile(`(?m) boot \|  \| into the agent ramdisk for cleaning`),
		regexp.MustCompile(`(?m) dhcp \| ok \| offered snponly\.efi to 52:54:00:88:05:01 \(UEFI PXE, arch EFI x86-64; OFFER of 10\.88\.0\.\d+\)$`),
		regexp.MustCompile(`(?m) dhcp \| ok \| offered snponly\.efi to 52:54:00:88:05:01 \(UEFI PXE, arch EFI x86-64; ACK of 10\.88\.0\.\d+\)$`),
		regexp.MustCompile(`(?m) tftp \| not found \| snponly\.efi to 10\.88\.0\.\d+$`),
		regexp.MustCompile(`(?m) timeout \| timed out \| clean wait$`),
	} {
		if !want.MatchString(text) {
			t.Errorf("the boot timeline has no line matching %s", want)
		}
	}
}
