package image

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestModuleFirmwareMatchesModinfo reads the firmware requests of the
// default classes' modules of Debian's generic kernel (fetched into the
// image cache like make image does) and compares them, module by module,
// with what kmod's modinfo -F firmware prints.
func TestModuleFirmwareMatchesModinfo(t *testing.T) {
	if testing.Short() {
		t.Skip("downloads Debian's kernel package")
	}
	for _, bin := range []string{"apt-get", "apt-cache", "dpkg", "depmod", "modinfo"} {
		if _, err := exec.LookPath(bin); err != nil {
			t.Skipf("%s not installed: %v", bin, err)
		}
	}
	ctx := context.Background()
	cache, err := filepath.Abs(filepath.Join("..", "out", "image-cache"))
	if err != nil {
		t.Fatal(err)
	}
	deb := Debian{CacheDir: cache, Log: slog.New(slog.NewTextHandler(t.Output(), nil))}
	plan, err := deb.Resolve(ctx, DefaultKernelPackage, nil, nil)
	if err != nil {
		t.Skipf("apt: %v", err)
	}
	k, err := deb.FetchKernel(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	set, err := ResolveModules(k.ModulesDir(), k.Release, ModuleSelection{Classes: DefaultClasses()})
	if err != nil {
		t.Fatal(err)
	}
	// A firmware tree holding one of r8169's files.
	fwDir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(fwDir, "rtl_nic"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fwDir, "rtl_nic", "rtl8168h-2.fw"), []byte("firmware"), 0o644); err != nil {
		t.Fatal(err)
	}
	fw, err := ModuleFirmware(k.ModulesDir(), set.Files, fwDir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string][]string{}
	for _, f := range fw {
		got[f.Module] = append(got[f.Module], f.File)
		if f.Present != (f.File == "rtl_nic/rtl8168h-2.fw") {
			t.Errorf("%s: present %v", f.File, f.Present)
		}
		if f.Present && f.Bytes != 8 {
			t.Errorf("%s: %d bytes, want 8", f.File, f.Bytes)
		}
	}
	for _, ko := range set.Files {
		out, err := exec.Command("modinfo", "-F", "firmware", filepath.Join(k.ModulesDir(), ko)).Output()
		if err != nil {
			t.Fatalf("modinfo %s: %v", ko, err)
		}
		want := strings.Fields(string(out))
		slices.Sort(want)
		want = slices.Compact(want)
		have := got[normalizeModule(ko)]
		slices.Sort(have)
		if !slices.Equal(have, want) {
			t.Errorf("%s: firmware %v, modinfo says %v", ko, have, want)
		}
	}
	present, absent, lacking := FirmwareSummary(fw)
	t.Logf("%d modules, %d firmware files asked for (%d present), modules lacking firmware: %v", len(set.Files), present+absent, present, lacking)
	for _, m := range []string{"bnx2x", "tg3"} {
		if !slices.Contains(lacking, m) {
			t.Errorf("%s should lack firmware in a build without it; lacking = %v", m, lacking)
		}
	}
}
