package timeline

import (
	"fmt"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/controller/store"
)

// Explain says where boot b stopped: its last stage, when, and what was
// expected next ("DHCP offered snponly.efi to 52:54:00:12:34:56 at
// 12:01:03 UTC; the file was never fetched"). The last stage of the
// boot's chain is the one: what anyone on the LAN can cause (a refused
// lookup, a failed download: store.BootStage's Unauthenticated) is quoted
// only when the boot has nothing else, or, for a failed download, as what
// came right after the chain's last stage (a kernel missing from
// --boot-dir: the download the chain expected next). "" when b has no
// stage that says anything (a boot the timeline did not see).
func Explain(b store.Boot) string {
	if why := explain(b, false); why != "" {
		return why
	}
	return explain(b, true)
}

// explain is Explain over b's stages, the unauthenticated ones among them
// or not.
func explain(b store.Boot, unauthenticated bool) string {
	for i := len(b.Stages) - 1; i >= 0; i-- {
		s := b.Stages[i]
		if s.Stage == store.StageTimeout || (!unauthenticated && s.Unauthenticated()) {
			continue
		}
		if f := earlierFailure(b.Stages[:i], s); f != nil {
			// A firmware retrying: DHCP offered the file again after its
			// download failed; the failure is the news.
			return describe(*f) + "; DHCP offered it again at " + Clock(s.At)
		}
		if !unauthenticated && i+1 < len(b.Stages) {
			if next := b.Stages[i+1]; next.Stage == store.StageHTTP && next.Unauthenticated() {
				return describe(next)
			}
		}
		return describe(s)
	}
	return ""
}

// earlierFailure is, for a DHCP offer, the last failed download before it
// (nil: none, or s is not an offer).
func earlierFailure(before []store.BootStage, s store.BootStage) *store.BootStage {
	if s.Stage != store.StageDHCP || !strings.Contains(s.Detail, "offered ") {
		return nil
	}
	for i := len(before) - 1; i >= 0; i-- {
		f := before[i]
		if (f.Stage == store.StageTFTP || f.Stage == store.StageHTTP) && f.Outcome != "" && f.Outcome != store.OutcomeOK {
			return &f
		}
	}
	return nil
}

// Clock is how the timeline writes a stage's time in messages.
func Clock(t time.Time) string { return t.UTC().Format(time.TimeOnly) + " UTC" }

// ipxeBinaries are the loaders the boot service offers that fetch the
// iPXE script next.
var ipxeBinaries = []string{"snponly.efi", "ipxe.efi", "undionly.kpxe"}

func describe(s store.BootStage) string {
	at := Clock(s.At)
	ok := s.Outcome == "" || s.Outcome == store.OutcomeOK
	d := s.Detail
	switch s.Stage {
	case store.StageBoot:
		return fmt.Sprintf("the controller started the boot (%s) at %s; nothing of it was seen after that (did the BMC power the node?)", d, at)
	case store.StageBootDevice:
		if !ok {
			return fmt.Sprintf("setting the boot device (%s) failed at %s: %s", d, at, s.Outcome)
		}
		return fmt.Sprintf("the boot device was set (%s) at %s; the node was not powered on after that", d, at)
	case store.StagePower:
		if !ok {
			return fmt.Sprintf("the BMC's power action (%s) failed at %s: %s", d, at, s.Outcome)
		}
		return fmt.Sprintf("the BMC powered the node (%s) at %s; no DHCP request from its ports was answered after that (check the boot order, the port's MAC, the network)", d, at)
	case store.StageDHCP:
		if !ok {
			return fmt.Sprintf("DHCP %s at %s was not answered: %s", d, at, s.Outcome)
		}
		if strings.Contains(d, " offered ") || strings.HasPrefix(d, "offered ") {
			return fmt.Sprintf("DHCP %s at %s; the file was never fetched", d, at)
		}
		return fmt.Sprintf("DHCP %s at %s; nothing was fetched after that", d, at)
	case store.StageTFTP:
		if !ok {
			return fmt.Sprintf("TFTP of %s failed at %s%s", d, at, failure(s.Outcome))
		}
		for _, b := range ipxeBinaries {
			if strings.HasPrefix(d, b) {
				return fmt.Sprintf("TFTP sent %s at %s; the iPXE script was never fetched", d, at)
			}
		}
		return fmt.Sprintf("TFTP sent %s at %s; nothing was fetched after that", d, at)
	case store.StageBootScript:
		if !ok {
			return fmt.Sprintf("the boot script (%s) was refused at %s: %s", d, at, s.Outcome)
		}
		return fmt.Sprintf("the boot script (%s) was fetched at %s; the kernel was never fetched", d, at)
	case store.StageHTTP:
		switch {
		case !ok:
			return fmt.Sprintf("the download of %s failed at %s%s", d, at, failure(s.Outcome))
		case strings.HasPrefix(d, "vmlinuz"):
			return fmt.Sprintf("the kernel was downloaded at %s (%s); the ramdisk was never fetched", at, d)
		case strings.HasPrefix(d, "initramfs"):
			return fmt.Sprintf("the ramdisk was downloaded at %s (%s); the agent never looked up (check the node's console: the ramdisk may not reach the controller)", at, d)
		}
		return fmt.Sprintf("%s was downloaded at %s; nothing was fetched after that", d, at)
	case store.StageISO:
		if !ok {
			return fmt.Sprintf("the BMC's fetch of the virtual-media ISO failed at %s (%s)", at, s.Outcome)
		}
		return fmt.Sprintf("the BMC fetched the virtual-media ISO at %s (%s); the agent never looked up", at, d)
	case store.StageLookup:
		if !ok {
			return fmt.Sprintf("the agent's lookup was refused at %s (%s)", at, s.Outcome)
		}
		return fmt.Sprintf("the agent looked up at %s; it never heartbeated", at)
	case store.StageHeartbeat:
		return fmt.Sprintf("the agent first heartbeated at %s", at)
	case store.StageStepStart:
		return fmt.Sprintf("step %s was handed to the agent at %s", d, at)
	case store.StageStepEnd:
		return fmt.Sprintf("step %s ended at %s (%s)", d, at, s.Outcome)
	}
	if s.Outcome != "" {
		return fmt.Sprintf("%s %s at %s (%s)", s.Stage, d, at, s.Outcome)
	}
	return fmt.Sprintf("%s %s at %s", s.Stage, d, at)
}

// failure says why a download failed; a missing file is the usual one.
func failure(outcome string) string {
	if outcome == store.OutcomeNotFound {
		return ": file not found (missing from the controller's --boot-dir?)"
	}
	return " (" + outcome + ")"
}
