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

func TestResolveModules(t *testing.T) {
	dir := filepath.Join("..", "testdata", "image", "modules")
	set, err := ResolveModules(dir, "6.1.0-test", []string{"virtio_pci", "virtio-net", "nvme", "e1000e", "raid1", "virtio_rng"})
	if err != nil {
		t.Fatalf("ResolveModules() = %v", err)
	}
	if want := []string{"virtio_pci", "virtio_net", "raid1", "virtio_rng"}; !reflect.DeepEqual(set.Load, want) {
		t.Errorf("Load = %v, want %v", set.Load, want)
	}
	if want := []string{"nvme"}; !reflect.DeepEqual(set.Builtin, want) {
		t.Errorf("Builtin = %v, want %v", set.Builtin, want)
	}
	if want := []string{"e1000e"}; !reflect.DeepEqual(set.Missing, want) {
		t.Errorf("Missing = %v, want %v", set.Missing, want)
	}
	want := []string{
		"kernel/drivers/char/hw_random/virtio-rng.ko",
		"kernel/drivers/md/md-mod.ko",
		"kernel/drivers/md/raid1.ko",
		"kernel/drivers/net/net_failover.ko",
		"kernel/drivers/net/virtio_net.ko",
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
	dep := string(set.Dep)
	if strings.Contains(dep, "sd_mod") {
		t.Errorf("modules.dep has a module nobody asked for:\n%s", dep)
	}
	if !strings.Contains(dep, "kernel/drivers/md/raid1.ko: kernel/drivers/md/md-mod.ko\n") {
		t.Errorf("modules.dep lost raid1's dependency:\n%s", dep)
	}
	conf := string(set.LoadConf())
	for _, n := range set.Load {
		if !strings.Contains(conf, "\n"+n+"\n") {
			t.Errorf("LoadConf() has no line %q:\n%s", n, conf)
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
