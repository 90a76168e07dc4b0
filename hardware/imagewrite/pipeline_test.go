package imagewrite

import (
	"bytes"
	"context"
	"os"
	"testing"
	"unsafe"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestArenasReuseRegionsOfTheSameSize(t *testing.T) {
	var a arenas
	first := a.take(3 * 4096)
	require.Len(t, first, 3*4096)
	assert.Zero(t, uintptr(unsafe.Pointer(&first[0]))%4096, "aligned for O_DIRECT")
	a.give(first)

	other := a.take(4096)
	assert.NotSame(t, &first[0], &other[0], "a region of another size is not handed out")
	again := a.take(3 * 4096)
	assert.Same(t, &first[0], &again[0], "the region given back is reused")
	fresh := a.take(3 * 4096)
	assert.NotSame(t, &first[0], &fresh[0], "a region is never handed out twice")

	for _, m := range [][]byte{again, fresh, other} {
		a.give(m)
	}
	assert.Len(t, a.free, maxArenas, "what stays allocated is bounded")
}

// One Writer serves several writes with the same buffers: each image
// lands whole, whatever the previous (longer, failed or compressed) write
// left in them.
func TestWriterReusesBuffersAcrossWrites(t *testing.T) {
	long := randomImage(t, 7<<20+512)
	short := randomImage(t, 2<<20+4096)
	files := map[string][]byte{"/long": long, "/small": short, "/small.gz": gz(t, short)}
	srv := serve(t, files)
	dev := target(t, 8<<20)
	w := &Writer{Opener: hardware.NewGuard(outside, []string{dev})}
	steps := []struct {
		path, checksum string
		want           []byte // image expected at the start of the disk; nil: the write fails
	}{
		{"/long", sha256sum(long), long},
		{"/small", sha256sum(long), nil},
		{"/small", sha256sum(short), short},
		{"/long", sha256sum(long), long},
		{"/small.gz", sha256sum(files["/small.gz"]), short},
	}
	for i, s := range steps {
		_, err := w.Write(context.Background(), Request{URL: srv.URL + s.path, Checksum: s.checksum, Device: dev}, nil)
		got, rerr := os.ReadFile(dev)
		require.NoError(t, rerr)
		if s.want == nil {
			require.Error(t, err, "step %d", i)
			assert.Equal(t, make([]byte, 1<<20), got[:1<<20], "step %d: head wiped", i)
			continue
		}
		require.NoError(t, err, "step %d", i)
		assert.True(t, bytes.Equal(s.want, got[:len(s.want)]), "step %d: %s on disk", i, s.path)
	}
	assert.NotEmpty(t, w.mem.free, "buffers kept for the next write")
}
