package api

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/vmedia"
	"github.com/anvil-metal/anvil/internal/regularfile"
	"github.com/anvil-metal/anvil/protocol"
)

// VirtualMedia opens a node's per-node ISO (controller/vmedia): only with
// the key of the node's current virtual-media boot, building it with
// config at the first fetch.
type VirtualMedia interface {
	Open(nodeUUID, key string, config func() (protocol.BootConfig, error)) (*os.File, error)
}

// bootISO serves GET /v1/boot/{node}/vmedia/{key}.iso: the node's ISO for
// its BMC's virtual CD. Public like the iPXE script (a BMC fetching
// virtual media cannot authenticate to us), but only under the per-boot
// key the controller gave the BMC over its authenticated Redfish: anybody
// else gets a 404 that says nothing more. The first fetch after the
// controller booted the node builds the ISO with the boot nonce (as the
// iPXE script's first fetch does); later fetches (BMCs read ranges, again
// and again) get the same bytes. The node's network_data goes into it for
// networks without DHCP.
func (s *Server) bootISO(w http.ResponseWriter, r *http.Request) error {
	missing := notFound("Boot file", "virtual media ISO")
	if s.media == nil {
		return missing
	}
	n, err := s.bootNode(r.Context(), muxVar(r, "node"))
	if err != nil {
		return missing
	}
	if !state.LookupAllowed(state.State(n.ProvisionState)) {
		return missing
	}
	f, err := s.media.Open(n.UUID, muxVar(r, "key"), func() (protocol.BootConfig, error) {
		_, args, err := s.agentBoot(r.Context(), n, s.publicBase(r, n), conductor.BootFetch{Via: "vmedia", Address: sourceAddr(r)})
		if err != nil {
			return protocol.BootConfig{}, err
		}
		bc := protocol.BootConfig{Cmdline: strings.Join(args, " ")}
		if len(n.NetworkData) > 0 {
			if bc.NetworkData, err = json.Marshal(n.NetworkData); err != nil {
				return bc, err
			}
		}
		return bc, nil
	})
	if errors.Is(err, vmedia.ErrNotFound) {
		return missing
	}
	if err != nil {
		return err
	}
	defer f.Close()
	return s.download(w, r, n.UUID, store.StageISO, "ISO", func(w http.ResponseWriter) error {
		st, err := f.Stat()
		if err != nil {
			return err
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Cache-Control", "no-store")
		extendWrite(w, bootFileWriteTimeout)
		http.ServeContent(w, r, n.UUID+".iso", st.ModTime(), f)
		return nil
	})
}

// bootFiles are the files a node fetches over HTTP, by name: the first of
// the candidates that exists (make image writes a zstd initramfs when the
// kernel can unpack it, else gzip). Besides kernel and initramfs, the
// first-stage binaries for UEFI HTTP boot (the boot service's DHCP points
// such firmware here).
var bootFiles = map[string][]string{"vmlinuz": {"vmlinuz"}, "initramfs": {"initramfs.cpio.zst", "initramfs.cpio.gz"},
	"ipxe.efi": {"ipxe.efi"}, "snponly.efi": {"snponly.efi"}, "undionly.kpxe": {"undionly.kpxe"},
	"shimx64.efi": {"shimx64.efi"}, "grubx64.efi": {"grubx64.efi"}}

// bootScript serves GET /v1/boot/{node}/ipxe: the iPXE script that boots
// the agent ramdisk for this node (public, like the agent endpoints: iPXE
// cannot authenticate). It carries the boot's nonce (anvil.token=) on the
// kernel command line, which the agent's lookup must present, to one
// address only (conductor.BootNonce says whom; anybody else is refused or,
// with the boot's secret already used, stops the operation). Nodes that
// expect no agent get a script that exits to the next boot device, so a
// node left on PXE boots its disk.
func (s *Server) bootScript(w http.ResponseWriter, r *http.Request) error {
	n, err := s.bootNode(r.Context(), muxVar(r, "node"))
	if mac, ok := s.discoverable(r, err); ok {
		return s.discoveryScript(w, r, mac)
	}
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !state.LookupAllowed(state.State(n.ProvisionState)) {
		// Said to whoever asks: nothing about the node but that.
		fmt.Fprint(w, "#!ipxe\necho anvil: this machine expects no agent now; booting the next device\nexit 0\n")
		return nil
	}
	base, args, err := s.agentBoot(r.Context(), n, s.publicBase(r, n), conductor.BootFetch{Via: "ipxe", Address: sourceAddr(r)})
	s.scriptStage(n.UUID, "iPXE script", sourceAddr(r), err)
	if err != nil {
		s.countClaim(err, "boot_script")
		return err
	}
	writeIPXE(w, base, fmt.Sprintf("booting the agent ramdisk for node %s (%s)", n.UUID, n.ProvisionState), args)
	return nil
}

// writeIPXE writes the iPXE script that boots the agent ramdisk with args.
func writeIPXE(w http.ResponseWriter, base, say string, args []string) {
	args = append([]string{"initrd=initramfs"}, args...)
	fmt.Fprintf(w, "#!ipxe\necho anvil: %s\n", say)
	fmt.Fprintf(w, "kernel %s/v1/boot/files/vmlinuz %s\n", base, strings.Join(args, " "))
	fmt.Fprintf(w, "initrd --name initramfs %s/v1/boot/files/initramfs\n", base)
	fmt.Fprintf(w, "boot\n")
}

// bootGrub serves GET /v1/boot/{node}/grub: the GRUB configuration that
// boots the agent ramdisk on a UEFI Secure Boot node (signed shim → signed
// network GRUB → the signed kernel). Debian's signed network GRUB has no
// HTTP client, so the boot service serves it over TFTP (GrubConfig, with
// the TFTP client's address) and kernel and initramfs come from the TFTP
// server too. Like the iPXE script it is public and carries the boot's
// nonce to one address. {node} may also be one of the node's port MACs:
// GRUB knows only ${net_default_mac}.
func (s *Server) bootGrub(w http.ResponseWriter, r *http.Request) error {
	n, err := s.bootNode(r.Context(), muxVar(r, "node"))
	if err != nil {
		return err
	}
	cfg, err := s.grubConfig(r.Context(), n, s.publicBase(r, n), sourceAddr(r))
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, err = w.Write(cfg)
	return err
}

// GrubConfig is the GRUB configuration of the node with a port MAC mac,
// for the boot service's TFTP server (client: the address that asked;
// base: the controller's URL as nodes reach it).
func (s *Server) GrubConfig(ctx context.Context, mac, client, base string) ([]byte, error) {
	n, err := s.bootNode(ctx, mac)
	if err != nil {
		return nil, err
	}
	if u, _ := n.DriverInfo["anvil_public_url"].(string); u != "" {
		base = strings.TrimRight(u, "/")
	} else if s.publicURL != "" {
		base = s.publicURL
	}
	cfg, err := s.grubConfig(ctx, n, base, client)
	s.countClaim(err, "boot_script")
	return cfg, err
}

func (s *Server) grubConfig(ctx context.Context, n *store.Node, base, client string) ([]byte, error) {
	var b strings.Builder
	if !state.LookupAllowed(state.State(n.ProvisionState)) {
		b.WriteString("echo 'anvil: this machine expects no agent now; booting the next device'\nexit\n")
		return []byte(b.String()), nil
	}
	_, args, err := s.agentBoot(ctx, n, base, conductor.BootFetch{Via: "grub", Address: client})
	s.scriptStage(n.UUID, "GRUB configuration", client, err)
	if err != nil {
		return nil, err
	}
	initrd, name := s.openBootFile("initramfs")
	if initrd == nil {
		return nil, notFound("Boot file", "initramfs")
	}
	initrd.Close()
	fmt.Fprintf(&b, "echo 'anvil: booting the agent ramdisk for node %s (%s)'\n", n.UUID, n.ProvisionState)
	fmt.Fprintf(&b, "linux /vmlinuz %s\n", strings.Join(args, " "))
	fmt.Fprintf(&b, "initrd /%s\n", name)
	fmt.Fprintf(&b, "boot\n")
	return []byte(b.String()), nil
}

// discoverable reports whether a boot request that found no node (err)
// was made by MAC with discovery on: the machine gets the discovery script.
func (s *Server) discoverable(r *http.Request, err error) (string, bool) {
	var nf *notFoundKey
	if err == nil || !errors.As(err, &nf) || s.discovery == nil || !s.discovery.cfg.Enabled || s.bootDir == "" {
		return "", false
	}
	hw, perr := net.ParseMAC(muxVar(r, "node"))
	if perr != nil || len(hw) != 6 {
		return "", false
	}
	return hw.String(), true
}

// discoveryScript boots the agent ramdisk for a machine no node has, with
// anvil.discovery instead of a node and a nonce: its agent reports the
// inventory to POST /v1/discovery and is enrolled as a new node. It
// carries nothing secret, so it is the same for every caller.
func (s *Server) discoveryScript(w http.ResponseWriter, r *http.Request, mac string) error {
	files, args := s.ramdiskArgs(s.baseURL(r), []string{"anvil.discovery"}, "")
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	writeIPXE(w, files, mac+" belongs to no node; booting the agent ramdisk to discover this machine", args)
	return nil
}

// bootNode finds the node of a boot request by UUID, name or port MAC.
func (s *Server) bootNode(ctx context.Context, ident string) (*store.Node, error) {
	if s.bootDir == "" {
		return nil, errf(http.StatusNotFound, "This controller serves no boot files: start it with --boot-dir pointing at a built image (make image).")
	}
	if hw, err := net.ParseMAC(ident); err == nil && len(hw) == 6 {
		mac := hw.String()
		ports, err := s.st.ListPorts(ctx, store.ResourceFilter{Address: &mac}, store.Page{Limit: 1})
		if err != nil {
			return nil, err
		}
		if len(ports) == 0 {
			return nil, notFound("Node", ident)
		}
		ident = ports[0].NodeUUID
	}
	n, err := s.st.GetNode(ctx, ident)
	if errors.Is(err, store.ErrNotFound) {
		return nil, notFound("Node", ident)
	}
	return n, err
}

// agentBoot is what every boot loader passes the agent's kernel: the
// URL boot files are fetched from, and the kernel command line with the
// controller's URL as the node reaches it (base) and, when the conductor
// gives it to this fetch, the boot's nonce (anvil.token=), which the
// agent's lookup must present.
//
// A controller serving HTTPS sends the agent to https:// and pins its
// certificate (anvil.api_fingerprint=), while the boot loaders fetch
// their files in plain HTTP on the same port (they cannot be told to
// trust the certificate; see SplitTLS).
func (s *Server) agentBoot(ctx context.Context, n *store.Node, base string, f conductor.BootFetch) (string, []string, error) {
	nonce, err := s.cond.BootNonce(ctx, n.UUID, f)
	if err != nil {
		return "", nil, err
	}
	who := []string{"anvil.node=" + n.UUID}
	if nonce != "" {
		who = append(who, protocol.CmdlineNonce+"="+nonce)
	}
	extra, _ := n.DriverInfo["kernel_append_params"].(string)
	files, args := s.ramdiskArgs(base, who, extra)
	return files, args, nil
}

// ramdiskArgs is the agent's kernel command line, for a node's boot and
// for discovery alike: the controller's URL, who the agent is (who), and
// the kernel parameters; and the URL boot files are fetched from. As in
// Ironic, kernel_append_params (a node's driver_info) replaces the default
// parameters, and "%default%" in it stands for them, so an operator can
// add one (module_blacklist=...) without losing the console.
func (s *Server) ramdiskArgs(base string, who []string, appendParams string) (files string, args []string) {
	files, api := base, base
	if s.tlsPin != "" {
		files, api = withScheme(base, "http"), withScheme(base, "https")
	}
	args = []string{"anvil.api=" + api}
	if s.tlsPin != "" {
		args = append(args, protocol.CmdlineFingerprint+"="+s.tlsPin)
	}
	args = append(args, who...)
	if strings.TrimSpace(appendParams) != "" {
		return files, append(args, strings.Fields(strings.ReplaceAll(appendParams, "%default%", defaultKernelParams))...)
	}
	return files, append(args, strings.Fields(defaultKernelParams)...)
}

// withScheme replaces the scheme of an http(s) URL.
func withScheme(base, scheme string) string {
	if _, rest, ok := strings.Cut(base, "://"); ok {
		return scheme + "://" + rest
	}
	return base
}

// defaultKernelParams: VGA and the first serial port. Not ttyS1 too:
// Linux's 8250 console prints on one port only, and on a machine without a
// second UART a console there waits for it at every character (under QEMU
// the kernel printed nothing for minutes). The agent copies the kernel log
// and its own to ttyS1 when it exists.
const defaultKernelParams = "console=tty0 console=ttyS0,115200n8"

// publicBase is the URL nodes use to reach the controller: a per-node
// driver_info anvil_public_url, else --public-url, else the request's host.
func (s *Server) publicBase(r *http.Request, n *store.Node) string {
	if u, _ := n.DriverInfo["anvil_public_url"].(string); u != "" {
		return strings.TrimRight(u, "/")
	}
	return s.baseURL(r)
}

// bootFile serves the files of bootFiles from --boot-dir.
func (s *Server) bootFile(w http.ResponseWriter, r *http.Request) error {
	what := muxVar(r, "file")
	f, name := s.openBootFile(what)
	if f != nil {
		defer f.Close()
		what = name
	}
	// A download names no node: the address it comes from does, once
	// DHCP or the boot script told whose it is.
	return s.download(w, r, s.nodeAt(r), store.StageHTTP, what, func(w http.ResponseWriter) error {
		if f == nil {
			return notFound("Boot file", muxVar(r, "file"))
		}
		st, err := f.Stat()
		if err != nil {
			return err
		}
		w.Header().Set("Content-Type", "application/octet-stream")
		extendWrite(w, bootFileWriteTimeout)
		http.ServeContent(w, r, name, st.ModTime(), f)
		return nil
	})
}

// openBootFile opens the first existing candidate of bootFiles[key] in
// --boot-dir (nil if none).
func (s *Server) openBootFile(key string) (*os.File, string) {
	return OpenBootFile(s.bootDir, key)
}

// OpenBootFile opens the file nodes get as key ("vmlinuz", "initramfs",
// ...) from a boot directory: the first candidate that is a regular file
// (nil if none). Anything else under a candidate's name (a FIFO, a
// directory, a device) counts as missing and is never waited on.
func OpenBootFile(dir, key string) (*os.File, string) {
	if dir == "" {
		return nil, ""
	}
	for _, name := range bootFiles[key] {
		if f, err := regularfile.Open(filepath.Join(dir, name)); err == nil {
			return f, name
		}
	}
	return nil, ""
}
