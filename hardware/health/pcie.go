package health

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// PCIeLink is one PCIe function's link: what it trained to and what both
// ends of the link can do.
type PCIeLink struct {
	Address      string  `json:"address"`
	Class        string  `json:"class"`
	SpeedGTs     float64 `json:"speed_gts"`
	Width        int     `json:"width"`
	MaxSpeedGTs  float64 `json:"max_speed_gts"` // the lower of the device's and its upstream port's
	MaxWidth     int     `json:"max_width"`
	UpstreamPort string  `json:"upstream_port,omitempty"`
}

var pciAddr = regexp.MustCompile(`^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]$`)

// ReadPCIeLinks reads the link attributes of every PCIe endpoint under
// root/sys/bus/pci/devices. Bridges are skipped: a port's maximum is what
// the slot could take, not what the card in it can do, so the link is
// judged at the endpoint against the lower of its own and its port's
// capability. Functions without link attributes (conventional PCI, VFs,
// most emulated devices) are skipped.
func ReadPCIeLinks(root string) ([]PCIeLink, error) {
	dir := filepath.Join(root, "sys", "bus", "pci", "devices")
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("pcie: %w", err)
	}
	var out []PCIeLink
	for _, e := range entries {
		p := filepath.Join(dir, e.Name())
		class := strings.TrimPrefix(readTrim(filepath.Join(p, "class")), "0x")
		if strings.HasPrefix(class, "0604") {
			continue
		}
		l, ok := readLink(p)
		if !ok {
			continue
		}
		l.Address, l.Class = e.Name(), class
		if real, err := filepath.EvalSymlinks(p); err == nil {
			if up := filepath.Dir(real); pciAddr.MatchString(filepath.Base(up)) {
				if ul, ok := readLink(up); ok {
					l.UpstreamPort = filepath.Base(up)
					l.MaxSpeedGTs = min(l.MaxSpeedGTs, ul.MaxSpeedGTs)
					l.MaxWidth = min(l.MaxWidth, ul.MaxWidth)
				}
			}
		}
		out = append(out, l)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Address < out[j].Address })
	return out, nil
}

func readLink(p string) (PCIeLink, bool) {
	var l PCIeLink
	var ok1, ok2, ok3, ok4 bool
	l.SpeedGTs, ok1 = ParseLinkSpeed(readTrim(filepath.Join(p, "current_link_speed")))
	l.MaxSpeedGTs, ok2 = ParseLinkSpeed(readTrim(filepath.Join(p, "max_link_speed")))
	l.Width, ok3 = parseWidth(readTrim(filepath.Join(p, "current_link_width")))
	l.MaxWidth, ok4 = parseWidth(readTrim(filepath.Join(p, "max_link_width")))
	return l, ok1 && ok2 && ok3 && ok4 && l.MaxSpeedGTs > 0 && l.MaxWidth > 0
}

// ParseLinkSpeed reads sysfs's "8.0 GT/s PCIe" (older kernels: "8 GT/s",
// "2.5 GT/s"); "Unknown" is not a speed.
func ParseLinkSpeed(s string) (float64, bool) {
	f := strings.Fields(s)
	if len(f) < 2 || f[1] != "GT/s" {
		return 0, false
	}
	v, err := strconv.ParseFloat(f[0], 64)
	return v, err == nil && v > 0
}

func parseWidth(s string) (int, bool) {
	n, err := strconv.Atoi(strings.TrimPrefix(strings.TrimSpace(s), "x"))
	return n, err == nil && n >= 0
}

// JudgePCIe reports links narrower or slower than both ends allow. A
// link that trained narrower fails (a card half-seated, a damaged lane);
// a slower link fails too, except on display controllers, which drop
// their link speed when idle to save power.
func JudgePCIe(links []PCIeLink) []Finding {
	var out []Finding
	for _, l := range links {
		if l.Width == 0 {
			continue // link down: a port with nothing trained, not a degraded one
		}
		if l.Width < l.MaxWidth {
			out = append(out, Finding{Check: "pcie", Device: l.Address, Failure: true,
				Message: fmt.Sprintf("link trained at x%d, both ends can do x%d", l.Width, l.MaxWidth)})
		}
		if l.SpeedGTs < l.MaxSpeedGTs {
			out = append(out, Finding{Check: "pcie", Device: l.Address, Failure: !strings.HasPrefix(l.Class, "03"),
				Message: fmt.Sprintf("link trained at %g GT/s, both ends can do %g GT/s", l.SpeedGTs, l.MaxSpeedGTs)})
		}
	}
	return out
}
