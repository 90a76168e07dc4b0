// Package testdev creates throw-away block devices for tests: loop devices
// over sparse files in t.TempDir(), always detached in t.Cleanup. Tests that
// need them skip (with the reason) when not root or when loop devices are
// unavailable; CI runs as root.
package testdev

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// RequireRoot skips the test unless it can create loop devices.
func RequireRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root to create loop devices (CI runs as root)")
	}
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("losetup not installed")
	}
	if _, err := os.Stat("/dev/loop-control"); err != nil {
		t.Skip("loop devices unavailable: /dev/loop-control missing")
	}
}

// Loop creates a sparse backing file of size bytes and attaches it. With
// partscan the kernel scans partitions (losetup -P), so /dev/loopNpM appear.
func Loop(t testing.TB, size int64, partscan bool) string {
	t.Helper()
	RequireRoot(t)
	img := filepath.Join(t.TempDir(), "disk.img")
	f, err := os.Create(img)
	if err != nil {
		t.Fatal(err)
	}
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	f.Close()
	args := []string{"--find", "--show"}
	if partscan {
		args = append(args, "-P")
	}
	out, err := exec.Command("losetup", append(args, img)...).CombinedOutput()
	if err != nil {
		t.Skipf("loop devices unavailable: losetup %v: %v: %s", args, err, out)
	}
	dev := strings.TrimSpace(string(out))
	clearThrottle(dev)
	t.Cleanup(func() {
		for i := 0; i < 10; i++ {
			if err := exec.Command("losetup", "-d", dev).Run(); err == nil {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("could not detach %s", dev)
	})
	return dev
}

// LoopDirect creates a fully allocated backing file and attaches it with
// --direct-io=on, so writes reach the backing file (and a final fsync is as
// cheap as on a real disk). Benchmarks use it: a buffered loop device makes
// O_DIRECT writes land in the page cache, which flatters tools that do not
// fsync (dd oflag=direct) and penalises code that does.
func LoopDirect(t testing.TB, size int64) string {
	t.Helper()
	RequireRoot(t)
	img := filepath.Join(t.TempDir(), "disk.img")
	Run(t, "fallocate", "-l", itoa(size), img)
	out, err := exec.Command("losetup", "--find", "--show", "--direct-io=on", img).CombinedOutput()
	if err != nil {
		t.Skipf("loop devices unavailable: %v: %s", err, out)
	}
	dev := strings.TrimSpace(string(out))
	clearThrottle(dev)
	t.Cleanup(func() { _ = exec.Command("losetup", "-d", dev).Run() })
	return dev
}

// Run runs a command and fails the test if it fails, returning its output.
func Run(t testing.TB, name string, args ...string) string {
	t.Helper()
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}

// Output runs a command and returns its combined output and error without
// failing (for probes like blkid whose exit code carries meaning).
func Output(name string, args ...string) (string, error) {
	out, err := exec.Command(name, args...).CombinedOutput()
	return string(out), err
}

// Need skips the test when a host tool is missing.
func Need(t testing.TB, tools ...string) {
	t.Helper()
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("%s not installed", tool)
		}
	}
}

// Fill writes b repeatedly over [off, off+n) of path.
func Fill(t testing.TB, path string, off, n int64, b byte) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = b
	}
	for done := int64(0); done < n; {
		m := min(int64(len(buf)), n-done)
		if _, err := f.WriteAt(buf[:m], off+done); err != nil {
			t.Fatal(err)
		}
		done += m
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
}

// WaitFor polls until path exists (device nodes of new partitions).
func WaitFor(t testing.TB, path string) {
	t.Helper()
	for i := 0; i < 50; i++ {
		if _, err := os.Stat(path); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s did not appear", path)
}
