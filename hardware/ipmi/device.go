package ipmi

import (
	"context"
	"errors"
	"fmt"
	"os"
	"runtime"
	"sync"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// ErrNoDevice says the server has no in-band IPMI: no /dev/ipmi* after
// the drivers were loaded (no BMC, or one the kernel cannot reach).
var ErrNoDevice = errors.New("no in-band IPMI (/dev/ipmi0 absent)")

// devicePaths are where the kernel's ipmi_devintf (or udev) puts the
// first interface.
func devicePaths() []string { return []string{"/dev/ipmi0", "/dev/ipmi/0", "/dev/ipmidev/0"} }

// The kernel's ipmi_devintf interface (include/uapi/linux/ipmi.h) on
// 64-bit targets: struct ipmi_req is 40 bytes, struct ipmi_recv 48.
const (
	ipmiSystemInterfaceAddrType = 0x0c
	ipmiBMCChannel              = 0x0f
	ioctlSendCommand            = 0x8028690d // _IOR('i', 13, struct ipmi_req)
	ioctlReceiveMsgTrunc        = 0xc030690b // _IOWR('i', 11, struct ipmi_recv)
	ipmiResponseRecvType        = 1
	maxResponse                 = 272 // IPMI_MAX_MSG_LENGTH
)

type sysIfaceAddr struct {
	addrType int32
	channel  int16
	lun      uint8
	_        uint8
}

type ipmiMsg struct {
	netfn   uint8
	cmd     uint8
	dataLen uint16
	_       uint32
	data    *byte
}

type ipmiReq struct {
	addr    *sysIfaceAddr
	addrLen uint32
	_       uint32
	msgid   int64
	msg     ipmiMsg
}

type ipmiRecv struct {
	recvType int32
	_        uint32
	addr     *sysIfaceAddr
	addrLen  uint32
	_        uint32
	msgid    int64
	msg      ipmiMsg
}

// Device is an open in-band IPMI interface. Requests are serialised: one
// outstanding message at a time is all ReadLAN needs.
type Device struct {
	f       *os.File
	timeout time.Duration
	mu      sync.Mutex
	seq     int64
}

// Open opens the first in-band IPMI interface that exists; ErrNoDevice
// when none does. timeout bounds each request (a BMC that stopped
// answering must not hold the inventory).
func Open(timeout time.Duration) (*Device, error) {
	if unsafe.Sizeof(uintptr(0)) != 8 {
		return nil, fmt.Errorf("ipmi: in-band IPMI is only implemented for 64-bit targets (%s)", runtime.GOARCH)
	}
	for _, p := range devicePaths() {
		f, err := os.OpenFile(p, os.O_RDWR, 0)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("ipmi: open %s: %w", p, err)
		}
		return &Device{f: f, timeout: timeout}, nil
	}
	return nil, ErrNoDevice
}

// Close closes the interface.
func (d *Device) Close() error { return d.f.Close() }

// Request implements Requester.
func (d *Device) Request(ctx context.Context, netfn, cmd byte, data []byte) ([]byte, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.seq++
	addr := &sysIfaceAddr{addrType: ipmiSystemInterfaceAddrType, channel: ipmiBMCChannel, lun: 0} // LUN 0: the BMC itself
	buf := make([]byte, max(len(data), 1))
	copy(buf, data)
	req := &ipmiReq{addr: addr, addrLen: uint32(unsafe.Sizeof(*addr)), msgid: d.seq,
		msg: ipmiMsg{netfn: netfn, cmd: cmd, dataLen: uint16(len(data)), data: &buf[0]}}
	if err := d.ioctl(ioctlSendCommand, unsafe.Pointer(req)); err != nil {
		return nil, fmt.Errorf("ipmi: send netfn 0x%02x cmd 0x%02x: %w", netfn, cmd, err)
	}
	runtime.KeepAlive(req)
	runtime.KeepAlive(addr)
	runtime.KeepAlive(buf)
	deadline := time.Now().Add(d.timeout)
	if dl, ok := ctx.Deadline(); ok && dl.Before(deadline) {
		deadline = dl
	}
	for {
		wait := time.Until(deadline)
		if wait <= 0 || ctx.Err() != nil {
			return nil, fmt.Errorf("ipmi: netfn 0x%02x cmd 0x%02x: no answer within %s", netfn, cmd, d.timeout)
		}
		// Poll in slices of 100 ms so a cancelled ctx is seen soon.
		n, err := unix.Poll([]unix.PollFd{{Fd: int32(d.f.Fd()), Events: unix.POLLIN}}, int(min(wait, 100*time.Millisecond)/time.Millisecond)+1)
		if err != nil && !errors.Is(err, unix.EINTR) {
			return nil, fmt.Errorf("ipmi: poll: %w", err)
		}
		if n <= 0 {
			continue
		}
		resp, msgid, err := d.receive()
		if err != nil {
			return nil, err
		}
		if msgid != d.seq {
			continue // the answer of an earlier request that timed out
		}
		return resp, nil
	}
}

// receive reads one message from the interface.
func (d *Device) receive() ([]byte, int64, error) {
	addr := &sysIfaceAddr{}
	buf := make([]byte, maxResponse)
	recv := &ipmiRecv{addr: addr, addrLen: uint32(unsafe.Sizeof(*addr)), msg: ipmiMsg{dataLen: uint16(len(buf)), data: &buf[0]}}
	if err := d.ioctl(ioctlReceiveMsgTrunc, unsafe.Pointer(recv)); err != nil {
		return nil, 0, fmt.Errorf("ipmi: receive: %w", err)
	}
	runtime.KeepAlive(addr)
	runtime.KeepAlive(buf)
	if recv.recvType != ipmiResponseRecvType {
		return nil, -1, nil // an event or command for us: not an answer
	}
	n := min(int(recv.msg.dataLen), len(buf))
	return buf[:n], recv.msgid, nil
}

func (d *Device) ioctl(req uintptr, arg unsafe.Pointer) error {
	rc, err := d.f.SyscallConn()
	if err != nil {
		return err
	}
	var errno unix.Errno
	if cerr := rc.Control(func(fd uintptr) {
		_, _, errno = unix.Syscall(unix.SYS_IOCTL, fd, req, uintptr(arg))
	}); cerr != nil {
		return cerr
	}
	if errno != 0 {
		return errno
	}
	return nil
}
