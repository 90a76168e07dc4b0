// Package tftp is a small read-only TFTP server (RFC 1350) with the
// option extension (RFC 2347) and the blksize, timeout, tsize and
// windowsize options (RFC 2348, 2349, 7440). It serves one directory to
// PXE firmware, which fetches a single ~100 KB iPXE binary over it; the
// kernel and initramfs then come over HTTP.
package tftp

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Opcodes (RFC 1350 §5, RFC 2347).
const (
	opRRQ   uint16 = 1
	opWRQ   uint16 = 2
	opDATA  uint16 = 3
	opACK   uint16 = 4
	opERROR uint16 = 5
	opOACK  uint16 = 6
)

// Error codes (RFC 1350 appendix, RFC 2347 §6).
const (
	errUndefined    uint16 = 0
	errNotFound     uint16 = 1
	errAccess       uint16 = 2
	errIllegalOp    uint16 = 4
	errUnknownTID   uint16 = 5
	errOptionRefuse uint16 = 8
)

// Option limits (RFC 2348 §2, 2349 §2, 7440 §3).
const (
	defaultBlockSize = 512
	minBlockSize     = 8
	maxBlockSize     = 65464
	maxWindowSize    = 65535
	maxTimeoutSecs   = 255
	// maxPacket bounds what we read: the largest legal DATA packet.
	maxPacket = 4 + maxBlockSize
)

// packet is one parsed TFTP datagram. Only the fields of its opcode are set.
type packet struct {
	op       uint16
	filename string            // RRQ, WRQ
	mode     string            // RRQ, WRQ, lower-cased
	options  map[string]string // RRQ, WRQ, OACK; names lower-cased
	order    []string          // option names in the order received
	block    uint16            // DATA, ACK
	data     []byte            // DATA
	code     uint16            // ERROR
	msg      string            // ERROR
}

var errShort = errors.New("tftp: packet too short")

// parsePacket decodes one datagram. It never panics on any input (see
// FuzzParsePacket) and copies nothing it does not return.
func parsePacket(b []byte) (*packet, error) {
	if len(b) < 2 {
		return nil, errShort
	}
	p := &packet{op: binary.BigEndian.Uint16(b)}
	body := b[2:]
	switch p.op {
	case opRRQ, opWRQ:
		fields, err := splitStrings(body)
		if err != nil {
			return nil, err
		}
		if len(fields) < 2 {
			return nil, fmt.Errorf("tftp: request needs a filename and a mode, got %d fields", len(fields))
		}
		if len(fields)%2 != 0 {
			return nil, errors.New("tftp: request has an option without a value")
		}
		p.filename, p.mode = fields[0], strings.ToLower(fields[1])
		if p.filename == "" {
			return nil, errors.New("tftp: empty filename")
		}
		if err := p.addOptions(fields[2:]); err != nil {
			return nil, err
		}
	case opOACK:
		fields, err := splitStrings(body)
		if err != nil {
			return nil, err
		}
		if len(fields)%2 != 0 {
			return nil, errors.New("tftp: OACK has an option without a value")
		}
		if err := p.addOptions(fields); err != nil {
			return nil, err
		}
	case opDATA, opACK:
		if len(body) < 2 {
			return nil, errShort
		}
		p.block = binary.BigEndian.Uint16(body)
		if p.op == opDATA {
			p.data = body[2:]
		} else if len(body) != 2 {
			return nil, errors.New("tftp: ACK with trailing bytes")
		}
	case opERROR:
		if len(body) < 2 {
			return nil, errShort
		}
		p.code = binary.BigEndian.Uint16(body)
		// Be lenient about the message: some clients omit its NUL.
		msg, _, _ := bytes.Cut(body[2:], []byte{0})
		p.msg = string(msg)
	default:
		return nil, fmt.Errorf("tftp: unknown opcode %d", p.op)
	}
	return p, nil
}

// splitStrings splits NUL-terminated strings; the last must be terminated.
func splitStrings(b []byte) ([]string, error) {
	if len(b) == 0 || b[len(b)-1] != 0 {
		return nil, errors.New("tftp: strings not NUL-terminated")
	}
	parts := bytes.Split(b[:len(b)-1], []byte{0})
	out := make([]string, len(parts))
	for i, s := range parts {
		out[i] = string(s)
	}
	return out, nil
}

func (p *packet) addOptions(kv []string) error {
	if len(kv) == 0 {
		return nil
	}
	p.options = make(map[string]string, len(kv)/2)
	for i := 0; i < len(kv); i += 2 {
		name := strings.ToLower(kv[i])
		if name == "" {
			return errors.New("tftp: empty option name")
		}
		if _, dup := p.options[name]; dup {
			return fmt.Errorf("tftp: option %q given twice", name)
		}
		p.options[name] = kv[i+1]
		p.order = append(p.order, name)
	}
	return nil
}

// marshal encodes p; parsePacket(p.marshal()) gives p back.
func (p *packet) marshal() []byte {
	b := binary.BigEndian.AppendUint16(nil, p.op)
	switch p.op {
	case opRRQ, opWRQ:
		b = appendString(b, p.filename)
		b = appendString(b, p.mode)
		b = p.appendOptions(b)
	case opOACK:
		b = p.appendOptions(b)
	case opDATA:
		b = binary.BigEndian.AppendUint16(b, p.block)
		b = append(b, p.data...)
	case opACK:
		b = binary.BigEndian.AppendUint16(b, p.block)
	case opERROR:
		b = binary.BigEndian.AppendUint16(b, p.code)
		b = appendString(b, p.msg)
	}
	return b
}

func (p *packet) appendOptions(b []byte) []byte {
	for _, name := range p.order {
		b = appendString(b, name)
		b = appendString(b, p.options[name])
	}
	return b
}

func appendString(b []byte, s string) []byte { return append(append(b, s...), 0) }

func errorPacket(code uint16, msg string) []byte {
	return (&packet{op: opERROR, code: code, msg: msg}).marshal()
}

// dataHeader writes a DATA header for block into b[:4].
func dataHeader(b []byte, block uint16) {
	binary.BigEndian.PutUint16(b, opDATA)
	binary.BigEndian.PutUint16(b[2:], block)
}

// negotiated holds the transfer parameters after option negotiation.
type negotiated struct {
	blockSize  int
	windowSize int
	timeoutSec int // 0: the server's default
	tsize      bool
}

// negotiate reads the options of a request (RFC 2347: unknown options and
// values out of range are ignored, not refused, so the client falls back to
// the defaults) and returns the accepted ones in the order received, for
// the OACK. A timeout above maxTimeout seconds is declined: a client that
// never answers would otherwise hold its transfer for 255 s per try.
func negotiate(p *packet, maxBlock, maxTimeout int) (negotiated, []string, map[string]string) {
	n := negotiated{blockSize: defaultBlockSize, windowSize: 1}
	var order []string
	acc := map[string]string{}
	for _, name := range p.order {
		v, err := strconv.Atoi(p.options[name])
		if err != nil {
			continue
		}
		switch name {
		case "blksize":
			if v < minBlockSize {
				continue
			}
			// RFC 2348: the server may answer with a smaller size than asked.
			n.blockSize = min(v, maxBlock, maxBlockSize)
			acc[name] = strconv.Itoa(n.blockSize)
		case "windowsize":
			if v < 1 || v > maxWindowSize {
				continue
			}
			n.windowSize = v
			acc[name] = strconv.Itoa(v)
		case "timeout":
			if v < 1 || v > min(maxTimeout, maxTimeoutSecs) {
				continue
			}
			n.timeoutSec = v
			acc[name] = strconv.Itoa(v)
		case "tsize":
			// Reads ask with 0; the size is filled in once the file is open.
			if v != 0 {
				continue
			}
			n.tsize = true
			acc[name] = ""
		default:
			continue
		}
		order = append(order, name)
	}
	return n, order, acc
}
