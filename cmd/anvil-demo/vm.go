package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"crypto/sha256"
	"encoding/hex"

	"github.com/anvil-metal/anvil/bmc/vbmc"
	"github.com/anvil-metal/anvil/controller/client"
	"github.com/anvil-metal/anvil/image"
)

// relayFlag makes the demo binary a one-connection TCP relay to the address
// that follows: QEMU's slirp runs it per guest connection ("cmd:" guestfwd),
// with the connection on stdin/stdout. (The "tcp:" form carries a single
// host connection for the VM's life, which breaks on the first close.)
const relayFlag = "-relay="

func relay(addr string) int {
	c, err := net.DialTimeout("tcp", addr, 10*time.Second)
	if err != nil {
		fmt.Fprintln(os.Stderr, "anvil-demo relay:", err)
		return 1
	}
	go func() {
		_, _ = io.Copy(c, os.Stdin)
		_ = c.(*net.TCPConn).CloseWrite()
	}()
	_, _ = io.Copy(os.Stdout, c)
	c.Close()
	return 0
}

// Addresses the guest uses, forwarded by slirp to the host's loopback.
const (
	guestAPI   = "10.0.2.100:6385"
	guestImage = "10.0.2.101:8080"
	bootMarker = "ANVIL-DEMO: booted the deployed disk"
)

// runVM provisions a QEMU virtual machine behind an in-process anvil-vbmc
// (Redfish) through its whole lifecycle with the real agent ramdisk.
func runVM(ctx context.Context, out io.Writer, controllerBin, imageDir, dir string) error {
	if err := image.EnsureTools(ctx, out, "needed to run the virtual node", image.Tool{Command: "qemu-system-x86_64", Package: "qemu-system-x86"}); err != nil {
		return err
	}
	// The uncompressed PVH kernel, where the build wrote one, boots about
	// 2.7 s sooner under TCG (image.PVHName).
	kernel := image.DirectKernel(imageDir)
	initrd, err := image.FindInitramfs(imageDir)
	if err != nil {
		return err
	}
	for _, f := range []string{kernel, initrd} {
		if _, err := os.Stat(f); err != nil {
			return fmt.Errorf("%s is missing: build the agent ramdisk with `make image`", f)
		}
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}

	// two NVMe disks pre-filled with a recognisable pattern and a fake GPT
	const size = 64 << 20
	var disks []vbmc.QEMUDisk
	for i := 0; i < 2; i++ {
		path := filepath.Join(dir, fmt.Sprintf("nvme%d.raw", i))
		if err := writePattern(path, size); err != nil {
			return err
		}
		disks = append(disks, vbmc.QEMUDisk{Path: path, SizeMiB: size >> 20, Serial: fmt.Sprintf("ANVIL-DEMO-%04d", i+1)})
	}

	// the whole-disk image to deploy: boots and prints a marker
	img := image.BootSectorDisk(bootMarker, 1<<20)
	sum := sha256.Sum256(img)
	imgLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	imgSrv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write(img) }),
		ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = imgSrv.Serve(imgLn) }()
	defer imgSrv.Close()

	ctl, url, err := startController(controllerBin, dir, "--bmc-min-interval", "200ms", "--heartbeat-interval", "2s")
	if err != nil {
		return err
	}
	defer ctl.stop()

	q, err := vbmc.NewQEMU(slog.New(slog.DiscardHandler), vbmc.QEMUConfig{StateDir: filepath.Join(dir, "qemu"), Disks: disks,
		NIC: &vbmc.QEMUNIC{MAC: "52:54:00:de:00:02", GuestFwd: []string{
			"tcp:" + guestAPI + "-cmd:" + self + " " + relayFlag + strings.TrimPrefix(url, "http://"),
			"tcp:" + guestImage + "-cmd:" + self + " " + relayFlag + imgLn.Addr().String()}},
		Kernel: kernel, Initrd: initrd, Append: "console=ttyS0 panic=-1 anvil.api=http://" + guestAPI,
		ShutdownTimeoutSeconds: 5})
	if err != nil {
		return err
	}
	node := vbmc.NewNode("demo-vm", q)
	defer vbmc.CloseNodes([]*vbmc.Node{node})
	bmcLn, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	bmcSrv := &http.Server{Handler: vbmc.NewServer(nil, "admin", "password", node).Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = bmcSrv.Serve(bmcLn) }()
	defer bmcSrv.Close()
	bmcURL := "http://" + bmcLn.Addr().String()
	fmt.Fprintf(out, "anvil-controller running at %s (database %s/anvil.db, log %s/controller.log)\n", url, dir, dir)
	fmt.Fprintf(out, "anvil-vbmc (Redfish) at %s in front of a QEMU VM (TCG, 2 x 64 MiB NVMe, serial console %s/qemu/serial.log)\n\n", bmcURL, dir)

	serial := filepath.Join(dir, "qemu", "serial.log")
	c := client.New(url, nil)
	dn := demoNode{
		fields: map[string]any{"driver": "redfish", "name": "demo-node", "deploy_interface": "direct", "inspect_interface": "agent",
			"driver_info": map[string]any{"redfish_address": bmcURL, "redfish_system_id": "/redfish/v1/Systems/demo-vm",
				"redfish_username": "admin", "redfish_password": "password"},
			"instance_info": map[string]any{"image_source": "http://" + guestImage + "/disk.raw",
				"image_checksum": "sha256:" + hex.EncodeToString(sum[:])},
			"properties": map[string]any{"root_device": map[string]any{"serial": disks[0].Serial}}},
		mac:   "52:54:00:de:00:02",
		about: "a QEMU VM behind anvil-vbmc (Redfish), the real agent ramdisk",
		after: func(ctx context.Context, verb string, out io.Writer) error {
			switch verb {
			case "provide", "deleted":
				return checkErased(out, disks)
			case "active":
				return waitForMarker(ctx, out, serial)
			case "inspect":
				return showInventory(ctx, c, out)
			}
			return nil
		},
	}
	return walk(ctx, c, out, dn)
}

// writePattern fills a sparse disk image with 0x5a at its start, middle and
// end, and GPT headers at both ends.
func writePattern(path string, size int64) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		return err
	}
	block := bytes.Repeat([]byte{0x5a}, 1<<20)
	for _, off := range []int64{0, size / 2, size - 1<<20} {
		if _, err := f.WriteAt(block, off); err != nil {
			return err
		}
	}
	for _, off := range []int64{512, size - 512} {
		if _, err := f.WriteAt([]byte("EFI PART"), off); err != nil {
			return err
		}
	}
	return nil
}

// checkErased reads the disk image files from the host.
func checkErased(out io.Writer, disks []vbmc.QEMUDisk) error {
	for _, d := range disks {
		data, err := os.ReadFile(d.Path)
		if err != nil {
			return err
		}
		if bytes.Contains(data, []byte("EFI PART")) || bytes.IndexByte(data, 0x5a) >= 0 {
			return fmt.Errorf("disk %s still holds the pattern or a GPT header after cleaning", d.Serial)
		}
	}
	fmt.Fprintf(out, "           host check: the pattern and the GPT headers are gone from both disk images\n")
	return nil
}

// waitForMarker waits for the deployed disk's boot message on the VM's
// serial console.
func waitForMarker(ctx context.Context, out io.Writer, serial string) error {
	for {
		if s, _ := os.ReadFile(serial); bytes.Contains(s, []byte(bootMarker)) {
			fmt.Fprintf(out, "           the VM booted its disk; serial console says: %q\n", bootMarker)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("the VM did not boot the deployed image (see %s): %w", serial, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// showInventory prints what inspection stored.
func showInventory(ctx context.Context, c *client.Client, out io.Writer) error {
	var body struct {
		Inventory struct {
			CPU struct {
				Count int `json:"count"`
			} `json:"cpu"`
			Memory struct {
				PhysicalMB int `json:"physical_mb"`
			} `json:"memory"`
			Disks []struct {
				Name   string `json:"name"`
				Size   int64  `json:"size"`
				Serial string `json:"serial"`
			} `json:"disks"`
		} `json:"inventory"`
	}
	if err := c.Do(ctx, http.MethodGet, "/v1/nodes/demo-node/inventory", nil, &body); err != nil {
		return err
	}
	inv := body.Inventory
	var disks []string
	for _, d := range inv.Disks {
		disks = append(disks, fmt.Sprintf("%s %d MiB serial %s", d.Name, d.Size>>20, d.Serial))
	}
	fmt.Fprintf(out, "           inventory stored: %d CPU, %d MiB RAM, disks: %s\n", inv.CPU.Count, inv.Memory.PhysicalMB, strings.Join(disks, "; "))
	return nil
}
