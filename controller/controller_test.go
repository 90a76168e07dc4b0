package controller

import (
	"crypto/sha256"
	"encoding/hex"
	"log/slog"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
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
