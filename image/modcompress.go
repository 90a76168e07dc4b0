package image

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"

	"github.com/klauspost/compress/zstd"
)

// ModuleExt is the suffix of kernel modules in the image. u-root's kmodule
// (used by u-root's init and the agent's loader) picks the decompressor by
// file extension, so the kernel itself needs no CONFIG_MODULE_DECOMPRESS
// (Debian's 6.1 has none).
const ModuleExt = ".zst"

// CompressModules reads the .ko files (paths relative to dir) and returns
// each one zstd-compressed, in the order given. Output is deterministic:
// one frame per file, no checksum-of-time or dictionary, fixed level.
func CompressModules(dir string, files []string) ([][]byte, error) {
	out := make([][]byte, len(files))
	errs := make([]error, len(files))
	// EncodeAll is safe for concurrent use but takes one of the encoder's
	// Concurrency states per call: as many as workers, one file each,
	// keeps a 250-module build to a few seconds.
	workers := runtime.GOMAXPROCS(0)
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithEncoderConcurrency(workers))
	if err != nil {
		return nil, fmt.Errorf("modules: %w", err)
	}
	defer enc.Close()
	work := make(chan int)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range work {
				raw, err := os.ReadFile(filepath.Join(dir, files[i]))
				if err != nil {
					errs[i] = fmt.Errorf("modules: %w", err)
					continue
				}
				out[i] = enc.EncodeAll(raw, make([]byte, 0, len(raw)/3))
			}
		}()
	}
	for i := range files {
		work <- i
	}
	close(work)
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return out, nil
}

// SuffixDep appends ext to every module path of a modules.dep ("a.ko: b.ko
// c.ko" becomes "a.ko.zst: b.ko.zst c.ko.zst"), as depmod writes it for a
// tree of compressed modules.
func SuffixDep(dep []byte, ext string) []byte {
	var b bytes.Buffer
	for _, line := range strings.SplitAfter(string(dep), "\n") {
		body := strings.TrimSuffix(line, "\n")
		mod, rest, ok := strings.Cut(body, ":")
		if !ok {
			b.WriteString(line)
			continue
		}
		b.WriteString(mod + ext + ":")
		for _, d := range strings.Fields(rest) {
			b.WriteString(" " + d + ext)
		}
		if strings.HasSuffix(line, "\n") {
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}
