package verify

import (
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// DIMMs reads the populated memory devices from the SMBIOS type 17
// entries the kernel exposes under root/sys/firmware/dmi/entries: Go
// instead of dmidecode, which the ramdisk does not carry. nil when the
// firmware publishes none.
func DIMMs(root string) ([]DIMM, error) {
	paths, err := filepath.Glob(filepath.Join(root, "sys", "firmware", "dmi", "entries", "17-*", "raw"))
	if err != nil || len(paths) == 0 {
		return nil, err
	}
	sort.Strings(paths)
	out := []DIMM{}
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("smbios: %w", err)
		}
		d, ok, err := ParseMemoryDevice(b)
		if err != nil {
			return nil, fmt.Errorf("smbios %s: %w", filepath.Base(filepath.Dir(p)), err)
		}
		if ok {
			out = append(out, d)
		}
	}
	return out, nil
}

// ParseMemoryDevice decodes one SMBIOS type 17 structure (formatted area
// then strings). ok is false for an empty slot.
func ParseMemoryDevice(b []byte) (DIMM, bool, error) {
	if len(b) < 0x15 || b[0] != 17 {
		return DIMM{}, false, fmt.Errorf("not a memory device structure (%d bytes)", len(b))
	}
	n := int(b[1])
	if n < 0x15 || n > len(b) {
		return DIMM{}, false, fmt.Errorf("formatted length %d out of range", n)
	}
	size := binary.LittleEndian.Uint16(b[0x0C:])
	var mb uint64
	switch {
	case size == 0 || size == 0xFFFF:
		return DIMM{}, false, nil
	case size == 0x7FFF:
		if n < 0x20 {
			return DIMM{}, false, fmt.Errorf("extended size announced but the structure is %d bytes", n)
		}
		mb = uint64(binary.LittleEndian.Uint32(b[0x1C:]) & 0x7FFFFFFF)
	case size&0x8000 != 0:
		mb = uint64(size&0x7FFF) >> 10 // KiB
	default:
		mb = uint64(size)
	}
	return DIMM{Locator: smbiosString(b[n:], b[0x10]), SizeMB: mb}, true, nil
}

func smbiosString(strs []byte, idx byte) string {
	if idx == 0 {
		return ""
	}
	parts := strings.Split(string(strs), "\x00")
	if int(idx) > len(parts) {
		return ""
	}
	return strings.TrimSpace(parts[idx-1])
}
