package agent

import (
	"crypto/rand"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/protocol"
)

// NewBootID returns a random (version 4) UUID. In the ramdisk every process
// start is a boot, so the controller can tell a rebooted agent (and a
// reboot-requested step finishing) from one that went quiet.
func NewBootID() string {
	var b [16]byte
	// crypto/rand.Read never fails (it crashes the program instead).
	_, _ = rand.Read(b[:])
	b[6] = b[6]&0x0f | 0x40
	b[8] = b[8]&0x3f | 0x80
	return fmt.Sprintf("%x-%x-%x-%x-%x", b[0:4], b[4:6], b[6:8], b[8:10], b[10:16])
}

// ReadUptime reads the system uptime from a /proc/uptime-style file
// ("2689.02 4238.07").
func ReadUptime(path string) (time.Duration, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return 0, fmt.Errorf("read uptime: %w", err)
	}
	fields := strings.Fields(string(raw))
	if len(fields) == 0 {
		return 0, fmt.Errorf("read uptime: %s is empty", path)
	}
	secs, err := strconv.ParseFloat(fields[0], 64)
	if err != nil || secs < 0 {
		return 0, fmt.Errorf("read uptime: %s: bad value %q", path, fields[0])
	}
	return time.Duration(secs * float64(time.Second)), nil
}

// bootTimer records boot milestones as seconds since the kernel started:
// the kernel's uptime when the agent started plus the agent's own elapsed
// time. Only the loop goroutine uses it.
type bootTimer struct {
	start  time.Time
	kernel time.Duration
	marks  []protocol.BootPhase
	// delivered is set once a heartbeat carrying the timings got through;
	// until then every heartbeat carries them.
	delivered bool
}

func newBootTimer(start time.Time, kernel time.Duration) *bootTimer {
	t := &bootTimer{start: start, kernel: kernel}
	t.marks = append(t.marks, protocol.BootPhase{Phase: "kernel", Seconds: kernel.Seconds()})
	return t
}

// mark records phase at now, once: later marks of the same phase (the
// lookup after a token change) do not move the boot milestone.
func (t *bootTimer) mark(now time.Time, phase string) {
	for _, m := range t.marks {
		if m.Phase == phase {
			return
		}
	}
	t.marks = append(t.marks, protocol.BootPhase{Phase: phase, Seconds: (t.kernel + now.Sub(t.start)).Seconds()})
}

func (t *bootTimer) phases() []protocol.BootPhase {
	return append([]protocol.BootPhase(nil), t.marks...)
}
