package image

import (
	"bytes"
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// Firmware is a file an included module asks for (modinfo -F firmware)
// and whether the build had it.
type Firmware struct {
	Module  string `json:"module"`
	File    string `json:"file"`
	Present bool   `json:"present"`
	Bytes   int64  `json:"bytes,omitempty"`
	// source is where a present file was found.
	source string
}

// ModuleFirmware reads the firmware= entries of each module's .modinfo
// section, the same list modinfo -F firmware prints, and looks each file
// up in dir (a linux-firmware style tree; "" means none). Debian's
// non-free firmware packages are not a build input: what a module lacks
// is reported, and the operator adds it with -firmware.
func ModuleFirmware(modulesDir string, files []string, dir string) ([]Firmware, error) {
	var out []Firmware
	for _, f := range files {
		names, err := modinfoFirmware(filepath.Join(modulesDir, f))
		if err != nil {
			return nil, err
		}
		for _, n := range names {
			fw := Firmware{Module: normalizeModule(f), File: n}
			if dir != "" {
				src := filepath.Join(dir, filepath.FromSlash(n))
				if st, err := os.Stat(src); err == nil && st.Mode().IsRegular() {
					fw.Present, fw.Bytes, fw.source = true, st.Size(), src
				}
			}
			out = append(out, fw)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Module != out[j].Module {
			return out[i].Module < out[j].Module
		}
		return out[i].File < out[j].File
	})
	return out, nil
}

// modinfoFirmware returns the firmware= values of a module's .modinfo
// section (NUL-separated key=value strings), deduplicated, in order.
func modinfoFirmware(ko string) ([]string, error) {
	f, err := elf.Open(ko)
	if err != nil {
		return nil, fmt.Errorf("module %s: %w", ko, err)
	}
	defer f.Close()
	sec := f.Section(".modinfo")
	if sec == nil {
		return nil, nil
	}
	data, err := sec.Data()
	if err != nil {
		return nil, fmt.Errorf("module %s: .modinfo: %w", ko, err)
	}
	var out []string
	seen := map[string]bool{}
	for _, kv := range bytes.Split(data, []byte{0}) {
		if v, ok := strings.CutPrefix(string(kv), "firmware="); ok && v != "" && !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	return out, nil
}

// FirmwareSummary counts present and absent firmware files and lists the
// modules with at least one absent.
func FirmwareSummary(fw []Firmware) (present, absent int, lacking []string) {
	seen := map[string]bool{}
	for _, f := range fw {
		if f.Present {
			present++
			continue
		}
		absent++
		if !seen[f.Module] {
			seen[f.Module] = true
			lacking = append(lacking, f.Module)
		}
	}
	return present, absent, lacking
}
