package ipmisim

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
)

// TestLANConfigReported: with LAN set, the BMC answers Get LAN
// Configuration Parameters with that address and MAC (what the agent
// reads in band), and its LAN interface listens where Addr says.
func TestLANConfigReported(t *testing.T) {
	SkipIfMissing(t)
	sim := Start(t, Options{ChassisControl: "/bin/true", LAN: LANConfig{IP: "127.0.0.1", MAC: "52:54:00:bb:00:01"}})
	raw := func(param string) string {
		out, err := exec.Command("ipmitool", "-I", "lanplus", "-H", "127.0.0.1", "-p", strconv.Itoa(sim.Port), "-U", "admin", "-P", "password", "-C", "3",
			"raw", "0x0c", "0x02", "0x01", param, "0x00", "0x00").CombinedOutput()
		if err != nil {
			t.Fatalf("ipmitool: %v\n%s", err, out)
		}
		var lines []string
		for _, l := range strings.Split(string(out), "\n") {
			if !strings.Contains(l, "Cipher") && strings.TrimSpace(l) != "" {
				lines = append(lines, strings.TrimSpace(l))
			}
		}
		return strings.Join(lines, " ")
	}
	if got := raw("0x03"); got != "11 7f 00 00 01" {
		t.Errorf("IP address parameter: %q", got)
	}
	if got := raw("0x05"); got != "11 52 54 00 bb 00 01" {
		t.Errorf("MAC address parameter: %q", got)
	}
}
