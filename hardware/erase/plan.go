package erase

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/hardware/disk"
	"github.com/anvil-metal/anvil/protocol"
)

// Method is one way of erasing a device.
type Method string

// Erase methods, most specific first.
const (
	MethodNVMeCrypto   Method = "nvme_format_crypto_erase"
	MethodNVMeUserData Method = "nvme_format_user_data_erase"
	MethodATAEnhanced  Method = "ata_security_erase_enhanced"
	MethodATA          Method = "ata_security_erase"
	MethodSecDiscard   Method = "blksecdiscard"
	MethodDiscard      Method = "blkdiscard"
	MethodZeroOut      Method = "blkzeroout"
	MethodOverwrite    Method = "overwrite"
)

// Action is what the plan does with a device.
type Action string

// Actions.
const (
	ActionErase  Action = "erase"
	ActionSkip   Action = "skip"
	ActionRefuse Action = "refuse" // the step must fail before writing anything
)

// DevicePlan is the decision for one device, computed before anything is
// written and returned in the step result so an operator sees why.
type DevicePlan struct {
	// DeviceIdentity (vendor, model, serial, WWN) names the device in the
	// result, for the controller's sanitization records.
	protocol.DeviceIdentity
	Device           string             `json:"device"`
	Size             uint64             `json:"size"`
	Action           Action             `json:"action"`
	Methods          []Method           `json:"methods,omitempty"` // tried in order until one verifies
	Reason           string             `json:"reason"`
	Notes            []string           `json:"notes,omitempty"`
	EstimatedSeconds float64            `json:"estimated_seconds,omitempty"`
	NVMe             *NVMeController    `json:"nvme,omitempty"`
	Shared           []SharedFilesystem `json:"shared_filesystems,omitempty"` // why it was refused
	NVMeLBAFormat    uint8              `json:"nvme_lba_format,omitempty"`
	// ErasedThrough lists, for a disk that is (or has partitions that
	// are) software RAID members, the devices whose erasure reaches it:
	// its arrays and its other partitions (erased as devices of their
	// own); MDMembers names which of the disk (itself or partitions) are
	// members. The controller certifies such a disk from them.
	ErasedThrough []string `json:"erased_through,omitempty"`
	MDMembers     []string `json:"md_members,omitempty"`
	// NVMeReadsOnes: the namespace reports (DLFEAT) that deallocated
	// blocks read as 0xFF, the value a format leaves: verification then
	// expects 0xFF rather than zeros.
	NVMeReadsOnes    bool         `json:"nvme_deallocated_reads_ones,omitempty"`
	ATA              *ATAIdentity `json:"ata,omitempty"`
	Rotational       bool         `json:"rotational"`
	LogicalBlockSize uint64       `json:"logical_block_size"`
}

// Prober answers capability questions while planning, without writing.
type Prober interface {
	NVMe(path string) (NVMeController, NVMeNamespace, error)
	ATA(path string) (ATAIdentity, error)
	// SharedFilesystems reads the device for shared-storage filesystems
	// (GPFS, VMFS, GFS2, OCFS2) that must not be erased by default.
	SharedFilesystems(path string) ([]SharedFilesystem, error)
}

// SysProber probes real devices through ioctls (read-only opens).
type SysProber struct{}

// NVMe implements Prober.
func (SysProber) NVMe(path string) (NVMeController, NVMeNamespace, error) { return NVMeProbe(path) }

// ATA implements Prober.
func (SysProber) ATA(path string) (ATAIdentity, error) { return ATAProbe(path) }

// SharedFilesystems implements Prober (a read-only open).
func (SysProber) SharedFilesystems(path string) ([]SharedFilesystem, error) { return probeShared(path) }

// Opener opens devices for writing; hardware.Guard implements it. Every
// write in this package goes through it.
type Opener interface {
	OpenForWrite(path string, flag int) (*os.File, error)
	Allows(path string) bool
}

// Rough throughputs for estimates; they only need to tell minutes from days.
const (
	hddBytesPerSec     = 150e6
	ssdBytesPerSec     = 500e6
	zeroOutOffloadRate = 4e9
	discardRate        = 50e9
)

// skipReason returns why a device is not erased at all, or "" — the rules
// shared by full and metadata erase. Read-only is handled by the caller
// because its outcome depends on the policy.
func skipReason(d disk.Disk, opener Opener) string {
	switch {
	case d.VirtualMedia:
		return "virtual media: " + d.VirtualMediaReason
	case d.Optical:
		// Always a skip, never a read-only refusal: IPA only erases disks,
		// and a server's DVD drive must not fail every cleaning.
		return "optical drive (CD/DVD): not a disk"
	case d.Controller == "dm":
		return "device-mapper device: its underlying devices are erased instead"
	case d.IsMDMember():
		return mdMemberReason(d)
	case opener != nil && !opener.Allows(d.Path):
		return "protected by the device guard (not in the allow-list, or not in the ramdisk)"
	}
	return mdProtected(d, opener)
}

// Plan decides, for every disk, whether and how it will be erased.
func Plan(ctx context.Context, disks []disk.Disk, pol Policy, prober Prober, opener Opener) []DevicePlan {
	var plans []DevicePlan
	bySubsystem := map[string][]string{}
	for _, d := range disks {
		if s := nvmeSubsystem(d.Name); s != "" {
			bySubsystem[s] = append(bySubsystem[s], d.Path)
		}
	}
	for _, d := range disks {
		if ctx.Err() != nil {
			break
		}
		var siblings []string
		for _, p := range bySubsystem[nvmeSubsystem(d.Name)] {
			if p != d.Path {
				siblings = append(siblings, p)
			}
		}
		plans = append(plans, planOne(d, pol, prober, opener, siblings))
		for _, p := range otherPartitions(d) {
			plans = append(plans, planOne(p, pol, prober, opener, nil))
		}
	}
	return plans
}

// nvmeSubsystem is the "nvme0" of namespace block device "nvme0n1", or ""
// for anything else. Namespaces with the same prefix sit behind the same
// controller (or subsystem, with native multipath), which is what a
// Format's all-namespaces attributes reach.
func nvmeSubsystem(name string) string {
	rest, ok := strings.CutPrefix(name, "nvme")
	if !ok {
		return ""
	}
	i := strings.IndexByte(rest, 'n')
	if i <= 0 || !allDigits(rest[:i]) || !allDigits(rest[i+1:]) || i+1 == len(rest) {
		return ""
	}
	return "nvme" + rest[:i]
}

func allDigits(s string) bool {
	for _, c := range s {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

// planOne plans d; siblings are the other namespaces of d's NVMe
// controller, which a Format with FNA bit 0 or 1 would erase as well.
func planOne(d disk.Disk, pol Policy, prober Prober, opener Opener, siblings []string) DevicePlan {
	p := DevicePlan{Device: d.Path, Size: d.Size, Rotational: d.Rotational, LogicalBlockSize: d.LogicalBlockSize,
		DeviceIdentity: protocol.DeviceIdentity{Vendor: d.Vendor, Model: d.Model, Serial: d.Serial, WWN: d.WWN, Controller: d.Controller}}
	if r := skipReason(d, opener); r != "" {
		p.Action, p.Reason = ActionSkip, r
		if d.IsMDMember() && !d.VirtualMedia && !d.Optical {
			p.ErasedThrough, p.MDMembers = erasedThrough(d)
		}
		return p
	}
	if d.ReadOnly {
		if pol.SkipReadOnly {
			p.Action, p.Reason = ActionSkip, "read-only device (skip_read_only is set)"
		} else {
			p.Action, p.Reason = ActionRefuse, "read-only device and skip_read_only is not set"
		}
		return p
	}
	if d.Removable && pol.SkipRemovable {
		p.Action, p.Reason = ActionSkip, "removable device (skip_removable is set)"
		return p
	}
	if why := mdUnwritable(d); why != "" {
		p.Action, p.Reason = ActionRefuse, why
		return p
	}
	if r := (SharedCheck{Prober: prober, Allow: pol.EraseSharedFilesystems}).refusal(d.Path); r != nil {
		p.Action, p.Reason, p.Shared = ActionRefuse, r.Error(), r.Found
		return p
	}
	if pol.EraseSharedFilesystems {
		p.Notes = append(p.Notes, "not checked for shared-storage filesystems (erase_shared_filesystems is set)")
	}
	p.Action = ActionErase
	var secure []Method
	var reasons []string
	switch {
	case d.Controller == "nvme" && pol.EnableNVMeSecureErase && prober != nil:
		ctrl, ns, err := prober.NVMe(d.Path)
		switch {
		case err != nil:
			p.Notes = append(p.Notes, "NVMe identify failed: "+err.Error())
		case !ctrl.FormatSupported():
			p.Notes = append(p.Notes, fmt.Sprintf("NVMe controller does not support Format NVM (OACS 0x%x)", ctrl.OACS))
		case (ctrl.FormatAppliesToAll() || ctrl.SecureEraseAppliesToAll()) && len(siblings) > 0:
			// The format would erase namespaces this plan never checked
			// (guard, RAID membership, read-only, shared filesystems), and
			// two plans would format the same controller at once.
			p.NVMe = &ctrl
			p.Notes = append(p.Notes, fmt.Sprintf("NVMe Format not used: on this controller it erases every namespace (FNA 0x%x), including %s",
				ctrl.FNA, strings.Join(siblings, ", ")))
		default:
			p.NVMe, p.NVMeLBAFormat, p.NVMeReadsOnes = &ctrl, ns.LBAFormat, ns.OnesOnTrim
			if ctrl.CryptoEraseSupported() {
				// Crypto erase first; some drives advertise it and still
				// refuse (infra-controller#2820), so user-data erase follows.
				secure = append(secure, MethodNVMeCrypto)
				reasons = append(reasons, "NVMe Format with crypto erase (FNA bit 2 set)")
			} else {
				reasons = append(reasons, "NVMe Format with user-data erase (no crypto erase in FNA)")
			}
			secure = append(secure, MethodNVMeUserData)
			if ctrl.FormatAppliesToAll() || ctrl.SecureEraseAppliesToAll() {
				p.Notes = append(p.Notes, "format applies to all namespaces of the controller; this is its only one")
			}
		}
	case (d.Controller == "sata" || d.Controller == "scsi") && pol.EnableATASecureErase && prober != nil:
		id, err := prober.ATA(d.Path)
		switch {
		case errors.Is(err, errNotApplicable):
			p.Notes = append(p.Notes, "not an ATA device: "+err.Error())
		case err != nil:
			p.Notes = append(p.Notes, "ATA identify failed: "+err.Error())
		case !id.SecuritySupported:
			p.Notes = append(p.Notes, "ATA security feature set not supported")
		case id.Frozen:
			p.Notes = append(p.Notes, "ATA security is frozen; secure erase not possible until the drive is unfrozen")
		default:
			if id.Locked || id.SecurityEnabled {
				// Most likely the password of an interrupted erase (ours
				// or IPA's): the erase takes it off first, and refuses the
				// drive if neither of those passwords opens it.
				p.Notes = append(p.Notes, "ATA security is enabled (locked: "+fmt.Sprint(id.Locked)+"): the erase first tries the passwords an interrupted anvil or IPA erase leaves")
			}
			p.ATA = &id
			if id.EnhancedSupported {
				secure = append(secure, MethodATAEnhanced)
				reasons = append(reasons, "ATA enhanced security erase")
			} else {
				secure = append(secure, MethodATA)
				reasons = append(reasons, "ATA security erase")
			}
		}
	}
	p.Methods = secure
	if len(secure) == 0 || pol.ContinueIfSecureEraseFailed {
		var generic []Method
		if pol.AllowDiscard && d.DiscardMaxBytes > 0 && !d.Rotational {
			generic = append(generic, MethodSecDiscard, MethodDiscard)
			reasons = append(reasons, "discard (allowed by policy; kept only if it reads back zeros)")
		}
		if pol.AllowZeroOut && pol.Iterations == 0 && pol.Zeroize {
			generic = append(generic, MethodZeroOut)
			reasons = append(reasons, "BLKZEROOUT (single zero pass requested)")
		}
		generic = append(generic, MethodOverwrite)
		reasons = append(reasons, fmt.Sprintf("overwrite: %s", describePasses(pol)))
		p.Methods = append(p.Methods, generic...)
	} else {
		p.Notes = append(p.Notes, "no fallback after a failed secure erase (continue_if_secure_erase_failed is not set)")
	}
	p.Reason = strings.Join(reasons, ", then ")
	p.EstimatedSeconds = estimate(p.Methods[0], d, pol, p.ATA).Seconds()
	return p
}

func describePasses(pol Policy) string {
	s := fmt.Sprintf("%d random pass(es)", pol.Iterations)
	if pol.Zeroize || pol.Iterations == 0 {
		s += " and a zero pass"
	}
	return s
}

// passes returns the overwrite passes in order.
func passes(pol Policy) int {
	n := pol.Iterations
	if pol.Zeroize || n == 0 {
		n++
	}
	return n
}

func estimate(m Method, d disk.Disk, pol Policy, ata *ATAIdentity) time.Duration {
	size := float64(d.Size)
	rate := ssdBytesPerSec
	if d.Rotational {
		rate = hddBytesPerSec
	}
	secs := func(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
	switch m {
	case MethodNVMeCrypto, MethodNVMeUserData:
		if m == MethodNVMeCrypto {
			return 30 * time.Second
		}
		return 2*time.Minute + secs(size/(4*ssdBytesPerSec))
	case MethodATAEnhanced:
		if ata != nil && ata.EnhancedEraseTime > 0 {
			return ata.EnhancedEraseTime
		}
		return secs(size / rate)
	case MethodATA:
		if ata != nil && ata.EraseTime > 0 {
			return ata.EraseTime
		}
		return secs(size / rate)
	case MethodSecDiscard, MethodDiscard:
		return secs(size / discardRate)
	case MethodZeroOut:
		if d.WriteZeroesMax > 0 {
			return secs(size / zeroOutOffloadRate)
		}
		return secs(size / rate)
	}
	return secs(float64(passes(pol)) * size / rate)
}
