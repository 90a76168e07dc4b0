package protocol

import (
	"bytes"
	"encoding/json"
	"fmt"
)

// BootConfig is the per-node configuration a virtual-media ISO carries: the
// controller writes it into the ISO's node slot (an uncompressed newc cpio
// that the boot loader loads as a second initramfs), so it appears in the
// ramdisk at BootConfigPath. It replaces what the iPXE script puts on the
// kernel command line, and adds the static network configuration a
// network without DHCP needs.
type BootConfig struct {
	// Cmdline holds kernel-command-line style arguments the agent reads
	// after /proc/cmdline's (anvil.api=, anvil.node=, anvil.token=, ...).
	Cmdline string `json:"cmdline,omitempty"`
	// NetworkData is the node's network_data in Ironic's (Nova's
	// network_data.json) format; empty: DHCP.
	NetworkData json.RawMessage `json:"network_data,omitempty"`
	// Placeholder marks the slot of the common ISO, which no controller
	// has filled in.
	Placeholder bool `json:"placeholder,omitempty"`
}

// BootConfigPath is where the ISO's node slot puts the BootConfig in the
// ramdisk (relative to /).
const BootConfigPath = "etc/anvil/boot.json"

// BootSlotSize is the size of the node slot in the ISO: room for a
// network_data of a few dozen links and networks.
const BootSlotSize = 64 << 10

// Slot returns the node slot's bytes for c: a newc cpio holding
// BootConfigPath, padded with zeros to BootSlotSize (the kernel skips zeros
// after an archive). An error if it does not fit.
func (c BootConfig) Slot() ([]byte, error) {
	body, err := json.Marshal(c)
	if err != nil {
		return nil, fmt.Errorf("boot config: %w", err)
	}
	var b bytes.Buffer
	ino := 1
	for _, e := range []struct {
		name string
		mode uint32
		data []byte
	}{{"etc", 0o40755, nil}, {"etc/anvil", 0o40755, nil}, {BootConfigPath, 0o100600, body}, {"TRAILER!!!", 0, nil}} {
		writeNewc(&b, ino, e.name, e.mode, e.data)
		ino++
	}
	if b.Len() > BootSlotSize {
		return nil, fmt.Errorf("boot config: %d bytes, the ISO's node slot holds %d", b.Len(), BootSlotSize)
	}
	out := make([]byte, BootSlotSize)
	copy(out, b.Bytes())
	return out, nil
}

// writeNewc appends one newc ("070701") cpio entry: mtime 0, uid/gid 0,
// header+name and data each padded to 4 bytes.
func writeNewc(b *bytes.Buffer, ino int, name string, mode uint32, data []byte) {
	nlink := 1
	if mode&0o40000 != 0 {
		nlink = 2
	}
	if name == "TRAILER!!!" {
		ino, nlink = 0, 1
	}
	fmt.Fprintf(b, "070701%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X%08X",
		ino, mode, 0, 0, nlink, 0, len(data), 0, 0, 0, 0, len(name)+1, 0)
	b.WriteString(name)
	b.WriteByte(0)
	pad(b)
	b.Write(data)
	pad(b)
}

func pad(b *bytes.Buffer) {
	for b.Len()%4 != 0 {
		b.WriteByte(0)
	}
}
