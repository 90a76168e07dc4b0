package health

import (
	"fmt"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/anvil-metal/anvil/hardware/internal/kernelabi"
)

// ethtoolGLinkSettings is ETHTOOL_GLINKSETTINGS (linux/ethtool.h).
const ethtoolGLinkSettings = 0x4c

// SysLinkReader reads link settings with the SIOCETHTOOL ioctl, as
// `ethtool IFACE` does, so ethtool is not needed in the ramdisk. It only
// reads.
type SysLinkReader struct{}

// ifreqData is struct ifreq with ifr_data: the name, then a pointer in
// the union (40 bytes on 64-bit).
type ifreqData struct {
	Name [unix.IFNAMSIZ]byte
	Data uintptr
	_    [16]byte
}

// LinkSettings runs the kernel's two-step handshake: a first call with no
// mask words makes it answer how many it uses (as a negative count), the
// second reads the masks.
func (SysLinkReader) LinkSettings(iface string) ([]byte, error) {
	if len(iface) >= unix.IFNAMSIZ {
		return nil, fmt.Errorf("interface name %q too long", iface)
	}
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, fmt.Errorf("ethtool %s: socket: %w", iface, err)
	}
	defer unix.Close(fd)
	buf, free, err := kernelabi.Buffer(linkSettingsHeader + 3*4*maxLinkModeWords)
	if err != nil {
		return nil, err
	}
	defer free()
	var ifr ifreqData
	copy(ifr.Name[:], iface)
	ifr.Data = uintptr(unsafe.Pointer(&buf[0]))
	call := func(nwords int8) error {
		clear(buf)
		buf[0] = ethtoolGLinkSettings
		buf[nwordsOffset] = byte(nwords)
		if _, _, e := unix.Syscall(unix.SYS_IOCTL, uintptr(fd), unix.SIOCETHTOOL, uintptr(unsafe.Pointer(&ifr))); e != 0 {
			return fmt.Errorf("ethtool %s: get link settings: %w", iface, e)
		}
		return nil
	}
	if err := call(0); err != nil {
		return nil, err
	}
	n := -int8(buf[nwordsOffset])
	if n <= 0 || n > maxLinkModeWords {
		return nil, fmt.Errorf("ethtool %s: the kernel asks for %d mask words", iface, n)
	}
	if err := call(n); err != nil {
		return nil, err
	}
	return append([]byte(nil), buf[:linkSettingsHeader+3*4*int(n)]...), nil
}
