package image

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/klauspost/compress/zstd"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestSuffixDep(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", ""},
		{"kernel/a.ko:\n", "kernel/a.ko.zst:\n"},
		{"kernel/a.ko: kernel/b.ko kernel/c.ko\nkernel/b.ko:\n", "kernel/a.ko.zst: kernel/b.ko.zst kernel/c.ko.zst\nkernel/b.ko.zst:\n"},
		{"kernel/a.ko:   kernel/b.ko", "kernel/a.ko.zst: kernel/b.ko.zst"}, // no trailing newline, extra spaces
		{"# comment\n\n", "# comment\n\n"},
	} {
		assert.Equal(t, tc.want, string(SuffixDep([]byte(tc.in), ".zst")), "%q", tc.in)
	}
}

func TestCompressModulesRoundTripAndDeterministic(t *testing.T) {
	dir := t.TempDir()
	files := []string{"kernel/x/a.ko", "kernel/y/b.ko", "kernel/z.ko"}
	want := map[string][]byte{}
	for i, f := range files {
		require.NoError(t, os.MkdirAll(filepath.Join(dir, filepath.Dir(f)), 0o755))
		content := bytes.Repeat([]byte{byte(i), 'E', 'L', 'F'}, 10000+i*777)
		want[f] = content
		require.NoError(t, os.WriteFile(filepath.Join(dir, f), content, 0o644))
	}
	first, err := CompressModules(dir, files)
	require.NoError(t, err)
	second, err := CompressModules(dir, files)
	require.NoError(t, err)
	assert.Equal(t, first, second, "same input, same bytes: the image stays reproducible")
	dec, err := zstd.NewReader(nil)
	require.NoError(t, err)
	defer dec.Close()
	for i, f := range files {
		got, err := dec.DecodeAll(first[i], nil)
		require.NoError(t, err)
		assert.Equal(t, want[f], got, f)
		assert.Less(t, len(first[i]), len(want[f])/10, "repetitive content compresses")
	}

	_, err = CompressModules(dir, []string{"kernel/missing.ko"})
	assert.ErrorContains(t, err, "missing.ko")
}
