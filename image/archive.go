package image

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"os"
	"path"
	"sort"
	"strings"

	"github.com/klauspost/compress/zstd"
	"github.com/u-root/mkuimage/cpio"
)

// Archive collects cpio records and writes them as one reproducible newc
// archive: every record gets mtime 0, uid/gid 0, no inode or device
// numbers, parent directories are added (mode 0755) where missing, and a
// later record for the same path replaces an earlier one.
type Archive struct {
	records []cpio.Record
	index   map[string]int
}

// NewArchive returns an empty archive.
func NewArchive() *Archive { return &Archive{index: map[string]int{}} }

// Add adds (or replaces) a record.
func (a *Archive) Add(r cpio.Record) {
	r = cpio.MakeReproducible(r)
	if i, ok := a.index[r.Name]; ok {
		a.records[i] = r
		return
	}
	a.index[r.Name] = len(a.records)
	a.records = append(a.records, r)
}

// AddDir adds a directory.
func (a *Archive) AddDir(name string, perm uint64) { a.Add(cpio.Directory(name, perm)) }

// AddBytes adds a regular file with the given content.
func (a *Archive) AddBytes(name string, content []byte, perm uint64) {
	a.Add(cpio.StaticRecord(content, cpio.Info{Name: name, Mode: cpio.S_IFREG | perm}))
}

// AddSymlink adds a symbolic link.
func (a *Archive) AddSymlink(name, target string) { a.Add(cpio.Symlink(name, target)) }

// AddFile adds the host file src at name with the given permissions
// (the host file's own mode and times are not used).
func (a *Archive) AddFile(name, src string, perm uint64) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return fmt.Errorf("archive %s: %w", name, err)
	}
	a.AddBytes(name, b, perm)
	return nil
}

// AddArchive adds every record of a newc archive (e.g. u-root's output).
func (a *Archive) AddArchive(r io.ReaderAt) error {
	return cpio.ForEachRecord(cpio.Newc.Reader(r), func(rec cpio.Record) error {
		// Content is read now: the reader may go away before Write.
		if rec.Mode&cpio.S_IFMT == cpio.S_IFREG || rec.Mode&cpio.S_IFMT == cpio.S_IFLNK {
			b, err := io.ReadAll(io.NewSectionReader(rec.ReaderAt, 0, int64(rec.FileSize)))
			if err != nil {
				return fmt.Errorf("read %s: %w", rec.Name, err)
			}
			rec.ReaderAt = bytes.NewReader(b)
		}
		a.Add(rec)
		return nil
	})
}

// Write writes the archive: directories first (sorted, so parents precede
// children), then everything else sorted by path, then the trailer.
func (a *Archive) Write(w io.Writer) error {
	dirs := map[string]bool{}
	var files []cpio.Record
	for _, r := range a.records {
		if r.Mode&cpio.S_IFMT == cpio.S_IFDIR {
			dirs[r.Name] = true
		}
		for d := path.Dir(r.Name); d != "." && d != "/" && d != ""; d = path.Dir(d) {
			if _, ok := a.index[d]; !ok {
				dirs[d] = true
			}
		}
	}
	var dirNames []string
	for d := range dirs {
		dirNames = append(dirNames, d)
	}
	sort.Strings(dirNames)
	for _, r := range a.records {
		if r.Mode&cpio.S_IFMT != cpio.S_IFDIR {
			files = append(files, r)
		}
	}
	sort.Slice(files, func(i, j int) bool { return files[i].Name < files[j].Name })

	rw := cpio.Newc.Writer(w)
	for _, d := range dirNames {
		rec := cpio.MakeReproducible(cpio.Directory(d, 0o755))
		if i, ok := a.index[d]; ok {
			rec = a.records[i]
		}
		if err := rw.WriteRecord(rec); err != nil {
			return fmt.Errorf("cpio %s: %w", d, err)
		}
	}
	for _, r := range files {
		if r.ReaderAt == nil {
			r.ReaderAt = strings.NewReader("")
		}
		if err := rw.WriteRecord(r); err != nil {
			return fmt.Errorf("cpio %s: %w", r.Name, err)
		}
	}
	if err := cpio.WriteTrailer(rw); err != nil {
		return fmt.Errorf("cpio trailer: %w", err)
	}
	return nil
}

// Compression is how an archive is compressed. The kernel detects it per
// archive (CONFIG_RD_GZIP, CONFIG_RD_ZSTD).
type Compression string

const (
	Gzip Compression = "gzip" // gzip -9, fixed header (no name, mtime 0)
	Zstd Compression = "zstd" // klauspost/compress zstd, best level, single-threaded
)

// Ext is the file name extension for c.
func (c Compression) Ext() string {
	if c == Zstd {
		return ".zst"
	}
	return ".gz"
}

// KernelConfig is the kernel option that must be =y to unpack c.
func (c Compression) KernelConfig() string {
	if c == Zstd {
		return "CONFIG_RD_ZSTD"
	}
	return "CONFIG_RD_GZIP"
}

// writer wraps w; both encoders give the same bytes for the same input.
func (c Compression) writer(w io.Writer) (io.WriteCloser, error) {
	switch c {
	case Gzip, "":
		return gzip.NewWriterLevel(w, gzip.BestCompression)
	case Zstd:
		return zstd.NewWriter(w, zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithEncoderConcurrency(1))
	}
	return nil, fmt.Errorf("unknown compression %q (gzip or zstd)", c)
}

// WriteGzip writes the archive gzip-compressed.
func (a *Archive) WriteGzip(w io.Writer) error { return a.WriteCompressed(w, Gzip) }

// WriteCompressed writes the compressed archive.
func (a *Archive) WriteCompressed(w io.Writer, c Compression) error {
	zw, err := c.writer(w)
	if err != nil {
		return err
	}
	if err := a.Write(zw); err != nil {
		return err
	}
	if err := zw.Close(); err != nil {
		return fmt.Errorf("%s: %w", c, err)
	}
	return nil
}

// WriteGzipFile writes the gzip-compressed archive to file atomically and
// returns the uncompressed size.
func (a *Archive) WriteGzipFile(file string) (int64, error) { return a.WriteCompressedFile(file, Gzip) }

// WriteCompressedFile writes the compressed archive to file atomically and
// returns the uncompressed size.
func (a *Archive) WriteCompressedFile(file string, c Compression) (int64, error) {
	var raw countingWriter
	err := writeAtomic(file, func(w io.Writer) error {
		zw, err := c.writer(w)
		if err != nil {
			return err
		}
		if err := a.Write(io.MultiWriter(zw, &raw)); err != nil {
			return err
		}
		return zw.Close()
	})
	return raw.n, err
}

type countingWriter struct{ n int64 }

func (c *countingWriter) Write(p []byte) (int, error) { c.n += int64(len(p)); return len(p), nil }

// writeAtomic writes file through a temporary file in the same directory.
func writeAtomic(file string, write func(io.Writer) error) error {
	f, err := os.CreateTemp(path.Dir(file), ".tmp-"+path.Base(file)+"-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	defer os.Remove(f.Name())
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", file, err)
	}
	if err := f.Chmod(0o644); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", file, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	if err := os.Rename(f.Name(), file); err != nil {
		return fmt.Errorf("write %s: %w", file, err)
	}
	return nil
}

// Concat writes the concatenation of parts to file. The kernel unpacks
// concatenated (individually compressed) cpio archives in order, later
// files overriding earlier ones.
func Concat(file string, parts ...string) error {
	return writeAtomic(file, func(w io.Writer) error {
		for _, p := range parts {
			f, err := os.Open(p)
			if err != nil {
				return err
			}
			_, err = io.Copy(w, f)
			f.Close()
			if err != nil {
				return fmt.Errorf("append %s: %w", p, err)
			}
		}
		return nil
	})
}
