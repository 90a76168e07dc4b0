package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/vmedia"
	"github.com/anvil-metal/anvil/internal/tempdir"
	"github.com/anvil-metal/anvil/protocol"
)

func TestRedactURL(t *testing.T) {
	assert.Equal(t, "postgres://anvil:xxxxx@127.0.0.1:5432/anvil?sslmode=disable", redactURL("postgres://anvil:s3cret@127.0.0.1:5432/anvil?sslmode=disable"))
	assert.Equal(t, "postgres://anvil@db/anvil", redactURL("postgres://anvil@db/anvil"))
	assert.Equal(t, "sqlite://./anvil.db", redactURL("sqlite://./anvil.db"))
	_, err := OpenStore(t.Context(), "mysql://root:pw@x/db")
	assert.ErrorContains(t, err, "unsupported database URL")
	assert.NotContains(t, err.Error(), "pw@")
}

func TestWithPoolSize(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"postgres://a@h/db", "postgres://a@h/db?pool_max_conns=7"},
		{"postgresql://a@h/db?sslmode=disable", "postgresql://a@h/db?sslmode=disable&pool_max_conns=7"},
		{"postgres://a@h/db?pool_max_conns=3", "postgres://a@h/db?pool_max_conns=3"}, // the operator's choice wins
		{"sqlite://./anvil.db", "sqlite://./anvil.db"},
	} {
		assert.Equal(t, tc.want, withPoolSize(tc.in, 7), tc.in)
	}
}

func TestRamdiskSHA256(t *testing.T) {
	dir := t.TempDir()
	log := slog.New(slog.DiscardHandler)
	assert.Empty(t, ramdiskSHA256("", log), "no boot directory")
	assert.Empty(t, ramdiskSHA256(dir, log), "no initramfs in it")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "initramfs.cpio.gz"), []byte("gzip image"), 0o644))
	sum := sha256.Sum256([]byte("gzip image"))
	assert.Equal(t, hex.EncodeToString(sum[:]), ramdiskSHA256(dir, log))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "initramfs.cpio.zst"), []byte("zstd image"), 0o644))
	sum = sha256.Sum256([]byte("zstd image"))
	assert.Equal(t, hex.EncodeToString(sum[:]), ramdiskSHA256(dir, log), "the file nodes are served")
}

// vmediaBootDir is a boot directory with an agent ISO (returned) and its
// manifest, as make image writes them.
func vmediaBootDir(t *testing.T) (string, []byte) {
	t.Helper()
	boot := t.TempDir()
	slot, err := protocol.BootConfig{Placeholder: true}.Slot()
	require.NoError(t, err)
	iso := make([]byte, 2*len(slot))
	copy(iso[len(slot):], slot)
	require.NoError(t, os.WriteFile(filepath.Join(boot, vmedia.ISOName), iso, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(boot, "manifest.json"),
		fmt.Appendf(nil, `{"iso": {"path": "anvil.iso", "node_slot": {"offset": %d, "bytes": %d}}}`, len(slot), len(slot)), 0o644))
	return boot, iso
}

// Virtual-media boots under way live in the data directory (--data-dir,
// else the SQLite database's), so a restarted controller takes them over;
// --vmedia-dir overrides it; without either they are temporary.
func TestVirtualMediaDir(t *testing.T) {
	boot, _ := vmediaBootDir(t)
	log := slog.New(slog.DiscardHandler)
	url := func() string { return "http://192.0.2.1:6385" }

	data, db, own := t.TempDir(), t.TempDir(), t.TempDir()
	for name, tc := range map[string]struct {
		cfg  Config
		want string
	}{
		"--data-dir":     {Config{DataDir: data, Database: "sqlite://" + filepath.Join(db, "a.db")}, filepath.Join(data, "vmedia")},
		"SQLite's dir":   {Config{Database: "sqlite://" + filepath.Join(db, "a.db")}, filepath.Join(db, "vmedia")},
		"--vmedia-dir":   {Config{DataDir: data, VMediaDir: own}, own},
		"no data dir":    {Config{Database: "sqlite://:memory:"}, ""},
		"PostgreSQL too": {Config{Database: "postgres://a@h/db"}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			tc.cfg.BootDir = boot
			b, closeB, err := openVirtualMedia(tc.cfg, log, false, url)
			require.NoError(t, err)
			_, err = b.Prepare("node-1", "")
			require.NoError(t, err)
			closeB()
			b, closeB, err = openVirtualMedia(tc.cfg, log, false, url)
			require.NoError(t, err)
			defer closeB()
			if tc.want == "" {
				assert.False(t, b.Active("node-1"), "a temporary directory does not outlive the controller")
				return
			}
			assert.True(t, b.Active("node-1"), "the boot under way survives the restart")
			assert.FileExists(t, filepath.Join(tc.want, "node-1.key"))
			b.Release("node-1")
		})
	}
}

// TestTemporaryVirtualMediaDirs: a controller without a data directory
// keeps virtual media in a temporary directory; one killed outright
// (SIGKILL) cannot remove it, so the next controller to start removes
// those of controllers that are gone, and only those: a live
// controller's on the same machine stays.
func TestTemporaryVirtualMediaDirs(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	boot, iso := vmediaBootDir(t)
	log := slog.New(slog.DiscardHandler)
	url := func() string { return "http://192.0.2.1:6385" }
	cfg := Config{Database: "sqlite://:memory:", BootDir: boot}

	// A killed controller's: marked as made by tempdir, held by nobody.
	dead := filepath.Join(tmp, vmediaTempPrefix+"dead")
	require.NoError(t, os.Mkdir(dead, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dead, tempdir.Marker), []byte("4242\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dead, "node-1.iso"), iso, 0o600))
	// An older release's, which has no marker: who made it cannot be told.
	unmarked := filepath.Join(tmp, vmediaTempPrefix+"unmarked")
	require.NoError(t, os.Mkdir(unmarked, 0o700))

	live, closeLive, err := openVirtualMedia(cfg, log, false, url)
	require.NoError(t, err)
	_, err = live.Prepare("node-1", "")
	require.NoError(t, err)
	assert.NoDirExists(t, dead, "a dead controller's directory goes when another starts")
	assert.DirExists(t, unmarked)

	_, closeSecond, err := openVirtualMedia(cfg, log, false, url)
	require.NoError(t, err)
	assert.True(t, live.Active("node-1"), "a live controller's directory stays when another starts")
	dirs, err := filepath.Glob(filepath.Join(tmp, vmediaTempPrefix+"*"))
	require.NoError(t, err)
	assert.Len(t, dirs, 3, "the two live controllers' and the unmarked one: %v", dirs)

	closeSecond()
	closeLive()
	dirs, err = filepath.Glob(filepath.Join(tmp, vmediaTempPrefix+"*"))
	require.NoError(t, err)
	assert.Equal(t, []string{unmarked}, dirs, "a controller that stops removes its own")
}
