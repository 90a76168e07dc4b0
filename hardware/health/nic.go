package health

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
)

// NICLink is one physical NIC's link: the speed it runs at and the
// fastest both it and its link partner say they can do.
type NICLink struct {
	Interface string `json:"interface"`
	MAC       string `json:"mac_address,omitempty"`
	SpeedMbps int    `json:"speed_mbps"` // 0 when the link is down or the speed unknown
	// MaxMbps is the fastest mode the NIC supports, PartnerMaxMbps the
	// fastest its link partner advertised (0: not reported; most NICs
	// report the partner only with autonegotiation on).
	MaxMbps        int      `json:"max_mbps,omitempty"`
	PartnerMaxMbps int      `json:"partner_max_mbps,omitempty"`
	Supported      []string `json:"supported_modes,omitempty"`
	Error          string   `json:"error,omitempty"` // why the link modes could not be read
}

// LinkReader reads a NIC's ethtool link settings (ETHTOOL_GLINKSETTINGS)
// as the kernel returns them. The real one is an ioctl
// (ethtool_linux.go); tests give captured buffers.
type LinkReader interface {
	LinkSettings(iface string) ([]byte, error)
}

// LinkSettings is the part of struct ethtool_link_settings the check
// needs: the current speed and the three link mode masks.
type LinkSettings struct {
	SpeedMbps   int // 0 when unknown (the kernel's SPEED_UNKNOWN, -1)
	Supported   []uint32
	Advertising []uint32
	Partner     []uint32
}

// linkSettingsHeader is the fixed part of struct ethtool_link_settings
// (linux/ethtool.h): cmd, speed, eleven one-byte fields, 28 reserved
// bytes; the masks follow, link_mode_masks_nwords 32-bit words each.
const (
	linkSettingsHeader = 48
	nwordsOffset       = 15
	// maxLinkModeWords bounds the masks: the kernel defines under 128
	// link modes (4 words); 127 (the s8 field's maximum) would be absurd.
	maxLinkModeWords = 16
)

// ParseLinkSettings decodes the buffer GLINKSETTINGS filled.
func ParseLinkSettings(b []byte) (LinkSettings, error) {
	if len(b) < linkSettingsHeader {
		return LinkSettings{}, fmt.Errorf("ethtool link settings: %d bytes, want at least %d", len(b), linkSettingsHeader)
	}
	n := int(int8(b[nwordsOffset]))
	if n <= 0 || n > maxLinkModeWords {
		return LinkSettings{}, fmt.Errorf("ethtool link settings: %d mask words", n)
	}
	if len(b) < linkSettingsHeader+3*4*n {
		return LinkSettings{}, fmt.Errorf("ethtool link settings: %d bytes, too short for 3 masks of %d words", len(b), n)
	}
	var s LinkSettings
	if sp := binary.LittleEndian.Uint32(b[4:8]); sp != 0xFFFFFFFF && sp < 10_000_000 {
		s.SpeedMbps = int(sp)
	}
	words := func(i int) []uint32 {
		out := make([]uint32, n)
		for w := range out {
			off := linkSettingsHeader + (i*n+w)*4
			out[w] = binary.LittleEndian.Uint32(b[off : off+4])
		}
		return out
	}
	s.Supported, s.Advertising, s.Partner = words(0), words(1), words(2)
	return s, nil
}

// MaxModeSpeed is the fastest speed a link mode mask names, with the
// modes' names; modes the table does not know (added by kernels newer
// than it) are left out, so the maximum errs low and a check based on it
// never fails a NIC that is fine.
func MaxModeSpeed(mask []uint32) (int, []string) {
	var modes []linkMode
	for w, word := range mask {
		for bit := range 32 {
			if word&(1<<bit) == 0 {
				continue
			}
			m, ok := linkModeOf(w*32 + bit)
			if !ok {
				continue
			}
			modes = append(modes, m)
		}
	}
	// slowest first, as ethtool prints them
	sort.SliceStable(modes, func(i, j int) bool { return modes[i].mbps < modes[j].mbps })
	max, names := 0, []string(nil)
	for _, m := range modes {
		names, max = append(names, m.name), m.mbps
	}
	return max, names
}

// ReadNICLinks reads every physical NIC under root/sys/class/net (those
// with a device: not loopback, bridges, bonds or veths) and, through lr,
// its link modes. lr nil reads the speeds only.
func ReadNICLinks(root string, lr LinkReader) ([]NICLink, error) {
	dir := filepath.Join(root, "sys", "class", "net")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("nic: %w", err)
	}
	var out []NICLink
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		if _, err := os.Stat(filepath.Join(p, "device")); err != nil {
			continue
		}
		l := NICLink{Interface: e.Name(), MAC: readTrim(filepath.Join(p, "address"))}
		// speed reads -1 or fails (EINVAL) when the link is down.
		if sp, err := strconv.Atoi(readTrim(filepath.Join(p, "speed"))); err == nil && sp > 0 && readTrim(filepath.Join(p, "carrier")) == "1" {
			l.SpeedMbps = sp
		}
		if lr != nil {
			b, err := lr.LinkSettings(e.Name())
			var s LinkSettings
			if err == nil {
				s, err = ParseLinkSettings(b)
			}
			if err != nil {
				l.Error = err.Error()
			} else {
				l.MaxMbps, l.Supported = MaxModeSpeed(s.Supported)
				l.PartnerMaxMbps, _ = MaxModeSpeed(s.Partner)
			}
		}
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Interface < out[j].Interface })
	return out, nil
}

// JudgeNICs reports links slower than both ends can do: a NIC at 1 Gb/s
// whose partner also advertised 10 Gb/s has a bad cable, optic or port,
// and fails. When the partner did not advertise its modes (autonegotiation
// off, or a NIC that does not report it) the switch port may be the
// limit, so a link below the NIC's own maximum is a warning.
func JudgeNICs(links []NICLink) []Finding {
	var out []Finding
	for _, l := range links {
		if l.SpeedMbps == 0 || l.MaxMbps == 0 {
			continue // link down, or capability unknown: nothing to compare
		}
		dev := l.Interface
		if l.MAC != "" {
			dev += " (" + l.MAC + ")"
		}
		switch {
		case l.PartnerMaxMbps > 0 && l.SpeedMbps < min(l.MaxMbps, l.PartnerMaxMbps):
			out = append(out, Finding{Check: "nic", Device: dev, Failure: true,
				Message: fmt.Sprintf("link runs at %d Mb/s, both ends can do %d Mb/s", l.SpeedMbps, min(l.MaxMbps, l.PartnerMaxMbps))})
		case l.PartnerMaxMbps == 0 && l.SpeedMbps < l.MaxMbps:
			out = append(out, Finding{Check: "nic", Device: dev,
				Message: fmt.Sprintf("link runs at %d Mb/s, the NIC can do %d Mb/s (the link partner did not say what it can do)", l.SpeedMbps, l.MaxMbps)})
		}
	}
	return out
}

// linkMode is one ethtool link mode: its speed and ethtool's name.
type linkMode struct {
	mbps int
	name string
}

// linkModeOf maps enum ethtool_link_mode_bit_indices (linux/ethtool.h,
// Debian's kernel headers) to speeds; the bits that are not speeds
// (Autoneg, TP, Pause, FEC...) are not known.
func linkModeOf(bit int) (linkMode, bool) {
	switch bit {
	case 0:
		return linkMode{10, "10baseT/Half"}, true
	case 1:
		return linkMode{10, "10baseT/Full"}, true
	case 2:
		return linkMode{100, "100baseT/Half"}, true
	case 3:
		return linkMode{100, "100baseT/Full"}, true
	case 4:
		return linkMode{1000, "1000baseT/Half"}, true
	case 5:
		return linkMode{1000, "1000baseT/Full"}, true
	case 12:
		return linkMode{10000, "10000baseT/Full"}, true
	case 15:
		return linkMode{2500, "2500baseX/Full"}, true
	case 17:
		return linkMode{1000, "1000baseKX/Full"}, true
	case 18:
		return linkMode{10000, "10000baseKX4/Full"}, true
	case 19:
		return linkMode{10000, "10000baseKR/Full"}, true
	case 21:
		return linkMode{20000, "20000baseMLD2/Full"}, true
	case 22:
		return linkMode{20000, "20000baseKR2/Full"}, true
	case 23:
		return linkMode{40000, "40000baseKR4/Full"}, true
	case 24:
		return linkMode{40000, "40000baseCR4/Full"}, true
	case 25:
		return linkMode{40000, "40000baseSR4/Full"}, true
	case 26:
		return linkMode{40000, "40000baseLR4/Full"}, true
	case 27:
		return linkMode{56000, "56000baseKR4/Full"}, true
	case 28:
		return linkMode{56000, "56000baseCR4/Full"}, true
	case 29:
		return linkMode{56000, "56000baseSR4/Full"}, true
	case 30:
		return linkMode{56000, "56000baseLR4/Full"}, true
	case 31:
		return linkMode{25000, "25000baseCR/Full"}, true
	case 32:
		return linkMode{25000, "25000baseKR/Full"}, true
	case 33:
		return linkMode{25000, "25000baseSR/Full"}, true
	case 34:
		return linkMode{50000, "50000baseCR2/Full"}, true
	case 35:
		return linkMode{50000, "50000baseKR2/Full"}, true
	case 36:
		return linkMode{100000, "100000baseKR4/Full"}, true
	case 37:
		return linkMode{100000, "100000baseSR4/Full"}, true
	case 38:
		return linkMode{100000, "100000baseCR4/Full"}, true
	case 39:
		return linkMode{100000, "100000baseLR4_ER4/Full"}, true
	case 40:
		return linkMode{50000, "50000baseSR2/Full"}, true
	case 41:
		return linkMode{1000, "1000baseX/Full"}, true
	case 42:
		return linkMode{10000, "10000baseCR/Full"}, true
	case 43:
		return linkMode{10000, "10000baseSR/Full"}, true
	case 44:
		return linkMode{10000, "10000baseLR/Full"}, true
	case 45:
		return linkMode{10000, "10000baseLRM/Full"}, true
	case 46:
		return linkMode{10000, "10000baseER/Full"}, true
	case 47:
		return linkMode{2500, "2500baseT/Full"}, true
	case 48:
		return linkMode{5000, "5000baseT/Full"}, true
	case 52:
		return linkMode{50000, "50000baseKR/Full"}, true
	case 53:
		return linkMode{50000, "50000baseSR/Full"}, true
	case 54:
		return linkMode{50000, "50000baseCR/Full"}, true
	case 55:
		return linkMode{50000, "50000baseLR_ER_FR/Full"}, true
	case 56:
		return linkMode{50000, "50000baseDR/Full"}, true
	case 57:
		return linkMode{100000, "100000baseKR2/Full"}, true
	case 58:
		return linkMode{100000, "100000baseSR2/Full"}, true
	case 59:
		return linkMode{100000, "100000baseCR2/Full"}, true
	case 60:
		return linkMode{100000, "100000baseLR2_ER2_FR2/Full"}, true
	case 61:
		return linkMode{100000, "100000baseDR2/Full"}, true
	case 62:
		return linkMode{200000, "200000baseKR4/Full"}, true
	case 63:
		return linkMode{200000, "200000baseSR4/Full"}, true
	case 64:
		return linkMode{200000, "200000baseLR4_ER4_FR4/Full"}, true
	case 65:
		return linkMode{200000, "200000baseDR4/Full"}, true
	case 66:
		return linkMode{200000, "200000baseCR4/Full"}, true
	case 67:
		return linkMode{100, "100baseT1/Full"}, true
	case 68:
		return linkMode{1000, "1000baseT1/Full"}, true
	case 69:
		return linkMode{400000, "400000baseKR8/Full"}, true
	case 70:
		return linkMode{400000, "400000baseSR8/Full"}, true
	case 71:
		return linkMode{400000, "400000baseLR8_ER8_FR8/Full"}, true
	case 72:
		return linkMode{400000, "400000baseDR8/Full"}, true
	case 73:
		return linkMode{400000, "400000baseCR8/Full"}, true
	case 75:
		return linkMode{100000, "100000baseKR/Full"}, true
	case 76:
		return linkMode{100000, "100000baseSR/Full"}, true
	case 77:
		return linkMode{100000, "100000baseLR_ER_FR/Full"}, true
	case 78:
		return linkMode{100000, "100000baseCR/Full"}, true
	case 79:
		return linkMode{100000, "100000baseDR/Full"}, true
	case 80:
		return linkMode{200000, "200000baseKR2/Full"}, true
	case 81:
		return linkMode{200000, "200000baseSR2/Full"}, true
	case 82:
		return linkMode{200000, "200000baseLR2_ER2_FR2/Full"}, true
	case 83:
		return linkMode{200000, "200000baseDR2/Full"}, true
	case 84:
		return linkMode{200000, "200000baseCR2/Full"}, true
	case 85:
		return linkMode{400000, "400000baseKR4/Full"}, true
	case 86:
		return linkMode{400000, "400000baseSR4/Full"}, true
	case 87:
		return linkMode{400000, "400000baseLR4_ER4_FR4/Full"}, true
	case 88:
		return linkMode{400000, "400000baseDR4/Full"}, true
	case 89:
		return linkMode{400000, "400000baseCR4/Full"}, true
	case 90:
		return linkMode{100, "100baseFX/Half"}, true
	case 91:
		return linkMode{100, "100baseFX/Full"}, true
	case 92:
		return linkMode{10, "10baseT1L/Full"}, true
	}
	return linkMode{}, false
}
