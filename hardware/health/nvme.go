package health

import (
	"encoding/binary"
	"fmt"
	"math/big"
)

// NVMeHealth is the SMART / Health Information log page (log id 02h,
// NVMe base specification, figure "SMART / Health Information Log Page").
type NVMeHealth struct {
	Device              string   `json:"device"`
	Serial              string   `json:"serial,omitempty"`
	CriticalWarning     uint8    `json:"critical_warning"`
	CriticalWarnings    []string `json:"critical_warnings,omitempty"`
	TemperatureC        int      `json:"temperature_c"`
	AvailableSpare      uint8    `json:"available_spare_percent"`
	SpareThreshold      uint8    `json:"available_spare_threshold_percent"`
	PercentageUsed      uint8    `json:"percentage_used"`
	DataUnitsWrittenTB  float64  `json:"data_written_tb"`
	PowerOnHours        uint64   `json:"power_on_hours"`
	UnsafeShutdowns     uint64   `json:"unsafe_shutdowns"`
	MediaErrors         uint64   `json:"media_errors"`
	ErrorLogEntries     uint64   `json:"error_log_entries"`
	CriticalTempMinutes uint32   `json:"critical_temperature_minutes"`
}

var nvmeWarningBits = []string{
	"available spare below threshold",
	"temperature outside its limits",
	"reliability degraded by media or internal errors",
	"media placed in read-only mode",
	"volatile memory backup device failed",
	"persistent memory region read-only or unreliable",
}

// ParseNVMeSMART decodes the 512-byte log page.
func ParseNVMeSMART(b []byte) (NVMeHealth, error) {
	if len(b) < 512 {
		return NVMeHealth{}, fmt.Errorf("NVMe SMART log is %d bytes, want 512", len(b))
	}
	h := NVMeHealth{
		CriticalWarning: b[0],
		AvailableSpare:  b[3],
		SpareThreshold:  b[4],
		PercentageUsed:  b[5],
	}
	if k := binary.LittleEndian.Uint16(b[1:3]); k > 0 {
		h.TemperatureC = int(k) - 273
	}
	for i, name := range nvmeWarningBits {
		if b[0]&(1<<i) != 0 {
			h.CriticalWarnings = append(h.CriticalWarnings, name)
		}
	}
	// Data units are thousands of 512-byte units.
	written, _ := new(big.Float).SetInt(le128(b[48:64])).Float64()
	h.DataUnitsWrittenTB = written * 512000 / 1e12
	h.PowerOnHours = sat64(b[128:144])
	h.UnsafeShutdowns = sat64(b[144:160])
	h.MediaErrors = sat64(b[160:176])
	h.ErrorLogEntries = sat64(b[176:192])
	h.CriticalTempMinutes = binary.LittleEndian.Uint32(b[196:200])
	return h, nil
}

// le128 reads a 16-byte little-endian counter.
func le128(b []byte) *big.Int {
	be := make([]byte, 16)
	for i := range 16 {
		be[15-i] = b[i]
	}
	return new(big.Int).SetBytes(be)
}

// sat64 reads a 128-bit counter, saturating at the largest uint64: no
// drive counts that far, and a garbage page must not wrap to a small count.
func sat64(b []byte) uint64 {
	if binary.LittleEndian.Uint64(b[8:16]) != 0 {
		return ^uint64(0)
	}
	return binary.LittleEndian.Uint64(b[0:8])
}

// Judge turns a reading into findings.
func (h NVMeHealth) Judge(th Thresholds) []Finding {
	dev := h.Device
	if h.Serial != "" {
		dev += " (serial " + h.Serial + ")"
	}
	var out []Finding
	for _, w := range h.CriticalWarnings {
		out = append(out, Finding{Check: "nvme", Device: dev, Message: "critical warning: " + w, Failure: true})
	}
	if h.MediaErrors > th.NVMeMaxMediaErrors {
		out = append(out, Finding{Check: "nvme", Device: dev, Failure: true,
			Message: fmt.Sprintf("%d media errors (at most %d accepted)", h.MediaErrors, th.NVMeMaxMediaErrors)})
	}
	if uint64(h.PercentageUsed) > th.NVMeMaxPercentUsed {
		out = append(out, Finding{Check: "nvme", Device: dev, Failure: true,
			Message: fmt.Sprintf("%d%% of its rated endurance used (at most %d%% accepted)", h.PercentageUsed, th.NVMeMaxPercentUsed)})
	}
	return out
}
