package burnin

import (
	"encoding/binary"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// DIMMAt names the memory device(s) whose SMBIOS "memory device mapped
// address" range (type 20) holds the physical address pa, by their type
// 17 locators ("DIMM_A1 (bank CPU0_A)"). It reads the kernel's copy of
// the tables under root (sys/firmware/dmi/entries). "" when the firmware
// does not publish type 20 (many do not) or none matches: the result then
// has the physical address only.
func DIMMAt(root string, pa uint64) string {
	dir := filepath.Join(root, "sys/firmware/dmi/entries")
	ranges, _ := filepath.Glob(filepath.Join(dir, "20-*", "raw"))
	var handles []uint16
	for _, p := range ranges {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		lo, hi, dev, ok := mappedRange(b)
		if ok && pa >= lo && pa <= hi {
			handles = append(handles, dev)
		}
	}
	if len(handles) == 0 {
		return ""
	}
	devices, _ := filepath.Glob(filepath.Join(dir, "17-*", "raw"))
	var names []string
	for _, p := range devices {
		b, err := os.ReadFile(p)
		if err != nil || len(b) < 0x12 {
			continue
		}
		h := binary.LittleEndian.Uint16(b[2:4])
		for _, want := range handles {
			if h == want {
				names = append(names, locator(b))
			}
		}
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

// mappedRange decodes a type 20 structure: the byte range it maps and the
// handle of its memory device. Addresses are in KiB unless the 32-bit
// start is 0xFFFFFFFF, when the extended 64-bit byte addresses hold them.
func mappedRange(b []byte) (lo, hi uint64, dev uint16, ok bool) {
	if len(b) < 0x13 || b[0] != 20 || int(b[1]) > len(b) || b[1] < 0x13 {
		return 0, 0, 0, false
	}
	start := binary.LittleEndian.Uint32(b[4:8])
	end := binary.LittleEndian.Uint32(b[8:12])
	dev = binary.LittleEndian.Uint16(b[12:14])
	if start == 0xFFFFFFFF {
		if b[1] < 0x23 {
			return 0, 0, 0, false
		}
		return binary.LittleEndian.Uint64(b[0x13:0x1B]), binary.LittleEndian.Uint64(b[0x1B:0x23]), dev, true
	}
	return uint64(start) << 10, uint64(end)<<10 | 0x3FF, dev, true
}

// locator is a type 17 structure's device locator, with its bank locator
// when there is one.
func locator(b []byte) string {
	strs := smbiosStrings(b)
	get := func(i byte) string {
		if i == 0 || int(i) > len(strs) {
			return ""
		}
		return strings.TrimSpace(strs[i-1])
	}
	name := get(b[0x10])
	if bank := get(b[0x11]); bank != "" {
		name += " (bank " + bank + ")"
	}
	if name == "" {
		name = "memory device without a locator"
	}
	return name
}

// smbiosStrings are the NUL-terminated strings after a structure's
// formatted area.
func smbiosStrings(b []byte) []string {
	if int(b[1]) >= len(b) {
		return nil
	}
	var out []string
	for _, s := range strings.Split(string(b[b[1]:]), "\x00") {
		if s == "" {
			break
		}
		out = append(out, s)
	}
	return out
}
