// Package lldp listens for the LLDP frames switches send on a server's
// NICs (AF_PACKET, EtherType 0x88cc), in the ramdisk, so the inventory can
// say which switch port each NIC is cabled to. Decoding is in
// protocol/lldp, which the controller shares.
package lldp

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/anvil-metal/anvil/protocol/lldp"
)

// Options of Collect.
type Options struct {
	// Window bounds the whole collection: switches send every 30 s by
	// default, so a NIC that heard nothing in Window has no LLDP
	// neighbour (or one that is slower than we wait for).
	Window time.Duration
	// Carrier says whether an interface has a link; once every
	// interface with carrier has a frame, Collect returns early. nil
	// is Running (the kernel's IFF_RUNNING: up with carrier).
	Carrier func(name string) bool
	Log     *slog.Logger
}

// poll is how often Collect checks whether it may stop, and how long a
// receive blocks before looking at its context again.
const poll = 200 * time.Millisecond

// Collect listens on every interface of names in parallel and returns
// the TLVs of the first LLDP frame each one heard. Interfaces that cannot
// be listened on (gone, no permission) are logged and skipped: LLDP is
// information, never a reason to fail.
func Collect(ctx context.Context, names []string, o Options) map[string][]lldp.TLV {
	if o.Log == nil {
		o.Log = slog.New(slog.DiscardHandler)
	}
	if o.Carrier == nil {
		o.Carrier = Running
	}
	ctx, cancel := context.WithTimeout(ctx, o.Window)
	defer cancel()
	var mu sync.Mutex
	got := map[string][]lldp.TLV{}
	var wg sync.WaitGroup
	listening := map[string]bool{}
	for _, name := range names {
		s, err := Open(name)
		if err != nil {
			o.Log.InfoContext(ctx, "lldp: not listening", "interface", name, "err", err)
			continue
		}
		listening[name] = true
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer s.Close()
			tlvs, err := s.Next(ctx)
			if err != nil {
				return
			}
			mu.Lock()
			got[name] = tlvs
			mu.Unlock()
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		select {
		case <-done:
			return got
		case <-ctx.Done():
			<-done
			return got
		case <-t.C:
			mu.Lock()
			waiting := false
			for name := range listening {
				if _, ok := got[name]; !ok && o.Carrier(name) {
					waiting = true
				}
			}
			mu.Unlock()
			if !waiting && len(got) > 0 {
				cancel()
			}
		}
	}
}

// Running says whether interface name is up with carrier (IFF_RUNNING),
// in the caller's network namespace (sysfs shows its mounter's).
func Running(name string) bool {
	ifi, err := net.InterfaceByName(name)
	return err == nil && ifi.Flags&net.FlagRunning != 0
}

// PhysicalInterfaces lists the interfaces under dir (/sys/class/net)
// backed by a device: NICs, not loopback, bridges or VLANs.
func PhysicalInterfaces(dir string) ([]string, error) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("lldp: %w", err)
	}
	var out []string
	for _, e := range ents {
		if _, err := os.Stat(filepath.Join(dir, e.Name(), "device")); err == nil {
			out = append(out, e.Name())
		}
	}
	sort.Strings(out)
	return out, nil
}

// Socket is an AF_PACKET socket receiving LLDP frames on one interface.
type Socket struct {
	fd   int
	name string
}

// htons is the network-order EtherType AF_PACKET wants.
func htons(v uint16) uint16 { return v<<8 | v>>8 }

// Open binds an LLDP socket to interface name and joins the nearest-bridge
// multicast group, which NICs filter out otherwise.
func Open(name string) (*Socket, error) {
	ifi, err := net.InterfaceByName(name)
	if err != nil {
		return nil, fmt.Errorf("lldp: %w", err)
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW|unix.SOCK_CLOEXEC, int(htons(lldp.EtherType)))
	if err != nil {
		return nil, fmt.Errorf("lldp: socket on %s: %w", name, err)
	}
	if err := unix.Bind(fd, &unix.SockaddrLinklayer{Protocol: htons(lldp.EtherType), Ifindex: ifi.Index}); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("lldp: bind %s: %w", name, err)
	}
	mc := lldp.Multicast()
	mreq := &unix.PacketMreq{Ifindex: int32(ifi.Index), Type: unix.PACKET_MR_MULTICAST, Alen: 6}
	copy(mreq.Address[:], mc[:])
	if err := unix.SetsockoptPacketMreq(fd, unix.SOL_PACKET, unix.PACKET_ADD_MEMBERSHIP, mreq); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("lldp: join the LLDP group on %s: %w", name, err)
	}
	tv := unix.NsecToTimeval(poll.Nanoseconds())
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("lldp: %s: %w", name, err)
	}
	return &Socket{fd: fd, name: name}, nil
}

// Close closes the socket.
func (s *Socket) Close() error { return unix.Close(s.fd) }

// Next returns the TLVs of the next well-formed LLDP frame, or ctx's
// error. Frames that do not parse, or lack the chassis and port IDs, are
// skipped.
func (s *Socket) Next(ctx context.Context) ([]lldp.TLV, error) {
	buf := make([]byte, 9216)
	for ctx.Err() == nil {
		n, _, err := unix.Recvfrom(s.fd, buf, 0)
		if errors.Is(err, unix.EAGAIN) || errors.Is(err, unix.EINTR) {
			continue
		}
		if errors.Is(err, unix.ENETDOWN) {
			// The link went down (the agent's network setup bounces
			// it): the socket stays bound and hears frames once the
			// link is up again.
			select {
			case <-ctx.Done():
			case <-time.After(poll):
			}
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("lldp: receive on %s: %w", s.name, err)
		}
		if n < 14 || binary.BigEndian.Uint16(buf[12:14]) != lldp.EtherType {
			continue
		}
		tlvs, err := lldp.ParseFrame(buf[:n])
		if err != nil || len(tlvs) < 2 || tlvs[0].Type != lldp.TypeChassisID || tlvs[1].Type != lldp.TypePortID {
			continue
		}
		return tlvs, nil
	}
	return nil, ctx.Err()
}
