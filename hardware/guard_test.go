package hardware

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/anvil-metal/anvil/hardware/internal/testdev"
	"github.com/anvil-metal/anvil/hardware/partition"
	"github.com/anvil-metal/anvil/protocol"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestDetectEnvironment(t *testing.T) {
	tests := []struct {
		fixture string
		pid     int
		want    bool
	}{
		{"uroot-initramfs", 412, true},
		{"uroot-initramfs", 1, true},
		{"tmpfs-root", 77, true}, // anvil.api="..." quoted
		{"installed-ext4", 3000, false},
		{"overlay-container", 12, false},
		{"chroot-shadowed", 12, false}, // a later mount on / shadows the initramfs
		{"installed-ext4", 1, false},   // PID 1 but no kernel command line from the controller
		{"diskless-tmpfs", 77, false},  // tmpfs root, booted without anvil.api=
		{"diskless-tmpfs", 1, false},
		{"empty-api", 412, false},  // anvil.api= with no value
		{"ipa-cmdline", 412, true}, // IPA's ipa-api-url= alias
		{"vmedia-iso", 412, true},  // the agent ISO's boot loaders: anvil.vmedia
		{"does-not-exist", 55, false},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/pid%d", tt.fixture, tt.pid), func(t *testing.T) {
			env := DetectEnvironment(filepath.Join("..", "testdata", "hardware", "procfs", tt.fixture), tt.pid)
			assert.Equal(t, tt.want, env.InRamdisk, env.Evidence)
			assert.NotEmpty(t, env.Evidence)
		})
	}
}

// TestGuardRefusesDisklessHost: a host that booted diskless with a tmpfs
// root (no anvil.api= from the controller) is not the ramdisk, so a guard
// without an allow-list refuses every write there.
func TestGuardRefusesDisklessHost(t *testing.T) {
	env := DetectEnvironment(filepath.Join("..", "testdata", "hardware", "procfs", "diskless-tmpfs"), 77)
	assert.Contains(t, env.Evidence, "anvil.api=")
	disk := filepath.Join(t.TempDir(), "disk.img")
	require.NoError(t, os.WriteFile(disk, []byte("precious"), 0o600))
	g := NewGuard(env, nil)
	require.ErrorIs(t, g.Ready(), ErrProtected)
	f, err := g.OpenForWrite(disk, 0)
	require.ErrorIs(t, err, ErrProtected)
	assert.Nil(t, f)
	assert.Contains(t, err.Error(), "anvil.api=")
	b, err := os.ReadFile(disk)
	require.NoError(t, err)
	assert.Equal(t, "precious", string(b))
}

func TestParseAllowList(t *testing.T) {
	assert.Nil(t, ParseAllowList(""))
	assert.Nil(t, ParseAllowList("  "))
	assert.Equal(t, []string{"/dev/loop3", "/dev/loop4"}, ParseAllowList(" /dev/loop3, ,/dev/loop4 "))
}

// TestGuardRefusesOutsideAllowList proves that a guard with an allow-list
// opens only listed targets, that a symlink to an unlisted target is refused,
// that a listed symlink admits its target, and that without an allow-list
// nothing outside the ramdisk can be opened.
func TestGuardRefusesOutsideAllowList(t *testing.T) {
	dir := t.TempDir()
	allowed := filepath.Join(dir, "disk-a.img")
	other := filepath.Join(dir, "disk-b.img")
	for _, p := range []string{allowed, other} {
		require.NoError(t, os.WriteFile(p, []byte("precious"), 0o600))
	}
	linkOut := filepath.Join(dir, "sneaky")
	require.NoError(t, os.Symlink(other, linkOut))
	linkIn := filepath.Join(dir, "by-id-a")
	require.NoError(t, os.Symlink(allowed, linkIn))
	outside := Environment{InRamdisk: false, Evidence: "test: not a ramdisk"}
	ramdisk := Environment{InRamdisk: true, Evidence: "test: ramdisk"}

	tests := []struct {
		name    string
		guard   *Guard
		path    string
		allowed bool
	}{
		{"listed file", NewGuard(outside, []string{allowed}), allowed, true},
		{"listed via symlink in the list", NewGuard(outside, []string{linkIn}), allowed, true},
		{"symlink to a listed file", NewGuard(outside, []string{allowed}), linkIn, true},
		{"unlisted file", NewGuard(outside, []string{allowed}), other, false},
		{"symlink pointing outside the list", NewGuard(outside, []string{allowed}), linkOut, false},
		{"real device not on the list", NewGuard(outside, []string{allowed}), "/dev/null", false},
		{"dot-dot path escaping", NewGuard(outside, []string{allowed}), filepath.Join(dir, "x", "..", "disk-b.img"), false},
		{"allow-list restricts even in ramdisk", NewGuard(ramdisk, []string{allowed}), other, false},
		{"no list outside ramdisk", NewGuard(outside, nil), allowed, false},
		{"empty list outside ramdisk", NewGuard(outside, []string{}), allowed, false},
		{"no list in ramdisk", NewGuard(ramdisk, nil), allowed, true},
		{"nil guard", nil, allowed, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := tt.guard.OpenForWrite(tt.path, 0)
			if tt.allowed {
				require.NoError(t, err)
				_, err = f.WriteAt([]byte("X"), 0)
				assert.NoError(t, err)
				require.NoError(t, f.Close())
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrProtected)
			assert.Nil(t, f)
			assert.False(t, tt.guard.Allows(tt.path))
		})
	}
	// The refused files were never touched.
	b, err := os.ReadFile(other)
	require.NoError(t, err)
	assert.Equal(t, "precious", string(b))
}

func TestGuardNeverCreatesFiles(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "not-there")
	g := NewGuard(Environment{}, []string{missing})
	_, err := g.OpenForWrite(missing, os.O_CREATE)
	require.Error(t, err)
	_, statErr := os.Stat(missing)
	assert.True(t, os.IsNotExist(statErr), "guard must not create %s", missing)
}

func TestGuardReady(t *testing.T) {
	outside := Environment{Evidence: "test: not a ramdisk"}
	tests := []struct {
		name  string
		guard *Guard
		ok    bool
	}{
		{"ramdisk", NewGuard(Environment{InRamdisk: true}, nil), true},
		{"allow-list outside ramdisk", NewGuard(outside, []string{"/dev/loop3"}), true},
		{"nothing outside ramdisk", NewGuard(outside, nil), false},
		{"blank allow-list string", NewGuard(outside, ParseAllowList(" , ")), false}, // parses to no list
		{"explicitly empty list", NewGuard(outside, []string{" "}), false},
		{"nil", nil, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.guard.Ready()
			if tt.ok {
				assert.NoError(t, err)
				return
			}
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrProtected)
		})
	}
}

func TestGuardResolvesLateEntries(t *testing.T) {
	dir := t.TempDir()
	target := filepath.Join(dir, "md127")
	link := filepath.Join(dir, "md", "anvil")
	g := NewGuard(Environment{}, []string{link}) // listed before it exists
	require.NoError(t, os.WriteFile(target, []byte("x"), 0o600))
	require.NoError(t, os.MkdirAll(filepath.Dir(link), 0o755))
	require.NoError(t, os.Symlink(target, link))
	assert.True(t, g.Allows(target), "the node the late link points to")
	assert.True(t, g.Allows(link))
}

// TestGuardAllowsPartitionsOfListedDisks: a partition lies inside its
// disk, so listing the disk allows its partitions (erase_devices_metadata
// wipes every partition of a disk), and only that disk's.
func TestGuardAllowsPartitionsOfListedDisks(t *testing.T) {
	a := testdev.Loop(t, 16<<20, true)
	b := testdev.Loop(t, 16<<20, true)
	for _, dev := range []string{a, b} {
		f, err := os.OpenFile(dev, os.O_RDWR, 0)
		require.NoError(t, err)
		l, err := partition.WriteGPT(f, 16<<20, 512, []partition.Part{{Name: "p", Type: partition.TypeLinuxFS}})
		require.NoError(t, err)
		require.NoError(t, partition.Activate(f, l))
		f.Close()
	}
	g := NewGuard(Environment{}, []string{a})
	assert.True(t, g.Allows(a+"p1"), "partition of the listed disk")
	assert.False(t, g.Allows(b+"p1"), "partition of another disk")
	assert.False(t, g.Allows(b))
	assert.Equal(t, a, partitionOf(a+"p1"))
	assert.Empty(t, partitionOf(a))
	assert.Empty(t, partitionOf("/tmp/x"))
}

func TestGuardScopesTheInventoryOutsideTheRamdisk(t *testing.T) {
	dir := t.TempDir()
	mine := filepath.Join(dir, "disk-a.img")
	require.NoError(t, os.WriteFile(mine, []byte("x"), 0o600))
	inv := protocol.Inventory{
		Disks: []protocol.Disk{{Name: mine, Size: 1}, {Name: "/dev/sda", Size: 1 << 40}},
		PCI:   []protocol.PCIDevice{{Address: "0000:00:17.0", Class: "010601"}},
	}
	outside := Environment{Evidence: "test: not a ramdisk"}

	scoped := NewGuard(outside, []string{mine}).ScopeInventory(inv)
	require.Len(t, scoped.Disks, 1, "the host's disks are not the node's")
	assert.Equal(t, mine, scoped.Disks[0].Name)
	assert.NotNil(t, scoped.PCI)
	assert.Empty(t, scoped.PCI, "nor is the host's PCI bus")
	assert.Len(t, inv.Disks, 2, "the caller's inventory is not changed")

	assert.Equal(t, inv, NewGuard(Environment{InRamdisk: true, Evidence: "test"}, []string{mine}).ScopeInventory(inv), "the ramdisk reports the whole machine")
	assert.Equal(t, inv, NewGuard(outside, nil).ScopeInventory(inv), "no allow-list: nothing to scope to")
}
