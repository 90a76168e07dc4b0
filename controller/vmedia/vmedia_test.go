package vmedia

import (
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

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

	// A FIFO where the ISO should be is refused at once (opening it for
	// reading would wait for a writer, and the controller would never
	// start).
	for _, name := range []string{ISOName, "manifest.json"} {
		fifo, _ := fakeBootDir(t, 1<<20, 512<<10)
		require.NoError(t, os.Remove(filepath.Join(fifo, name)))
		require.NoError(t, syscall.Mkfifo(filepath.Join(fifo, name), 0o644))
		done := make(chan error, 1)
		go func() { _, err := New(Config{BootDir: fifo, CacheDir: t.TempDir()}); done <- err }()
		select {
		case err := <-done:
			assert.ErrorContains(t, err, "not a regular file", name)
		case <-time.After(5 * time.Second):
			f, _ := os.OpenFile(filepath.Join(fifo, name), os.O_WRONLY, 0) // unblock the reader
			f.Close()
			t.Fatalf("New blocked on a FIFO named %s", name)
		}
	}
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

// A controller restart in the middle of a node's virtual-media boot: the
// next Builder on the same cache directory serves the same ISO under the
// same URL (BMCs read the medium all through the boot; the boot nonce in
// it is minted once), keeps the boot active (so it is ejected when the
// node leaves the ramdisk), and a released boot stays released. Only a
// temporary directory's boots die with the Builder.
func TestBuilderSurvivesRestart(t *testing.T) {
	dir, _ := fakeBootDir(t, 1<<20, 512<<10)
	cache := t.TempDir()
	open := func() *Builder {
		b, err := New(Config{BootDir: dir, CacheDir: cache, PublicURL: func() string { return "http://192.0.2.10:6385" }})
		require.NoError(t, err)
		return b
	}
	keyOf := func(url string) string { return strings.TrimSuffix(url[strings.LastIndex(url, "/")+1:], ".iso") }
	nonces := 0
	config := func() (protocol.BootConfig, error) {
		nonces++
		return protocol.BootConfig{Cmdline: fmt.Sprintf("anvil.token=nonce-%d", nonces)}, nil
	}
	read := func(b *Builder, node, key string) ([]byte, error) {
		f, err := b.Open(node, key, config)
		if err != nil {
			return nil, err
		}
		defer f.Close()
		return os.ReadFile(f.Name())
	}

	b := open()
	url1, err := b.Prepare("node-1", "")
	require.NoError(t, err)
	url2, err := b.Prepare("node-2", "")
	require.NoError(t, err)
	first, err := read(b, "node-1", keyOf(url1))
	require.NoError(t, err)
	b.Release("node-2")
	b.Close()

	b = open()
	assert.True(t, b.Active("node-1"), "the boot under way is taken over")
	assert.False(t, b.Active("node-2"), "a released boot stays released")
	again, err := read(b, "node-1", keyOf(url1))
	require.NoError(t, err)
	assert.Equal(t, first, again, "the same ISO (and nonce) after the restart")
	assert.Equal(t, 1, nonces, "not built again")
	_, err = read(b, "node-2", keyOf(url2))
	assert.ErrorIs(t, err, ErrNotFound)
	_, err = read(b, "node-1", strings.Repeat("0", 48))
	assert.ErrorIs(t, err, ErrNotFound, "still only under its own key")

	st, err := os.Stat(filepath.Join(cache, "node-1"+keySuffix))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the key file is the controller's alone")

	// Junk in the directory (a cut-short write, a foreign file) is not a boot.
	require.NoError(t, os.WriteFile(filepath.Join(cache, ".tmp-123"+keySuffix), []byte("x"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(cache, "node-3"+keySuffix), []byte("not hex"), 0o600))
	b = open()
	assert.False(t, b.Active("node-3"))
	assert.False(t, b.Active(".tmp-123"))
	assert.True(t, b.Active("node-1"))

	temp := t.TempDir()
	tb, err := New(Config{BootDir: dir, CacheDir: filepath.Join(temp, "c"), RemoveDir: true, PublicURL: func() string { return "http://x" }})
	require.NoError(t, err)
	_, err = tb.Prepare("node-1", "")
	require.NoError(t, err)
	tb.Close()
	assert.NoDirExists(t, filepath.Join(temp, "c"), "a temporary cache dies with its Builder")
}
