package textlist

import (
	"bufio"
	"fmt"
	"io"
	"strings"
)

// Lines calls fn with each line of a file people write (htpasswd, the
// users file): trimmed, numbered from 1, blank lines and "#" comments
// left out. It stops at fn's first error, which it returns as is; an
// error reading r is returned as "read <what>: ...".
func Lines(r io.Reader, what string, fn func(n int, line string) error) error {
	sc := bufio.NewScanner(r)
	n := 0
	for sc.Scan() {
		n++
		t := strings.TrimSpace(sc.Text())
		if t == "" || strings.HasPrefix(t, "#") {
			continue
		}
		if err := fn(n, t); err != nil {
			return err
		}
	}
	if err := sc.Err(); err != nil {
		return fmt.Errorf("read %s: %w", what, err)
	}
	return nil
}
