package verify

import "github.com/anvil-metal/anvil/protocol"

// Memory tolerances. properties.memory_mb is what inspection read from
// the memory blocks the kernel brought online (/sys/devices/system/memory),
// which counts whole blocks (128 MiB on x86, up to 2 GiB on large
// machines) and so matches the installed DIMMs to within a block: a 1%
// margin, at least one 128 MiB block, absorbs the rounding and nothing
// else. The smallest DIMM sold for servers (4 GiB) is above that margin on
// any machine below 400 GiB, so a lost DIMM fails. When the memory blocks
// are not readable, the kernel's MemTotal is all there is: it excludes the
// kernel's own code and data, the page structures (64 bytes per 4 KiB page,
// 1.6%), the crash kernel reservation and firmware-reserved ranges, which
// together take 2–4% on common servers, so the margin there is 5%, at least
// 256 MiB — coarse, and the result says which basis was used.
const (
	physicalMarginPercent = 1
	physicalMarginMinMB   = 128
	usableMarginPercent   = 5
	usableMarginMinMB     = 256
)

// MemoryCheck is how memory was compared.
type MemoryCheck struct {
	ExpectedMB uint64 `json:"expected_mb"`
	SeenMB     uint64 `json:"seen_mb"`
	// Basis is "online memory blocks" or "MemTotal".
	Basis    string `json:"basis"`
	MarginMB uint64 `json:"margin_mb"`
	ShortMB  uint64 `json:"short_mb"`
}

func compareMemory(expectedMB uint64, m protocol.Memory) MemoryCheck {
	c := MemoryCheck{ExpectedMB: expectedMB, SeenMB: m.PhysicalMB, Basis: "online memory blocks"}
	pct, floor := uint64(physicalMarginPercent), uint64(physicalMarginMinMB)
	if m.PhysicalMB == 0 {
		c.SeenMB, c.Basis = m.Total>>20, "MemTotal"
		pct, floor = usableMarginPercent, usableMarginMinMB
	}
	c.MarginMB = max(expectedMB*pct/100, floor)
	if c.SeenMB < expectedMB {
		c.ShortMB = expectedMB - c.SeenMB
	}
	return c
}
