package api

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
)

// bootFiles are the files a node fetches over HTTP after iPXE, by name:
// the first of the candidates that exists (make image writes a zstd
// initramfs when the kernel can unpack it, else gzip).
var bootFiles = map[string][]string{"vmlinuz": {"vmlinuz"}, "initramfs": {"initramfs.cpio.zst", "initramfs.cpio.gz"}}

// bootScript serves GET /v1/boot/{node}/ipxe: the iPXE script that boots
// the agent ramdisk for this node (public, like the agent endpoints: iPXE
// cannot authenticate). The first fetch after the controller booted the
// node carries a single-use nonce (anvil.token=) on the kernel command
// line, which the agent's lookup must present; later fetches carry none. Nodes that expect no agent get a script that exits
// to the next boot device, so a node left on PXE boots its disk.
func (s *Server) bootScript(w http.ResponseWriter, r *http.Request) error {
	if s.bootDir == "" {
		return errf(http.StatusNotFound, "This controller serves no boot files: start it with --boot-dir pointing at a built image (make image).")
	}
	ident := muxVar(r, "node")
	n, err := s.st.GetNode(r.Context(), ident)
	if errors.Is(err, store.ErrNotFound) {
		return notFound("Node", ident)
	}
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	if !state.LookupAllowed(state.State(n.ProvisionState)) {
		fmt.Fprintf(w, "#!ipxe\necho anvil: node %s is %s and expects no agent; booting the next device\nexit 0\n", n.UUID, n.ProvisionState)
		return nil
	}
	base := s.publicBase(r, n)
	nonce, err := s.cond.BootNonce(r.Context(), n.UUID)
	if err != nil {
		return err
	}
	args := []string{"initrd=initramfs", "anvil.api=" + base, "anvil.node=" + n.UUID}
	if nonce != "" { // only the first fetch after the controller booted the node
		args = append(args, "anvil.token="+nonce)
	}
	if extra, _ := n.DriverInfo["kernel_append_params"].(string); extra != "" {
		args = append(args, extra)
	} else {
		// VGA and the first serial port. Not ttyS1 too: Linux's 8250
		// console prints on one port only, and on a machine without a
		// second UART a console there waits for it at every character
		// (under QEMU the kernel printed nothing for minutes). The agent
		// copies the kernel log and its own to ttyS1 when it exists.
		args = append(args, "console=tty0", "console=ttyS0,115200n8")
	}
	fmt.Fprintf(w, "#!ipxe\necho anvil: booting the agent ramdisk for node %s (%s)\n", n.UUID, n.ProvisionState)
	fmt.Fprintf(w, "kernel %s/v1/boot/files/vmlinuz %s\n", base, strings.Join(args, " "))
	fmt.Fprintf(w, "initrd --name initramfs %s/v1/boot/files/initramfs\n", base)
	fmt.Fprintf(w, "boot\n")
	return nil
}

// publicBase is the URL nodes use to reach the controller: a per-node
// driver_info anvil_public_url, else --public-url, else the request's host.
func (s *Server) publicBase(r *http.Request, n *store.Node) string {
	if u, _ := n.DriverInfo["anvil_public_url"].(string); u != "" {
		return strings.TrimRight(u, "/")
	}
	return s.baseURL(r)
}

// bootFile serves the kernel and initramfs from --boot-dir.
func (s *Server) bootFile(w http.ResponseWriter, r *http.Request) error {
	names, ok := bootFiles[muxVar(r, "file")]
	if !ok || s.bootDir == "" {
		return notFound("Boot file", muxVar(r, "file"))
	}
	var f *os.File
	var name string
	for _, name = range names {
		var err error
		if f, err = os.Open(filepath.Join(s.bootDir, name)); err == nil {
			break
		}
	}
	if f == nil {
		return notFound("Boot file", muxVar(r, "file"))
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	http.ServeContent(w, r, name, st.ModTime(), f)
	return nil
}
