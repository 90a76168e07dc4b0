package kmod

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"

	"golang.org/x/sys/unix"
)

// Uevent is a device the kernel announced (KOBJ_ADD with a MODALIAS), or,
// with Lost set, word that events were dropped and sysfs must be read
// again.
type Uevent struct {
	Action   string // "add"
	DevPath  string // under /sys, e.g. /devices/pci0000:00/0000:00:03.0
	Modalias string
	Lost     bool
}

// ParseUevent reads one kernel uevent datagram: "ACTION@DEVPATH", then
// NUL-separated KEY=VALUE pairs. Messages from udev's monitor (they start
// with "libudev") are refused: only the kernel's are trusted here.
func ParseUevent(b []byte) (Uevent, error) {
	var ev Uevent
	fields := bytes.Split(b, []byte{0})
	head := string(fields[0])
	action, devpath, ok := strings.Cut(head, "@")
	if !ok || action == "" || !strings.HasPrefix(devpath, "/") {
		return ev, fmt.Errorf("uevent: header %q is not ACTION@DEVPATH", truncate(head, 64))
	}
	for _, f := range fields[1:] {
		k, v, ok := strings.Cut(string(f), "=")
		if !ok {
			continue
		}
		switch k {
		case "ACTION":
			ev.Action = v
		case "DEVPATH":
			ev.DevPath = v
		case "MODALIAS":
			ev.Modalias = v
		}
	}
	if ev.Action == "" {
		ev.Action = action
	}
	if ev.DevPath == "" {
		ev.DevPath = devpath
	}
	// A path that climbs out of /sys would make coldplug read files
	// elsewhere; the kernel never sends one.
	if ev.Action != action || ev.DevPath != devpath || strings.Contains(ev.DevPath, "/../") || strings.HasSuffix(ev.DevPath, "/..") {
		return Uevent{}, fmt.Errorf("uevent: header %q disagrees with ACTION=%q DEVPATH=%q", truncate(head, 64), truncate(ev.Action, 16), truncate(ev.DevPath, 64))
	}
	return ev, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "..."
	}
	return s
}

// WantsDriver keeps the events coldplug acts on: a device added with a
// modalias.
func WantsDriver(ev Uevent) bool { return ev.Action == "add" && ev.Modalias != "" }

// ListenUevents subscribes to the kernel's device events and sends those
// keep accepts until ctx ends. The socket is open
// when it returns, so a device added after that is not missed. When the
// channel is full (nobody reading: between two coldplug passes) or the
// socket overflowed, events are dropped and a Lost event follows, so the
// reader knows to look at sysfs again.
func ListenUevents(ctx context.Context, log *slog.Logger, keep func(Uevent) bool) (<-chan Uevent, error) {
	fd, err := unix.Socket(unix.AF_NETLINK, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC|unix.SOCK_NONBLOCK, unix.NETLINK_KOBJECT_UEVENT)
	if err != nil {
		return nil, fmt.Errorf("uevent socket: %w", err)
	}
	// Group 1 is the kernel's broadcast (udev re-sends on group 2).
	if err := unix.Bind(fd, &unix.SockaddrNetlink{Family: unix.AF_NETLINK, Groups: 1}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("uevent bind: %w", err)
	}
	// A boot adds hundreds of devices in bursts; as root the buffer may
	// exceed rmem_max. Failing that the default one will do.
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, 4<<20); err != nil {
		_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 4<<20)
	}
	// Through Go's poller, so that closing the file ends a blocked read
	// (shutdown(2) does not wake a netlink socket).
	f := os.NewFile(uintptr(fd), "uevents")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("uevent socket: %w", err)
	}
	out := make(chan Uevent, 256)
	go func() {
		<-ctx.Done()
		f.Close()
	}()
	go func() {
		defer close(out)
		buf := make([]byte, 64<<10)
		lost := false
		// send delivers ev, after the Lost marker if events were dropped;
		// a Lost ev is that marker.
		send := func(ev Uevent) {
			if lost {
				select {
				case out <- Uevent{Lost: true}:
					lost = false
				default:
					return
				}
			}
			if ev.Lost {
				return
			}
			select {
			case out <- ev:
			default:
				lost = true
			}
		}
		for ctx.Err() == nil {
			var n int
			var from unix.Sockaddr
			var err error
			if rerr := rc.Read(func(fd uintptr) bool {
				n, from, err = unix.Recvfrom(int(fd), buf, 0)
				return !errors.Is(err, unix.EAGAIN)
			}); rerr != nil {
				return // closed: ctx ended
			}
			if errors.Is(err, unix.ENOBUFS) {
				lost = true
				send(Uevent{Lost: true})
				continue
			}
			if errors.Is(err, unix.EINTR) {
				continue
			}
			if err != nil || n == 0 {
				if ctx.Err() == nil {
					log.Warn("uevents: stopped listening", "err", err)
				}
				return
			}
			// Only the kernel (port 0) speaks for the devices.
			if sa, ok := from.(*unix.SockaddrNetlink); !ok || sa.Pid != 0 {
				continue
			}
			ev, err := ParseUevent(buf[:n])
			if err != nil {
				log.Debug("uevents: bad message", "err", err)
				continue
			}
			if keep(ev) {
				send(ev)
			}
		}
	}()
	return out, nil
}
