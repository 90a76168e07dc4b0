package health

import (
	"encoding/binary"
	"fmt"
)

// ATA SMART attribute ids the check reads (the de-facto meanings every
// vendor uses; smartctl's drive database names them the same).
const (
	attrReallocated   = 5
	attrPowerOnHours  = 9
	attrTemperature   = 194
	attrPending       = 197
	attrUncorrectable = 198
)

// ATAAttribute is one entry of the SMART READ DATA attribute table.
type ATAAttribute struct {
	ID    uint8  `json:"id"`
	Value uint8  `json:"value"`
	Worst uint8  `json:"worst"`
	Raw   uint64 `json:"raw"`
}

// ATAHealth is a drive's SMART READ DATA page, with the counters the
// check judges pulled out.
type ATAHealth struct {
	Device string `json:"device"`
	Serial string `json:"serial,omitempty"`
	// Sectors is the disk's size in 512-byte sectors when known: no
	// sector count can be larger (see Judge).
	Sectors       uint64         `json:"-"`
	Reallocated   *uint64        `json:"reallocated_sectors,omitempty"`
	Pending       *uint64        `json:"pending_sectors,omitempty"`
	Uncorrectable *uint64        `json:"offline_uncorrectable,omitempty"`
	PowerOnHours  *uint64        `json:"power_on_hours,omitempty"`
	TemperatureC  *uint64        `json:"temperature_c,omitempty"`
	Attributes    []ATAAttribute `json:"attributes"`
}

// ParseATASMART decodes the 512-byte SMART READ DATA sector: a revision
// word, then 30 twelve-byte attribute entries (id, flags, value, worst,
// six raw bytes, reserved), then a checksum byte making the sector sum to
// zero.
func ParseATASMART(b []byte) (ATAHealth, error) {
	if len(b) < 512 {
		return ATAHealth{}, fmt.Errorf("SMART data is %d bytes, want 512", len(b))
	}
	var sum byte
	for _, c := range b[:512] {
		sum += c
	}
	if sum != 0 {
		return ATAHealth{}, fmt.Errorf("SMART data checksum is wrong (sector sums to 0x%02x)", sum)
	}
	h := ATAHealth{Attributes: []ATAAttribute{}}
	for i := range 30 {
		e := b[2+12*i : 2+12*(i+1)]
		if e[0] == 0 {
			continue
		}
		raw := uint64(binary.LittleEndian.Uint32(e[5:9])) | uint64(binary.LittleEndian.Uint16(e[9:11]))<<32
		a := ATAAttribute{ID: e[0], Value: e[3], Worst: e[4], Raw: raw}
		h.Attributes = append(h.Attributes, a)
		v := a.Raw
		switch a.ID {
		case attrReallocated:
			h.Reallocated = &v
		case attrPending:
			h.Pending = &v
		case attrUncorrectable:
			h.Uncorrectable = &v
		case attrPowerOnHours:
			v &= 0xFFFFFFFF // some vendors keep minutes in the upper bytes
			h.PowerOnHours = &v
		case attrTemperature:
			v &= 0xFF // the other bytes are min/max on most drives
			h.TemperatureC = &v
		}
	}
	return h, nil
}

// Judge turns a reading into findings.
func (h ATAHealth) Judge(th Thresholds) []Finding {
	dev := h.Device
	if h.Serial != "" {
		dev += " (serial " + h.Serial + ")"
	}
	// Some drives keep vendor data in these raw fields, not a count: the
	// Fujitsu MHY2xxxBH captures in testdata hold 0x07d000000000 in
	// attribute 5 and what looks like counters packed in 197 and 198.
	// smartctl and libatasmart know such models from their drive
	// databases; we have none, so a "count" that cannot be one (more than
	// the disk's sectors, or more than 2^32: 2 TiB of bad sectors) is
	// reported and not judged, as libatasmart's verify_sectors does.
	limit := uint64(0xFFFFFFFF)
	if h.Sectors > 0 && h.Sectors < limit {
		limit = h.Sectors
	}
	var out []Finding
	check := func(v *uint64, id int, max uint64, what string) {
		switch {
		case v == nil:
		case *v > limit:
			out = append(out, Finding{Check: "ata", Device: dev, Message: fmt.Sprintf("attribute %d raw value 0x%012x is not a count of %s on this drive (vendor-specific); not judged", id, *v, what)})
		case *v > max:
			out = append(out, Finding{Check: "ata", Device: dev, Failure: true, Message: fmt.Sprintf("%d %s (at most %d accepted)", *v, what, max)})
		}
	}
	check(h.Reallocated, attrReallocated, th.ATAMaxReallocated, "reallocated sectors")
	check(h.Pending, attrPending, th.ATAMaxPending, "pending sectors")
	check(h.Uncorrectable, attrUncorrectable, th.ATAMaxUncorrectable, "offline uncorrectable sectors")
	return out
}
