package regularfile

import (
	"io"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOpen(t *testing.T) {
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "file"), []byte("bytes"), 0o644))
	require.NoError(t, os.Symlink("file", filepath.Join(dir, "link-to-file")))
	fifo := filepath.Join(dir, "fifo")
	require.NoError(t, syscall.Mkfifo(fifo, 0o644))
	t.Cleanup(func() { // lets a reader stuck in open() go, should one be
		if f, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			f.Close()
		}
	})
	require.NoError(t, os.Symlink("fifo", filepath.Join(dir, "link-to-fifo")))
	require.NoError(t, os.Mkdir(filepath.Join(dir, "dir"), 0o755))
	sock, err := net.Listen("unix", filepath.Join(dir, "socket"))
	require.NoError(t, err)
	defer sock.Close()
	require.NoError(t, os.Symlink("/dev/null", filepath.Join(dir, "link-to-device")))
	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	defer root.Close()

	cases := []struct {
		name    string
		want    error // nil: opened, reads "bytes"
		outside bool  // os.Root refuses it before its type matters
	}{
		{name: "file"},
		{name: "link-to-file"},
		{name: "fifo", want: ErrNotRegular},
		{name: "link-to-fifo", want: ErrNotRegular},
		{name: "dir", want: ErrNotRegular},
		{name: "socket", want: ErrNotRegular},
		{name: "link-to-device", want: ErrNotRegular, outside: true},
		{name: "missing", want: fs.ErrNotExist},
	}
	openers := []struct {
		name string
		open func(name string) (*os.File, error)
	}{
		{"Open", func(name string) (*os.File, error) { return Open(filepath.Join(dir, name)) }},
		{"OpenIn", func(name string) (*os.File, error) { return OpenIn(root, name) }},
	}
	for _, o := range openers {
		for _, tc := range cases {
			t.Run(o.name+"/"+tc.name, func(t *testing.T) {
				type result struct {
					f   *os.File
					err error
				}
				done := make(chan result, 1)
				go func() {
					f, err := o.open(tc.name)
					done <- result{f, err}
				}()
				var r result
				select {
				case r = <-done:
				case <-time.After(time.Second):
					t.Fatal("open blocked")
				}
				if tc.want == nil {
					require.NoError(t, r.err)
					defer r.f.Close()
					assert.False(t, nonblocking(t, r.f), "O_NONBLOCK cleared")
					b, err := io.ReadAll(r.f)
					require.NoError(t, err)
					assert.Equal(t, "bytes", string(b))
					return
				}
				require.Error(t, r.err)
				assert.Nil(t, r.f)
				if tc.outside && o.name == "OpenIn" {
					assert.NotErrorIs(t, r.err, fs.ErrNotExist)
					return
				}
				assert.ErrorIs(t, r.err, tc.want)
			})
		}
	}
	t.Run("Open/device", func(t *testing.T) {
		f, err := Open("/dev/null")
		assert.ErrorIs(t, err, ErrNotRegular)
		assert.Contains(t, err.Error(), "a device")
		assert.Nil(t, f)
	})
}

func nonblocking(t *testing.T, f *os.File) bool {
	t.Helper()
	rc, err := f.SyscallConn()
	require.NoError(t, err)
	var flags int
	var errno syscall.Errno
	require.NoError(t, rc.Control(func(fd uintptr) {
		r, _, e := syscall.Syscall(syscall.SYS_FCNTL, fd, syscall.F_GETFL, 0)
		flags, errno = int(r), e
	}))
	require.Zero(t, errno)
	return flags&syscall.O_NONBLOCK != 0
}
