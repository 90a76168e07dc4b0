package health

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// MemoryController is one EDAC memory controller and its DIMMs' counts
// (since the EDAC driver loaded, i.e. since the ramdisk booted).
type MemoryController struct {
	Name              string     `json:"name"` // mc0
	Driver            string     `json:"driver,omitempty"`
	Corrected         uint64     `json:"corrected"`
	Uncorrected       uint64     `json:"uncorrected"`
	CorrectedNoInfo   uint64     `json:"corrected_noinfo,omitempty"`
	UncorrectedNoInfo uint64     `json:"uncorrected_noinfo,omitempty"`
	DIMMs             []EDACDIMM `json:"dimms,omitempty"`
}

// EDACDIMM is one DIMM as EDAC names it.
type EDACDIMM struct {
	Label       string `json:"label"` // the board's silkscreen name when the driver knows it
	Location    string `json:"location,omitempty"`
	SizeMB      uint64 `json:"size_mb,omitempty"`
	Corrected   uint64 `json:"corrected"`
	Uncorrected uint64 `json:"uncorrected"`
}

// ReadEDAC reads root/sys/devices/system/edac/mc. nil, nil when no EDAC
// driver is loaded (VMs, machines without ECC).
func ReadEDAC(root string) ([]MemoryController, error) {
	dir := filepath.Join(root, "sys", "devices", "system", "edac", "mc")
	mcs, err := filepath.Glob(filepath.Join(dir, "mc[0-9]*"))
	if err != nil {
		return nil, fmt.Errorf("edac: %w", err)
	}
	sort.Strings(mcs)
	var out []MemoryController
	for _, p := range mcs {
		mc := MemoryController{Name: filepath.Base(p), Driver: readTrim(filepath.Join(p, "mc_name"))}
		var err error
		if mc.Corrected, err = readCount(filepath.Join(p, "ce_count")); err != nil {
			return nil, err
		}
		if mc.Uncorrected, err = readCount(filepath.Join(p, "ue_count")); err != nil {
			return nil, err
		}
		mc.CorrectedNoInfo, _ = readCount(filepath.Join(p, "ce_noinfo_count"))
		mc.UncorrectedNoInfo, _ = readCount(filepath.Join(p, "ue_noinfo_count"))
		// dimmN when the driver knows the modules, rankN when it only
		// knows ranks (amd64_edac, per node_exporter issue 3722; the
		// edac-utils capture in testdata).
		dimms, _ := filepath.Glob(filepath.Join(p, "dimm[0-9]*"))
		ranks, _ := filepath.Glob(filepath.Join(p, "rank[0-9]*"))
		dimms = append(dimms, ranks...)
		sort.Slice(dimms, func(i, j int) bool { return num(dimms[i]) < num(dimms[j]) })
		for _, d := range dimms {
			dm := EDACDIMM{Label: readTrim(filepath.Join(d, "dimm_label")), Location: readTrim(filepath.Join(d, "dimm_location"))}
			if dm.Label == "" {
				dm.Label = mc.Name + "/" + filepath.Base(d)
			}
			dm.SizeMB, _ = readCount(filepath.Join(d, "size"))
			if dm.Corrected, err = readCount(filepath.Join(d, "dimm_ce_count")); err != nil {
				return nil, err
			}
			if dm.Uncorrected, err = readCount(filepath.Join(d, "dimm_ue_count")); err != nil {
				return nil, err
			}
			mc.DIMMs = append(mc.DIMMs, dm)
		}
		out = append(out, mc)
	}
	return out, nil
}

func num(p string) int {
	n, _ := strconv.Atoi(strings.TrimLeftFunc(filepath.Base(p), unicode.IsLetter))
	return n
}

func readTrim(p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

func readCount(p string) (uint64, error) {
	b, err := os.ReadFile(p)
	if errors.Is(err, os.ErrNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("edac: %w", err)
	}
	n, err := strconv.ParseUint(strings.TrimSpace(string(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("edac: %s: %q is not a count", p, strings.TrimSpace(string(b)))
	}
	return n, nil
}

// JudgeEDAC names the DIMMs over the thresholds; errors the driver could
// not place on a DIMM are charged to the controller.
func JudgeEDAC(mcs []MemoryController, th Thresholds) []Finding {
	var out []Finding
	judge := func(dev string, ce, ue uint64) {
		if ue > th.MemMaxUncorrected {
			out = append(out, Finding{Check: "edac", Device: dev, Failure: true, Message: fmt.Sprintf("%d uncorrected memory errors since boot (at most %d accepted)", ue, th.MemMaxUncorrected)})
		}
		switch {
		case ce > th.MemMaxCorrected:
			out = append(out, Finding{Check: "edac", Device: dev, Failure: true, Message: fmt.Sprintf("%d corrected memory errors since boot (at most %d accepted)", ce, th.MemMaxCorrected)})
		case ce > 0:
			out = append(out, Finding{Check: "edac", Device: dev, Message: fmt.Sprintf("%d corrected memory errors since boot (at most %d accepted)", ce, th.MemMaxCorrected)})
		}
	}
	for _, mc := range mcs {
		if len(mc.DIMMs) == 0 {
			judge(mc.Name, mc.Corrected, mc.Uncorrected)
			continue
		}
		for _, d := range mc.DIMMs {
			judge(d.Label, d.Corrected, d.Uncorrected)
		}
		judge(mc.Name+" (errors not placed on a DIMM)", mc.CorrectedNoInfo, mc.UncorrectedNoInfo)
	}
	return out
}
