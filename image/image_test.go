package image

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/u-root/mkuimage/cpio"
)

// moduleTree copies the cut-down modules.dep/modules.builtin fixture to a
// temp dir, with a modules.alias and a small .ko file for every module.
func moduleTree(t *testing.T) string {
	t.Helper()
	src := filepath.Join("..", "testdata", "image", "modules")
	dir := t.TempDir()
	for _, f := range []string{"modules.dep", "modules.builtin"} {
		b, err := os.ReadFile(filepath.Join(src, f))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, f), b, 0o644); err != nil {
			t.Fatal(err)
		}
		for _, line := range strings.Split(string(b), "\n") {
			ko, _, _ := strings.Cut(line, ":")
			if ko == "" || f != "modules.dep" {
				continue
			}
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, ko)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, ko), make([]byte, 1000), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	alias := "alias virtio:d00000001v* virtio_net\nalias pci:v00001AF4d*sv*sd*bc*sc*i* virtio_pci\nalias scsi:t-0x00* sd_mod\nalias virtio:d00000004v* virtio_rng\n"
	if err := os.WriteFile(filepath.Join(dir, "modules.alias"), []byte(alias), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestResolveModules(t *testing.T) {
	dir := moduleTree(t)
	classes := []ModuleClass{
		{Name: "net", Include: []string{"drivers/net/", "drivers/virtio/virtio_pci"}},
		{Name: "md", Include: []string{"drivers/md/"}, Load: []string{"md_mod", "raid1"}},
		{Name: "rng", Include: []string{"drivers/char/hw_random/virtio-rng"}},
	}
	set, err := ResolveModules(dir, "6.1.0-test", ModuleSelection{
		Classes: classes,
		Add:     []string{"nvme", "e1000e", "sd-mod"},
		Remove:  []string{"net_failover"},
	})
	if err != nil {
		t.Fatalf("ResolveModules() = %v", err)
	}
	if want := []string{"md_mod", "raid1"}; !reflect.DeepEqual(set.Load, want) {
		t.Errorf("Load = %v, want %v", set.Load, want)
	}
	if want := []string{"nvme"}; !reflect.DeepEqual(set.Builtin, want) {
		t.Errorf("Builtin = %v, want %v", set.Builtin, want)
	}
	if want := []string{"e1000e"}; !reflect.DeepEqual(set.Missing, want) {
		t.Errorf("Missing = %v, want %v", set.Missing, want)
	}
	// net_failover is removed as a class member but still comes in as
	// virtio_net's dependency: the closure is never broken.
	want := []string{
		"kernel/drivers/char/hw_random/virtio-rng.ko",
		"kernel/drivers/md/md-mod.ko",
		"kernel/drivers/md/raid1.ko",
		"kernel/drivers/net/net_failover.ko",
		"kernel/drivers/net/virtio_net.ko",
		"kernel/drivers/scsi/sd_mod.ko",
		"kernel/drivers/virtio/virtio.ko",
		"kernel/drivers/virtio/virtio_pci.ko",
		"kernel/drivers/virtio/virtio_pci_legacy_dev.ko",
		"kernel/drivers/virtio/virtio_pci_modern_dev.ko",
		"kernel/drivers/virtio/virtio_ring.ko",
		"kernel/net/core/failover.ko",
	}
	if !reflect.DeepEqual(set.Files, want) {
		t.Errorf("Files = %v, want %v", set.Files, want)
	}
	wantClasses := []ClassInfo{
		{Name: "net", Modules: 2, Files: 8, Bytes: 8000},
		{Name: "md", Modules: 2, Files: 2, Bytes: 2000},
		{Name: "rng", Modules: 1, Files: 3, Bytes: 3000},
		{Name: "added", Modules: 1, Files: 1, Bytes: 1000, Added: []string{"sd_mod"}},
	}
	if !reflect.DeepEqual(set.Classes, wantClasses) {
		t.Errorf("Classes = %+v, want %+v", set.Classes, wantClasses)
	}
	dep := string(set.Dep)
	if strings.Contains(dep, "nvme") {
		t.Errorf("modules.dep has a module nobody asked for:\n%s", dep)
	}
	if !strings.Contains(dep, "kernel/drivers/md/raid1.ko: kernel/drivers/md/md-mod.ko\n") {
		t.Errorf("modules.dep lost raid1's dependency:\n%s", dep)
	}
	if want := "alias virtio:d00000001v* virtio_net\nalias pci:v00001AF4d*sv*sd*bc*sc*i* virtio_pci\nalias scsi:t-0x00* sd_mod\nalias virtio:d00000004v* virtio_rng\n"; string(set.Alias) != want {
		t.Errorf("Alias = %q, want %q", set.Alias, want)
	}
	conf := string(set.LoadConf())
	for _, n := range set.Load {
		if !strings.Contains(conf, "\n"+n+"\n") {
			t.Errorf("LoadConf() has no line %q:\n%s", n, conf)
		}
	}
	// Without the sd_mod addition its alias is filtered out.
	set, err = ResolveModules(dir, "6.1.0-test", ModuleSelection{Classes: classes})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(set.Alias), "sd_mod") {
		t.Errorf("Alias keeps a module not in the image: %q", set.Alias)
	}
}

func TestDefaultClassesLeaveOut(t *testing.T) {
	has := func(p string) []string {
		var in []string
		for _, c := range DefaultClasses() {
			if c.has(p) {
				in = append(in, c.Name)
			}
		}
		return in
	}
	for p, want := range map[string][]string{
		"kernel/drivers/net/ethernet/intel/e1000e/e1000e.ko":          {"ethernet"},
		"kernel/drivers/net/ethernet/intel/igb/igb.ko":                {"ethernet"},
		"kernel/drivers/net/ethernet/mellanox/mlx5/core/mlx5_core.ko": {"ethernet"},
		"kernel/drivers/net/ethernet/realtek/r8169.ko":                {"ethernet"},
		"kernel/drivers/net/ethernet/realtek/8139too.ko":              nil,
		"kernel/drivers/net/ethernet/intel/e100.ko":                   nil,
		"kernel/drivers/net/ethernet/intel/e1000/e1000.ko":            {"ethernet"},
		"kernel/drivers/net/ethernet/intel/iavf/iavf.ko":              nil,
		"kernel/drivers/net/wireless/intel/iwlwifi/iwlwifi.ko":        nil,
		"kernel/drivers/scsi/megaraid/megaraid_sas.ko":                {"storage"},
		"kernel/drivers/scsi/mpt3sas/mpt3sas.ko":                      {"storage"},
		"kernel/drivers/scsi/sd_mod.ko":                               {"storage"},
		"kernel/drivers/scsi/sr_mod.ko":                               {"storage"},
		"kernel/drivers/scsi/st.ko":                                   nil,
		"kernel/drivers/scsi/lpfc/lpfc.ko":                            nil,
		"kernel/drivers/ata/ahci.ko":                                  {"storage"},
		"kernel/drivers/ata/pata_via.ko":                              nil,
		"kernel/drivers/md/raid456.ko":                                {"md"},
		"kernel/drivers/md/dm-crypt.ko":                               nil,
		"kernel/drivers/usb/storage/usb-storage.ko":                   {"usb"},
		"kernel/drivers/hid/usbhid/usbhid.ko":                         {"usb"},
		"kernel/drivers/hid/hid-logitech-dj.ko":                       nil,
		"kernel/sound/pci/hda/snd-hda-intel.ko":                       nil,
		"kernel/drivers/gpu/drm/i915/i915.ko":                         nil,
		"kernel/drivers/bluetooth/btusb.ko":                           nil,
	} {
		if got := has(p); !reflect.DeepEqual(got, want) {
			t.Errorf("%s is in classes %v, want %v", p, got, want)
		}
	}
}

func testArchive(t *testing.T) *Archive {
	t.Helper()
	src := filepath.Join(t.TempDir(), "agent")
	if err := os.WriteFile(src, []byte("binary"), 0o600); err != nil {
		t.Fatal(err)
	}
	a := NewArchive()
	a.AddBytes("lib/modules-load.d/anvil.conf", []byte("virtio_net\n"), 0o644)
	if err := a.AddFile("bin/anvil-agent", src, 0o755); err != nil {
		t.Fatal(err)
	}
	a.AddSymlink("bin/uinit", "anvil-agent")
	a.AddDir("tmp", 0o1777)
	a.Add(cpio.Record{ReaderAt: strings.NewReader("x"), Info: cpio.Info{Name: "etc/x", Mode: cpio.S_IFREG | 0o600, MTime: 12345, UID: 1000, Ino: 77}})
	a.AddBytes("etc/x", []byte("replaced"), 0o644) // later record wins
	return a
}

func TestArchiveReproducible(t *testing.T) {
	var one, two bytes.Buffer
	if err := testArchive(t).WriteGzip(&one); err != nil {
		t.Fatalf("WriteGzip() = %v", err)
	}
	if err := testArchive(t).WriteGzip(&two); err != nil {
		t.Fatalf("WriteGzip() = %v", err)
	}
	if !bytes.Equal(one.Bytes(), two.Bytes()) {
		t.Fatalf("two writes of the same archive differ")
	}

	zr, err := gzip.NewReader(&one)
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" {
		t.Errorf("gzip header has mtime %v name %q, want neither", zr.ModTime, zr.Name)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatal(err)
	}
	recs, err := cpio.ReadAllRecords(cpio.Newc.Reader(bytes.NewReader(raw)))
	if err != nil {
		t.Fatalf("read back: %v", err)
	}
	var names []string
	for _, r := range recs {
		names = append(names, r.Name)
		if r.MTime != 0 || r.UID != 0 || r.GID != 0 || r.Ino != 0 {
			t.Errorf("%s: mtime %d uid %d gid %d ino %d, want all 0", r.Name, r.MTime, r.UID, r.GID, r.Ino)
		}
		if r.Name == "etc/x" {
			b, _ := io.ReadAll(io.NewSectionReader(r, 0, int64(r.FileSize)))
			if string(b) != "replaced" {
				t.Errorf("etc/x = %q, want the later record's %q", b, "replaced")
			}
		}
		if r.Name == "tmp" && r.Mode&0o7777 != 0o1777 {
			t.Errorf("tmp mode %o, want 1777", r.Mode&0o7777)
		}
	}
	want := []string{"bin", "etc", "lib", "lib/modules-load.d", "tmp",
		"bin/anvil-agent", "bin/uinit", "etc/x", "lib/modules-load.d/anvil.conf"}
	if !reflect.DeepEqual(names, want) {
		t.Errorf("records = %v, want %v (directories first, then sorted)", names, want)
	}
}

func TestArchiveAddArchive(t *testing.T) {
	var raw bytes.Buffer
	if err := testArchive(t).Write(&raw); err != nil {
		t.Fatal(err)
	}
	b := NewArchive()
	if err := b.AddArchive(bytes.NewReader(raw.Bytes())); err != nil {
		t.Fatalf("AddArchive() = %v", err)
	}
	var again bytes.Buffer
	if err := b.Write(&again); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(raw.Bytes(), again.Bytes()) {
		t.Errorf("re-writing a read archive changed it")
	}
}

func TestConcat(t *testing.T) {
	dir := t.TempDir()
	a, b, out := filepath.Join(dir, "a"), filepath.Join(dir, "b"), filepath.Join(dir, "out")
	_ = os.WriteFile(a, []byte("base"), 0o644)
	_ = os.WriteFile(b, []byte("overlay"), 0o644)
	if err := Concat(out, a, b); err != nil {
		t.Fatalf("Concat() = %v", err)
	}
	if got, _ := os.ReadFile(out); string(got) != "baseoverlay" {
		t.Errorf("Concat() wrote %q, want %q", got, "baseoverlay")
	}
}

func TestParseApt(t *testing.T) {
	policy := `linux-image-cloud-amd64:
  Installed: (none)
  Candidate: 6.1.192-2
  Version table:
     6.1.192-2 500
        500 http://deb.debian.org/debian-security bookworm-security/main amd64 Packages
mdadm:
  Installed: (none)
  Candidate: 4.2-5
nosuch:
  Installed: (none)
  Candidate: (none)
`
	got := parsePolicy(policy)
	want := map[string]string{"linux-image-cloud-amd64": "6.1.192-2", "mdadm": "4.2-5"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("parsePolicy() = %v, want %v", got, want)
	}
	depends := `linux-image-cloud-amd64
  Depends: linux-image-6.1.0-56-cloud-amd64
mdadm
  PreDepends: init-system-helpers
 |Depends: debconf
  Depends: <debconf-2.0>
  Depends: libc6
  Depends: libudev1
  Depends: udev
`
	gotDeps := parseDepends(depends)
	wantDeps := map[string][]string{
		"linux-image-cloud-amd64": {"linux-image-6.1.0-56-cloud-amd64"},
		"mdadm":                   {"init-system-helpers", "debconf", "libc6", "libudev1", "udev"},
	}
	if !reflect.DeepEqual(gotDeps, wantDeps) {
		t.Errorf("parseDepends() = %v, want %v", gotDeps, wantDeps)
	}
}

// A module whose dependency has a soft dependency on an alias
// (raid456 -> libcrc32c -> "crc32c"): the image gets the modules behind
// the alias, and modules-load.d loads them first, since u-root's init
// knows no softdeps.
func TestResolveModulesSoftdeps(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{
		"modules.dep": "kernel/lib/libcrc32c.ko:\nkernel/drivers/md/raid456.ko: kernel/lib/libcrc32c.ko\n" +
			"kernel/crypto/crc32c_generic.ko:\nkernel/arch/x86/crypto/crc32c-intel.ko:\nkernel/fs/unused.ko:\n",
		"modules.softdep": "# Soft dependencies extracted from modules themselves.\nsoftdep libcrc32c pre: crc32c\nsoftdep unused pre: nothing\n",
		"modules.alias":   "alias crc32c crc32c_generic\nalias crypto-crc32c crc32c_generic\nalias crc32c crc32c_intel\n",
	}
	for name, content := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, ko := range []string{"kernel/lib/libcrc32c.ko", "kernel/drivers/md/raid456.ko", "kernel/crypto/crc32c_generic.ko", "kernel/arch/x86/crypto/crc32c-intel.ko", "kernel/fs/unused.ko"} {
		if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, ko)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, ko), []byte("ko"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	set, err := ResolveModules(dir, "6.1.0-test", ModuleSelection{Classes: []ModuleClass{{Name: "md", Include: []string{"drivers/md/"}, Load: []string{"raid456"}}}})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"kernel/arch/x86/crypto/crc32c-intel.ko", "kernel/crypto/crc32c_generic.ko", "kernel/drivers/md/raid456.ko", "kernel/lib/libcrc32c.ko"}
	if !reflect.DeepEqual(set.Files, want) {
		t.Errorf("Files = %v, want %v", set.Files, want)
	}
	if want := []string{"crc32c_generic", "crc32c_intel", "raid456"}; !reflect.DeepEqual(set.Load, want) {
		t.Errorf("Load = %v, want %v", set.Load, want)
	}
	if want := "softdep libcrc32c pre: crc32c\n"; string(set.Softdep) != want {
		t.Errorf("Softdep = %q, want %q", set.Softdep, want)
	}
}
