package vmedia

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/protocol"
)

// fakeBootDir writes an "ISO" of size bytes with the empty node slot at
// offset and the manifest that locates it.
func fakeBootDir(t testing.TB, size, offset int64) (string, []byte) {
	t.Helper()
	dir := t.TempDir()
	iso := make([]byte, size)
	_, _ = rand.Read(iso)
	slot, err := protocol.BootConfig{Placeholder: true}.Slot()
	require.NoError(t, err)
	copy(iso[offset:], slot)
	require.NoError(t, os.WriteFile(filepath.Join(dir, ISOName), iso, 0o644))
	m := fmt.Sprintf(`{"iso": {"path": "anvil.iso", "node_slot": {"path": "/boot/node.cpio", "offset": %d, "bytes": %d}}}`, offset, len(slot))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(m), 0o644))
	return dir, iso
}

func TestBuilder(t *testing.T) {
	dir, iso := fakeBootDir(t, 1<<20, 512<<10)
	cache := t.TempDir()
	b, err := New(Config{BootDir: dir, CacheDir: cache, PublicURL: func() string { return "http://192.0.2.10:6385/" }})
	require.NoError(t, err)

	url, err := b.Prepare("node-1", "")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(url, "http://192.0.2.10:6385/v1/boot/node-1/vmedia/"), url)
	key := strings.TrimSuffix(url[strings.LastIndex(url, "/")+1:], ".iso")
	assert.Len(t, key, 48)
	other, err := b.Prepare("node-2", "http://198.51.100.1:6385")
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(other, "http://198.51.100.1:6385/v1/boot/node-2/vmedia/"), "a node's anvil_public_url wins")
	tlsB, err := New(Config{BootDir: dir, CacheDir: t.TempDir(), PlainHTTP: true})
	require.NoError(t, err)
	plain, err := tlsB.Prepare("node-4", "https://192.0.2.10:6385")
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(plain, "http://192.0.2.10:6385/v1/boot/node-4/vmedia/"), "an HTTPS controller gives BMCs plain HTTP, as boot loaders get")

	builds := 0
	cfg := protocol.BootConfig{Cmdline: "anvil.api=http://192.0.2.10:6385 anvil.token=n0nce", NetworkData: json.RawMessage(`{"links":[]}`)}
	config := func() (protocol.BootConfig, error) { builds++; return cfg, nil }
	for _, bad := range []string{"", "00", strings.Repeat("0", 48), key + "0"} {
		_, err := b.Open("node-1", bad, config)
		assert.ErrorIs(t, err, ErrNotFound, "key %q", bad)
	}
	_, err = b.Open("node-3", key, config)
	assert.ErrorIs(t, err, ErrNotFound, "another node's key")
	assert.Zero(t, builds, "nothing is built for a wrong key")

	f, err := b.Open("node-1", key, config)
	require.NoError(t, err)
	got, err := os.ReadFile(f.Name())
	f.Close()
	require.NoError(t, err)
	slot, err := cfg.Slot()
	require.NoError(t, err)
	want := bytes.Clone(iso)
	copy(want[512<<10:], slot)
	assert.Equal(t, want, got, "the common ISO with the node's slot")
	f, err = b.Open("node-1", key, config)
	require.NoError(t, err)
	f.Close()
	assert.Equal(t, 1, builds, "built once per boot: later fetches get the same bytes")

	// A new boot: the old key dies and the old ISO is gone.
	url2, err := b.Prepare("node-1", "")
	require.NoError(t, err)
	assert.NotEqual(t, url, url2)
	_, err = b.Open("node-1", key, config)
	assert.ErrorIs(t, err, ErrNotFound)
	assert.NoFileExists(t, filepath.Join(cache, "node-1.iso"))

	key2 := strings.TrimSuffix(url2[strings.LastIndex(url2, "/")+1:], ".iso")
	f, err = b.Open("node-1", key2, config)
	require.NoError(t, err)
	f.Close()
	assert.FileExists(t, filepath.Join(cache, "node-1.iso"))
	assert.True(t, b.Active("node-1"))
	b.Release("node-1")
	assert.False(t, b.Active("node-1"))
	assert.NoFileExists(t, filepath.Join(cache, "node-1.iso"), "released: removed")
	_, err = b.Open("node-1", key2, config)
	assert.ErrorIs(t, err, ErrNotFound)

	t.Run("a slot that does not fit", func(t *testing.T) {
		big := protocol.BootConfig{NetworkData: json.RawMessage(`"` + strings.Repeat("x", protocol.BootSlotSize) + `"`)}
		assert.ErrorContains(t, b.Build(filepath.Join(t.TempDir(), "x.iso"), big), "slot holds")
	})
}

func TestNewChecksTheISO(t *testing.T) {
	dir, _ := fakeBootDir(t, 1<<20, 512<<10)
	m := fmt.Sprintf(`{"iso": {"node_slot": {"offset": %d, "bytes": %d}}}`, 256<<10, protocol.BootSlotSize)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(m), 0o644))
	_, err := New(Config{BootDir: dir, CacheDir: t.TempDir()})
	assert.ErrorContains(t, err, "no empty node slot")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "manifest.json"), []byte(`{"kernel": {}}`), 0o644))
	_, err = New(Config{BootDir: dir, CacheDir: t.TempDir()})
	assert.ErrorContains(t, err, "lists no ISO")

	_, err = New(Config{BootDir: t.TempDir(), CacheDir: t.TempDir()})
	assert.ErrorContains(t, err, "manifest.json")

	good, _ := fakeBootDir(t, 1<<20, 512<<10)
	b, err := New(Config{BootDir: good, CacheDir: t.TempDir()})
	require.NoError(t, err)
	_, err = b.Prepare("n", "")
	assert.ErrorContains(t, err, "--public-url", "without a URL the BMC could reach")
}

// BenchmarkBuild measures a per-node ISO of the real image's size (the
// built out/image/anvil.iso when there is one).
func BenchmarkBuild(b *testing.B) {
	dir := filepath.Join("..", "..", "out", "image")
	if _, err := os.Stat(filepath.Join(dir, ISOName)); err != nil {
		dir, _ = fakeBootDir(b, 33<<20, 24<<20)
	}
	bl, err := New(Config{BootDir: dir, CacheDir: b.TempDir()})
	require.NoError(b, err)
	cfg := protocol.BootConfig{Cmdline: "anvil.api=http://192.0.2.10:6385 anvil.node=7f6d anvil.token=abc"}
	out := filepath.Join(b.TempDir(), "node.iso")
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if err := bl.Build(out, cfg); err != nil {
			b.Fatal(err)
		}
	}
	st, _ := os.Stat(out)
	b.ReportMetric(float64(st.Size())/(1<<20), "MiB")
}
