package burnin

import (
	"testing"
)

// The step arguments arrive over the network (the controller's command,
// or a stock Ironic's driver_info): no input may panic.
func FuzzArgs(f *testing.F) {
	for _, s := range []string{"98%", "4G", "", "1e309", "-0", `{"role": "writer", "partner": "x"}`, `{"role": 5}`, "[1]"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		_, _ = ParseBytes(s, 1<<40)
		_, _ = CPUArgs(map[string]any{ArgCPUTimeout: s, ArgCPUCount: s})
		_, _ = MemoryArgs(map[string]any{ArgVMBytes: s, ArgVMTimeout: s}, 1<<30)
		_, _ = DiskArgs(map[string]any{ArgDiskLoops: s, ArgDiskRuntime: s})
		if o, err := NetworkArgs(map[string]any{ArgNetworkConfig: s}); err == nil && (o.Partner == "" || (o.Role != RoleWriter && o.Role != RoleReader)) {
			t.Errorf("accepted %q as %+v", s, o)
		}
	})
}

// SMBIOS structures come from the firmware: truncated or lying lengths
// must not panic.
func FuzzSMBIOS(f *testing.F) {
	f.Add(type20(1, 2, 0, 100))
	f.Add(type17(2, "DIMM_A1", "BANK 0"))
	f.Add([]byte{20, 0xff, 0, 0})
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _, _, _ = mappedRange(b)
		if len(b) >= 0x12 {
			_ = locator(b)
		}
	})
}
