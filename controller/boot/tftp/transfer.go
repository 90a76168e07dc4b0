package tftp

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"time"
)

// transfer is one read, sent from its own socket to one client.
type transfer struct {
	conn      *net.UDPConn
	client    netip.AddrPort
	blockSize int
	window    int
	timeout   time.Duration // once the client has acknowledged something
	retries   int
	// Until the client's first ACK, which a forged source never sends,
	// the server's own timeout and fewer tries apply (Config.SilentTries).
	silentTimeout time.Duration
	silentTries   int
	answered      bool
	deadline      time.Time // Config.MaxLifetime after the request
	rbuf          []byte
}

var (
	errGaveUp = errors.New("tftp: client stopped answering")
	// errSilent is errGaveUp for a client that never acknowledged anything.
	errSilent   = fmt.Errorf("%w (it acknowledged nothing)", errGaveUp)
	errLifetime = errors.New("tftp: transfer exceeded its maximum lifetime")
)

// giveUp says whether to stop after a packet was sent sent times without
// being acknowledged (nil: send it again).
func (t *transfer) giveUp(sent int) error {
	if !t.answered {
		if sent >= t.silentTries {
			return errSilent
		}
		return nil
	}
	if sent > t.retries {
		return errGaveUp
	}
	return nil
}

// readChunk is how much of the file one read fetches.
const readChunk = 256 << 10

func (t *transfer) send(b []byte) error {
	_, err := t.conn.WriteToUDPAddrPort(b, t.client)
	return err
}

// run sends an OACK if options were accepted, then the file in windows of
// t.window blocks (RFC 7440): every ACK moves the window to the block after
// it; a timeout resends from the first unacknowledged block. Duplicate or
// old ACKs are ignored, never answered, so the "Sorcerer's Apprentice"
// doubling of RFC 1350 cannot happen. Block numbers wrap from 65535 to 0.
// It returns the bytes sent (counting the final window once).
func (t *transfer) run(f io.ReaderAt, size int64, order []string, acc map[string]string) (int64, error) {
	t.rbuf = make([]byte, maxPacket)
	if len(order) > 0 {
		oack := (&packet{op: opOACK, order: order, options: acc}).marshal()
		if err := t.exchange(oack, 0, 0); err != nil {
			var ce *clientError
			if errors.As(err, &ce) {
				// UEFI PXE asks for tsize, reads the OACK and ends the
				// transfer: a size probe, followed by the real read.
				return 0, fmt.Errorf("%w: %w", ErrSizeProbe, err)
			}
			return 0, err
		}
	}
	// Blocks are 1..last; the last is short (possibly empty) and ends the transfer.
	last := uint64(size)/uint64(t.blockSize) + 1
	buf := make([]byte, 4+t.blockSize)
	// The file is read in chunks of whole blocks, not one read per block:
	// with 512-byte blocks that is most of the per-packet cost.
	chunkBlocks := max(1, readChunk/t.blockSize)
	chunk := make([]byte, chunkBlocks*t.blockSize)
	chunkFirst, chunkLen := uint64(0), -1 // first block in chunk; bytes valid
	var acked uint64
	sent := 0 // times the current window went out
	for acked < last {
		end := min(acked+uint64(t.window), last)
		for b := acked + 1; b <= end; b++ {
			if chunkLen < 0 || b < chunkFirst || b >= chunkFirst+uint64(chunkBlocks) {
				chunkFirst = b
				n, err := f.ReadAt(chunk, int64(b-1)*int64(t.blockSize))
				if err != nil && !errors.Is(err, io.EOF) {
					t.send(errorPacket(errUndefined, "read error"))
					return int64(acked) * int64(t.blockSize), fmt.Errorf("tftp: read: %w", err)
				}
				chunkLen = n
			}
			from := int(b-chunkFirst) * t.blockSize
			n := copy(buf[4:], chunk[min(from, chunkLen):min(from+t.blockSize, chunkLen)])
			dataHeader(buf, uint16(b))
			if err := t.send(buf[:4+n]); err != nil {
				return int64(acked) * int64(t.blockSize), fmt.Errorf("tftp: send: %w", err)
			}
		}
		sent++
		got, err := t.awaitAck(acked, end)
		if errors.Is(err, errTimeout) {
			if err := t.giveUp(sent); err != nil {
				return int64(acked) * int64(t.blockSize), err
			}
			continue
		}
		if err != nil {
			return int64(acked) * int64(t.blockSize), err
		}
		acked, sent = got, 0
	}
	return size, nil
}

var errTimeout = errors.New("tftp: timeout")

// ErrSizeProbe marks a read the client ended right after the option
// acknowledgement, without wanting data (UEFI firmware learns the size
// that way before the real read): not a failure worth reporting.
var ErrSizeProbe = errors.New("tftp: size probe")

// clientError is an ERROR packet from the client.
type clientError struct {
	code uint16
	msg  string
}

func (e *clientError) Error() string {
	return fmt.Sprintf("tftp: client aborted: code %d: %s", e.code, e.msg)
}

// exchange sends pkt and waits for the ACK of block want (used for the
// OACK, acknowledged by ACK 0), resending on timeout.
func (t *transfer) exchange(pkt []byte, acked, want uint64) error {
	for sent := 1; ; sent++ {
		if err := t.send(pkt); err != nil {
			return fmt.Errorf("tftp: send: %w", err)
		}
		_, err := t.awaitAck(acked, want)
		if err == nil {
			return nil
		}
		if !errors.Is(err, errTimeout) {
			return err
		}
		if err := t.giveUp(sent); err != nil {
			return err
		}
	}
}

// awaitAck waits up to one timeout for an ACK of a block in (acked, end]
// (or of block 0 when acked == end == 0, the OACK's) and returns the
// highest block it acknowledges. Past the transfer's deadline it returns
// errLifetime, however busy the client keeps it.
func (t *transfer) awaitAck(acked, end uint64) (uint64, error) {
	now := time.Now()
	if !now.Before(t.deadline) {
		return 0, errLifetime
	}
	wait := t.timeout
	if !t.answered {
		wait = t.silentTimeout
	}
	deadline := now.Add(wait)
	if deadline.After(t.deadline) {
		deadline = t.deadline
	}
	if err := t.conn.SetReadDeadline(deadline); err != nil {
		return 0, err
	}
	for {
		n, from, err := t.conn.ReadFromUDPAddrPort(t.rbuf)
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				if !time.Now().Before(t.deadline) {
					return 0, errLifetime
				}
				return 0, errTimeout
			}
			return 0, fmt.Errorf("tftp: receive: %w", err)
		}
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		if from != t.client {
			// RFC 1350 §4: a packet from another TID gets an error and
			// leaves this transfer alone.
			t.conn.WriteToUDPAddrPort(errorPacket(errUnknownTID, "unknown transfer ID"), from)
			continue
		}
		p, err := parsePacket(t.rbuf[:n])
		if err != nil {
			t.send(errorPacket(errIllegalOp, err.Error()))
			return 0, err
		}
		switch p.op {
		case opACK:
			if acked == 0 && end == 0 {
				if p.block == 0 {
					t.answered = true
					return 0, nil
				}
				continue
			}
			// The 16-bit number names the block within the window just sent.
			d := uint64(uint16(p.block - uint16(acked)))
			if d >= 1 && acked+d <= end {
				t.answered = true
				return acked + d, nil
			}
			// An old or duplicate ACK: wait on.
		case opERROR:
			return 0, &clientError{code: p.code, msg: p.msg}
		default:
			t.send(errorPacket(errIllegalOp, "expected an ACK"))
			return 0, fmt.Errorf("tftp: client sent opcode %d during a read", p.op)
		}
	}
}
