package agent

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// maxLogsBytes bounds the compressed archive: the result travels in a
// heartbeat (protocol.MaxMessageBytes, 4 MiB) after base64 (4/3).
const maxLogsBytes = 2 << 20

// SystemLogs collects the agent's own log file and the kernel log.
type SystemLogs struct {
	// LogFile is the agent's log file; "" leaves it out.
	LogFile string
	// Kmsg is the kernel log device, normally /dev/kmsg; "" skips it.
	Kmsg string
	// Dmesg is the dmesg program used when Kmsg cannot be read; "" looks
	// "dmesg" up in PATH.
	Dmesg string
}

var _ LogCollector = SystemLogs{}

// Collect implements LogCollector. Sources that cannot be read are noted in
// errors.txt inside the archive rather than failing the command: partial
// logs of a failed clean are still what the operator wants.
func (s SystemLogs) Collect(ctx context.Context) ([]byte, error) {
	type entry struct {
		name string
		data []byte
	}
	var entries []entry
	var problems []string
	if s.LogFile != "" {
		if b, err := os.ReadFile(s.LogFile); err != nil {
			problems = append(problems, fmt.Sprintf("agent log %s: %v", s.LogFile, err))
		} else {
			entries = append(entries, entry{"anvil-agent.log", b})
		}
	}
	if k, err := s.kernelLog(ctx); err != nil {
		problems = append(problems, fmt.Sprintf("kernel log: %v", err))
	} else {
		entries = append(entries, entry{"dmesg.txt", k})
	}
	if len(problems) > 0 {
		entries = append(entries, entry{"errors.txt", []byte(strings.Join(problems, "\n") + "\n")})
	}
	// Keep the tails: the end of a log is where a failure is. Halve until
	// the archive fits in a heartbeat.
	for keep := 4 << 20; keep >= 4<<10; keep /= 2 {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		tw := tar.NewWriter(zw)
		now := time.Now()
		for _, e := range entries {
			data := e.data
			if len(data) > keep {
				data = data[len(data)-keep:]
			}
			if err := tw.WriteHeader(&tar.Header{Name: e.name, Mode: 0o644, Size: int64(len(data)), ModTime: now, Typeflag: tar.TypeReg}); err != nil {
				return nil, fmt.Errorf("logs archive: %w", err)
			}
			if _, err := tw.Write(data); err != nil {
				return nil, fmt.Errorf("logs archive: %w", err)
			}
		}
		if err := tw.Close(); err != nil {
			return nil, fmt.Errorf("logs archive: %w", err)
		}
		if err := zw.Close(); err != nil {
			return nil, fmt.Errorf("logs archive: %w", err)
		}
		if buf.Len() <= maxLogsBytes {
			return buf.Bytes(), nil
		}
	}
	return nil, errors.New("logs archive: too large even when truncated")
}

func (s SystemLogs) kernelLog(ctx context.Context) ([]byte, error) {
	var kerr error
	if s.Kmsg != "" {
		b, err := readKmsg(s.Kmsg)
		if err == nil {
			return b, nil
		}
		kerr = err
	}
	dmesg := s.Dmesg
	if dmesg == "" {
		p, err := exec.LookPath("dmesg")
		if err != nil {
			return nil, errors.Join(kerr, fmt.Errorf("no dmesg: %w", err))
		}
		dmesg = p
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, dmesg).Output()
	if err != nil {
		return nil, errors.Join(kerr, fmt.Errorf("%s: %w", dmesg, err))
	}
	return out, nil
}

// readKmsg reads every record buffered in /dev/kmsg without blocking: each
// read returns one record, and EAGAIN means the buffer is drained.
func readKmsg(path string) ([]byte, error) {
	fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_NONBLOCK|syscall.O_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	defer syscall.Close(fd)
	var out bytes.Buffer
	rec := make([]byte, 16<<10)
	for {
		n, err := syscall.Read(fd, rec)
		switch {
		case errors.Is(err, syscall.EAGAIN):
			return out.Bytes(), nil
		case errors.Is(err, syscall.EPIPE):
			// The ring overwrote records we had not read yet; keep going.
			continue
		case errors.Is(err, syscall.EINTR):
			continue
		case err != nil:
			if out.Len() > 0 {
				return out.Bytes(), nil
			}
			return nil, fmt.Errorf("read %s: %w", path, err)
		case n == 0:
			return out.Bytes(), nil
		}
		out.WriteString(formatKmsg(rec[:n]))
	}
}

// formatKmsg turns "6,1234,5678901,-;message\n" into "[    5.678901] message".
func formatKmsg(rec []byte) string {
	head, msg, ok := strings.Cut(string(rec), ";")
	if !ok {
		return string(rec)
	}
	// Continuation lines (" KEY=value") follow the message; drop them.
	msg, _, _ = strings.Cut(msg, "\n")
	fields := strings.Split(head, ",")
	if len(fields) >= 3 {
		if usec, err := strconv.ParseUint(fields[2], 10, 64); err == nil {
			return fmt.Sprintf("[%5d.%06d] %s\n", usec/1e6, usec%1e6, msg)
		}
	}
	return msg + "\n"
}

// Consoles is where, besides /dev/console, the agent's output goes.
type Consoles struct {
	// Log are enabled kernel consoles other than /dev/console (VGA's
	// tty0, a second serial console): the kernel prints there already,
	// the agent adds its log.
	Log []string
	// Mirror are serial ports a BMC's serial-over-LAN may show (ttyS0,
	// ttyS1) that exist but are no kernel console: the agent copies the
	// kernel's messages (from /dev/kmsg, from the start of the boot) and
	// its log there. Linux's 8250 driver prints kernel messages on only
	// one serial port, however many console= name.
	Mirror []string
}

// FindConsoles reads /proc/consoles (procConsoles: its contents) and, for
// ttyS0 and ttyS1, <sysRoot>/sys/class/tty/ttySN/type (0: no UART
// behind the port, as for ttyS1 on a machine with one serial port; a
// kernel console there would wait ~10 ms per character for a UART that
// never answers, which is why the boot command line names only ttyS0).
func FindConsoles(procConsoles, sysRoot string) Consoles {
	var c Consoles
	kernel := map[string]bool{}
	for _, line := range strings.Split(procConsoles, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || name == "" || strings.ContainsAny(name, "/.") {
			continue
		}
		open, end := strings.Index(rest, "("), strings.Index(rest, ")")
		if open < 0 || end < open {
			continue
		}
		flags := rest[open+1 : end]
		if !strings.Contains(flags, "E") { // E: enabled
			continue
		}
		kernel[name] = true
		if !strings.Contains(flags, "C") { // C: /dev/console
			c.Log = append(c.Log, name)
		}
	}
	for _, port := range []string{"ttyS0", "ttyS1"} {
		typ, err := os.ReadFile(filepath.Join(sysRoot, "sys", "class", "tty", port, "type"))
		if err != nil || kernel[port] {
			continue
		}
		if t := strings.TrimSpace(string(typ)); t != "" && t != "0" {
			c.Mirror = append(c.Mirror, port)
		}
	}
	return c
}

// kmsgLine formats one /dev/kmsg record ("6,339,5140900,-;text\n
// continuation...") the way the kernel prints it on a console:
// "[    5.140900] text". ok is false for records it cannot read.
func kmsgLine(record string) (string, bool) {
	prefix, msg, ok := strings.Cut(record, ";")
	if !ok {
		return "", false
	}
	f := strings.Split(prefix, ",")
	if len(f) < 3 {
		return "", false
	}
	us, err := strconv.ParseUint(f[2], 10, 64)
	if err != nil {
		return "", false
	}
	msg, _, _ = strings.Cut(msg, "\n") // continuation lines are dictionary key=value pairs
	return fmt.Sprintf("[%5d.%06d] %s\n", us/1e6, us%1e6, msg), true
}

// CopyKmsg copies the kernel log from kmsg (/dev/kmsg: the records since
// boot, then new ones as they come) to w, formatted as on a console, until
// ctx ends or kmsg fails.
func CopyKmsg(ctx context.Context, kmsg string, w io.Writer) error {
	f, err := os.Open(kmsg)
	if err != nil {
		return fmt.Errorf("kernel log: %w", err)
	}
	go func() { <-ctx.Done(); f.Close() }()
	buf := make([]byte, 8192) // one record per read; the kernel caps them below this
	for {
		n, err := f.Read(buf)
		if errors.Is(err, syscall.EPIPE) {
			continue // records overwritten before we read them
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return fmt.Errorf("kernel log: %w", err)
		}
		if line, ok := kmsgLine(string(buf[:n])); ok {
			if _, err := io.WriteString(w, line); err != nil {
				return fmt.Errorf("kernel log: %w", err)
			}
		}
	}
}

// AsyncWriter writes to W from its own goroutine, so a console that
// stalls (a UART nobody drains, a flow-controlled port) cannot block the
// agent; what does not fit in the queue is dropped.
type AsyncWriter struct {
	ch chan []byte
}

// NewAsyncWriter starts the goroutine writing to w; queue bounds the
// number of pending writes.
func NewAsyncWriter(w io.Writer, queue int) *AsyncWriter {
	a := &AsyncWriter{ch: make(chan []byte, queue)}
	go func() {
		for b := range a.ch {
			_, _ = w.Write(b)
		}
	}()
	return a
}

// Write implements io.Writer; it never blocks and never fails.
func (a *AsyncWriter) Write(p []byte) (int, error) {
	select {
	case a.ch <- append([]byte(nil), p...):
	default:
	}
	return len(p), nil
}
