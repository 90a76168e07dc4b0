// Package lldp decodes LLDP (IEEE 802.1AB) frames into their TLVs and
// the TLVs into the names Ironic's parse_lldp and local_link_connection
// inspection hooks use (switch_chassis_id, switch_port_id, ...). It sits
// beside protocol, importing nothing of ours, because both sides need it:
// the agent splits the frames it hears into raw TLVs for the inventory,
// and the controller turns the raw TLVs into plugin data and ports'
// local_link_connection, as Ironic does on its side.
package lldp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"unicode/utf8"

	"github.com/anvil-metal/anvil/protocol"
)

// EtherType of LLDP frames, and the nearest-bridge multicast address they
// are sent to.
const EtherType = 0x88cc

// Multicast is the nearest-bridge group address LLDP frames go to.
func Multicast() [6]byte { return [6]byte{0x01, 0x80, 0xc2, 0x00, 0x00, 0x0e} }

// TLV types of the basic management set.
const (
	TypeEnd         = 0
	TypeChassisID   = 1
	TypePortID      = 2
	TypeTTL         = 3
	TypePortDesc    = 4
	TypeSysName     = 5
	TypeSysDesc     = 6
	TypeSysCaps     = 7
	TypeMgmtAddress = 8
	TypeOrgSpecific = 127
	// MaxValue is the longest TLV value the 9-bit length allows.
	MaxValue = protocol.LLDPMaxValue
	// maxTLVs bounds what one frame may carry (a 1500-byte frame holds
	// at most 750 empty TLVs).
	maxTLVs = 750
)

// TLV is one raw TLV; see protocol.LLDPTLV.
type TLV = protocol.LLDPTLV

// ErrNotLLDP is a frame that is not LLDP.
var ErrNotLLDP = errors.New("lldp: not an LLDP frame")

// ParseFrame splits an Ethernet frame (destination, source, EtherType
// 0x88cc, LLDPDU) into its TLVs, up to the End TLV (not included).
func ParseFrame(frame []byte) ([]TLV, error) {
	if len(frame) < 14 || binary.BigEndian.Uint16(frame[12:14]) != EtherType {
		return nil, ErrNotLLDP
	}
	return ParseTLVs(frame[14:])
}

// ParseTLVs splits an LLDPDU into its TLVs. A TLV running past the end
// is an error; the TLVs before it are returned with it.
func ParseTLVs(pdu []byte) ([]TLV, error) {
	var out []TLV
	for len(pdu) > 0 {
		if len(pdu) < 2 {
			return out, errors.New("lldp: truncated TLV header")
		}
		h := binary.BigEndian.Uint16(pdu)
		typ, n := int(h>>9), int(h&0x1ff)
		if len(pdu) < 2+n {
			return out, fmt.Errorf("lldp: TLV type %d claims %d bytes, %d left", typ, n, len(pdu)-2)
		}
		if typ == TypeEnd {
			return out, nil
		}
		if len(out) == maxTLVs {
			return out, errors.New("lldp: too many TLVs")
		}
		out = append(out, TLV{Type: typ, Value: append([]byte(nil), pdu[2:2+n]...)})
		pdu = pdu[2+n:]
	}
	return out, nil
}

// mac formats 6 bytes as Ironic does (netaddr's mac_unix_expanded).
func mac(b []byte) string { return net.HardwareAddr(b).String() }

// ianaAddress decodes an IANA address family and address (RFC 3232): 1
// IPv4, 2 IPv6, 6 MAC (802).
func ianaAddress(family byte, b []byte) (string, bool) {
	switch {
	case family == 1 && len(b) >= 4:
		return netip.AddrFrom4([4]byte(b[:4])).String(), true
	case family == 2 && len(b) >= 16:
		return netip.AddrFrom16([16]byte(b[:16])).String(), true
	case family == 6 && len(b) >= 6:
		return mac(b[:6]), true
	}
	return "", false
}

// text is a TLV string; invalid UTF-8 is refused, as Ironic's
// GreedyString("utf8") does.
func text(b []byte) (string, bool) {
	if !utf8.Valid(b) {
		return "", false
	}
	return strings.TrimRight(string(b), "\x00"), true
}

// ID decodes a chassis ID or port ID TLV. Subtypes (chassis / port):
// 4 / 3 MAC address, 5 / 4 network address, others strings.
func ID(value []byte, chassis bool) (subtype byte, id string, ok bool) {
	if len(value) < 2 {
		return 0, "", false
	}
	subtype, b := value[0], value[1:]
	macSub, addrSub := byte(3), byte(4)
	if chassis {
		macSub, addrSub = 4, 5
	}
	switch {
	case subtype == macSub:
		if len(b) != 6 {
			return subtype, "", false
		}
		return subtype, mac(b), true
	case subtype == addrSub:
		s, ok := ianaAddress(b[0], b[1:])
		return subtype, s, ok
	case subtype >= 1 && subtype <= 7 && (chassis || subtype != 6):
		s, ok := text(b)
		return subtype, s, ok
	}
	return subtype, "", false
}

// ChassisMACSubtype is the chassis ID subtype of a MAC address, the only
// one Ironic takes as a port's switch_id.
const ChassisMACSubtype = 4
