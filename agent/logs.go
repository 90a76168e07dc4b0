package agent

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
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

// SecondaryConsoles reads /proc/consoles and returns the device names
// (ttyS1, tty0, ...) of the enabled consoles other than /dev/console
// (flag C: the last console= on the command line). The kernel prints to
// all of them, but a process's output only reaches /dev/console; the
// agent writes its log to the others itself, so an operator sees it on
// VGA and on whichever serial port the BMC's serial-over-LAN shows.
func SecondaryConsoles(procConsoles string) []string {
	var out []string
	for _, line := range strings.Split(procConsoles, "\n") {
		name, rest, ok := strings.Cut(strings.TrimSpace(line), " ")
		if !ok || name == "" {
			continue
		}
		open, close := strings.Index(rest, "("), strings.Index(rest, ")")
		if open < 0 || close < open {
			continue
		}
		flags := rest[open+1 : close]
		// E: enabled; C: the console /dev/console writes to.
		if strings.Contains(flags, "E") && !strings.Contains(flags, "C") && !strings.ContainsAny(name, "/.") {
			out = append(out, name)
		}
	}
	return out
}
