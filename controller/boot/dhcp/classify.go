// Package dhcp is the controller's DHCP service for network boot: a
// proxyDHCP server (boot information only, beside the site's DHCP server)
// or a full DHCP server for one range, which answers only the MACs of
// enrolled ports whose node the controller is booting right now and
// chain-loads each firmware kind into iPXE and then into the node's script.
package dhcp

import (
	"bytes"
	"strings"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/iana"
)

// Kind is the boot firmware a request comes from.
type Kind int

const (
	// KindOther is not a network-boot client (an OS or the agent's DHCP
	// client): full mode gives it an address, proxy mode ignores it.
	KindOther    Kind = iota
	KindBIOS          // legacy PXE ROM
	KindUEFI          // UEFI PXE (x64)
	KindUEFIHTTP      // UEFI HTTP boot (x64)
	KindIPXE          // iPXE itself, after chain-loading or as the NIC's ROM
)

func (k Kind) String() string {
	switch k {
	case KindBIOS:
		return "BIOS PXE"
	case KindUEFI:
		return "UEFI PXE"
	case KindUEFIHTTP:
		return "UEFI HTTP"
	case KindIPXE:
		return "iPXE"
	}
	return "non-PXE client"
}

// classify reads the firmware kind from the vendor class (option 60),
// client architecture (93) and user class (77).
func classify(m *dhcpv4.DHCPv4) Kind {
	// iPXE sends user class "iPXE" (raw, not RFC 3004-encoded). Checked
	// first: iPXE also calls itself PXEClient in option 60.
	if uc := m.Options.Get(dhcpv4.OptionUserClassInformation); bytes.Contains(uc, []byte("iPXE")) {
		return KindIPXE
	}
	vc := m.ClassIdentifier()
	pxe, http := strings.HasPrefix(vc, "PXEClient"), strings.HasPrefix(vc, "HTTPClient")
	if !pxe && !http {
		return KindOther
	}
	archs := m.ClientArch()
	arch := iana.INTEL_X86PC
	if len(archs) > 0 {
		arch = archs[0]
	}
	switch {
	case http || arch == iana.EFI_X86_64_HTTP:
		if arch == iana.EFI_X86_64_HTTP || arch == iana.EFI_X86_64 {
			return KindUEFIHTTP
		}
	case arch == iana.INTEL_X86PC:
		return KindBIOS
	case arch == iana.EFI_X86_64 || arch == iana.EFI_BC:
		return KindUEFI
	}
	// Other architectures (ARM, IA32, ...): we have no binaries for them.
	return KindOther
}

// Boot file names in the boot directory (from Debian's ipxe, shim-signed
// and grub-efi-amd64-signed packages; make image puts them there).
const (
	FileIPXEBIOS = "undionly.kpxe"
	FileIPXEUEFI = "snponly.efi"
	FileIPXEHTTP = "ipxe.efi"
	FileShim     = "shimx64.efi"
)

// Target is what the service knows of the node behind a MAC.
type Target struct {
	NodeUUID string // "" for a machine to discover
	MAC      string
	// Discovery: no node has this MAC and discovery is on, so the
	// firmware is answered with the discovery ramdisk (chosen by MAC).
	Discovery bool
	State     string
	// Booting: the controller is booting this node now (inspect, clean,
	// deploy, rescue), so its firmware may be answered.
	Booting bool
	// SecureBoot: the node boots signed shim → grub → kernel instead of iPXE.
	SecureBoot bool
}

// bootInfo is what a reply tells the firmware to load.
type bootInfo struct {
	file   string // TFTP file name or HTTP URL
	vendor string // option 60 in the reply: "PXEClient" or "HTTPClient"
}

// chooseBoot picks the next stage for a firmware kind (empty file: none).
// httpBase is the controller's URL as nodes reach it.
func chooseBoot(k Kind, t Target, httpBase string) bootInfo {
	switch k {
	case KindBIOS:
		return bootInfo{file: FileIPXEBIOS, vendor: "PXEClient"}
	case KindUEFI:
		if t.SecureBoot {
			return bootInfo{file: FileShim, vendor: "PXEClient"}
		}
		return bootInfo{file: FileIPXEUEFI, vendor: "PXEClient"}
	case KindUEFIHTTP:
		if t.SecureBoot {
			// Debian's signed network GRUB has no HTTP client: after shim it
			// could not fetch its configuration. Such nodes boot over PXE.
			return bootInfo{}
		}
		return bootInfo{file: httpBase + "/v1/boot/files/" + FileIPXEHTTP, vendor: "HTTPClient"}
	case KindIPXE:
		if t.Discovery {
			return bootInfo{file: httpBase + "/v1/boot/" + t.MAC + "/ipxe"}
		}
		return bootInfo{file: httpBase + "/v1/boot/" + t.NodeUUID + "/ipxe"}
	}
	return bootInfo{}
}
