package tftp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/anvil-metal/anvil/controller/limits"
	"github.com/anvil-metal/anvil/internal/regularfile"
)

// Config configures a Server. Zero values take the defaults given.
//
// The limits are there because a read request costs its sender one
// datagram, needs no answer (so its source can be forged) and costs the
// server a slot, a socket and retransmissions: no source, forged or not,
// may hold more than its share of slots, nor hold one for long without
// acknowledging anything.
type Config struct {
	// Root is the only directory served; names are resolved inside it and
	// nothing outside it (by "..", absolute path or symlink) can be read.
	// Only regular files are served.
	Root string
	// MaxTransfers bounds concurrent transfers (default 128); requests
	// beyond it get an error so a client retries rather than starving all.
	MaxTransfers int
	// MaxPerSource bounds the transfers one source address holds at once
	// (default 8): a node needs one or two at a time (UEFI asks for the
	// size, then reads), so one address cannot take every slot.
	MaxPerSource int
	// Known, if set, says whether an address belongs to a node being
	// booted (the boot service's DHCP gave it out or saw it). Sources it
	// does not know together hold at most MaxUnknown transfers, so a
	// booting node finds a free slot however many requests come from
	// forged addresses. Nil: all sources are alike and MaxUnknown unused.
	Known func(netip.Addr) bool
	// MaxUnknown is the unknown sources' share (default 3/4 of
	// MaxTransfers).
	MaxUnknown int
	// RequestRate and RequestBurst bound the packets one source address
	// may send to the server's port: a token bucket of RequestBurst
	// (default 20) refilled at RequestRate per second (default 10;
	// negative: no limit). Packets beyond it are dropped unanswered, which
	// bounds what a flood costs in replies, log lines and sockets.
	RequestRate  float64
	RequestBurst int
	// Timeout is the retransmission timeout when the client sets none
	// (default 1 s); Retries how often a packet is sent again before the
	// transfer is abandoned (default 5).
	Timeout time.Duration
	Retries int
	// MaxTimeout caps the client's timeout option (RFC 2349 allows up to
	// 255 s; default 5 s): a larger one is declined (left out of the
	// OACK, as RFC 2347 allows), so Timeout applies.
	MaxTimeout time.Duration
	// SilentTries is how often the first packet (OACK or block 1) is
	// sent, Timeout apart, before a client that has acknowledged nothing
	// is given up (default 3, at most Retries+1): a forged source never
	// acknowledges, so its request holds a slot for seconds. Once the
	// client has acknowledged, the negotiated timeout and Retries apply.
	SilentTries int
	// MaxLifetime ends a transfer that runs longer, whatever the client
	// does, with an error to it (default 10 min: a 20 MB initramfs goes
	// over TFTP to Secure Boot nodes, at one 1 KB block per round trip).
	MaxLifetime time.Duration
	// MaxBlockSize caps the blksize option (default and ceiling 65464).
	MaxBlockSize int
	Logger       *slog.Logger
	// OnTransfer, if set, is called once per finished or failed read.
	OnTransfer func(Transfer)
	// Dropped, if set, is called for every request refused or transfer
	// abandoned, with one of the Drop* reasons (for a metric).
	Dropped func(reason string)
	// Files are served from memory by name (e.g. "grub/grub.cfg"), ahead
	// of Root: small configuration the service generates.
	Files map[string][]byte
	// Dynamic, if set, is asked for every name not in Files, ahead of
	// Root, with the client's address: ok false passes the name on to
	// Root; an error is reported to the client as "file not found".
	Dynamic func(ctx context.Context, name string, client netip.Addr) (data []byte, ok bool, err error)
}

// Transfer describes one finished (Err nil) or failed read.
type Transfer struct {
	Remote   netip.AddrPort
	File     string
	Bytes    int64
	Duration time.Duration
	Err      error
}

// Server is a read-only TFTP server. Use New, then Serve or ListenAndServe.
type Server struct {
	cfg   Config
	root  *os.Root
	log   *slog.Logger
	rate  *limits.Keyed // RequestRate per source address (nil: no limit)
	warn  *throttle
	slots slots
}

// New opens the root directory.
func New(cfg Config) (*Server, error) {
	if cfg.Root == "" {
		return nil, errors.New("tftp: no root directory")
	}
	root, err := os.OpenRoot(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("tftp: open root: %w", err)
	}
	cfg = withDefaults(cfg)
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Server{cfg: cfg, root: root, log: log, rate: newRateLimiter(cfg.RequestRate, cfg.RequestBurst), warn: newThrottle(10*time.Second, nil),
		slots: slots{active: map[netip.AddrPort]bool{}, perSource: map[netip.Addr]int{}}}, nil
}

func withDefaults(cfg Config) Config {
	if cfg.MaxTransfers <= 0 {
		cfg.MaxTransfers = 128
	}
	if cfg.MaxPerSource <= 0 {
		cfg.MaxPerSource = 8
	}
	if cfg.MaxUnknown <= 0 {
		cfg.MaxUnknown = max(1, cfg.MaxTransfers*3/4)
	}
	if cfg.Known == nil {
		cfg.MaxUnknown = cfg.MaxTransfers
	}
	if cfg.RequestRate == 0 {
		cfg.RequestRate = 10
	}
	if cfg.RequestBurst <= 0 {
		cfg.RequestBurst = 20
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	if cfg.Retries <= 0 {
		cfg.Retries = 5
	}
	if cfg.MaxTimeout <= 0 {
		cfg.MaxTimeout = 5 * time.Second
	}
	if cfg.SilentTries <= 0 {
		cfg.SilentTries = 3
	}
	cfg.SilentTries = min(cfg.SilentTries, cfg.Retries+1)
	if cfg.MaxLifetime <= 0 {
		cfg.MaxLifetime = 10 * time.Minute
	}
	if cfg.MaxBlockSize <= 0 || cfg.MaxBlockSize > maxBlockSize {
		cfg.MaxBlockSize = maxBlockSize
	}
	return cfg
}

// Close releases the root directory.
func (s *Server) Close() error { return s.root.Close() }

// ListenAndServe listens on the UDP address (e.g. "10.0.0.1:69") and serves
// until ctx ends.
func (s *Server) ListenAndServe(ctx context.Context, addr string) error {
	ua, err := net.ResolveUDPAddr("udp4", addr)
	if err != nil {
		return fmt.Errorf("tftp: %w", err)
	}
	conn, err := net.ListenUDP("udp4", ua)
	if err != nil {
		return fmt.Errorf("tftp: listen: %w", err)
	}
	return s.Serve(ctx, conn)
}

// Serve reads requests from conn until ctx ends, then waits for running
// transfers to stop. Each transfer gets its own socket (its TID) on conn's
// address, so replies come from the address the client asked.
func (s *Server) Serve(ctx context.Context, conn *net.UDPConn) error {
	var wg sync.WaitGroup
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	defer wg.Wait()
	local := conn.LocalAddr().(*net.UDPAddr)
	buf := make([]byte, maxPacket)
	for {
		n, from, err := conn.ReadFromUDPAddrPort(buf)
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("tftp: read: %w", err)
		}
		from = netip.AddrPortFrom(from.Addr().Unmap(), from.Port())
		// Before anything is parsed or answered: what a source may make
		// us do per second is bounded here.
		if !s.allowSource(from.Addr()) {
			s.drop(DropRate)
			continue
		}
		p, err := parsePacket(buf[:n])
		if err != nil {
			s.log.Debug("tftp: bad packet", "from", from, "err", err)
			conn.WriteToUDPAddrPort(errorPacket(errIllegalOp, err.Error()), from)
			continue
		}
		switch p.op {
		case opRRQ:
		case opWRQ:
			conn.WriteToUDPAddrPort(errorPacket(errAccess, "this server is read-only"), from)
			continue
		default:
			// A stray ACK/DATA/ERROR for the well-known port: not ours.
			continue
		}
		known := s.cfg.Known == nil || s.cfg.Known(from.Addr())
		switch why := s.admit(from, known); why {
		case "":
		case duplicate:
			continue
		default:
			s.refuse(conn, from, p.filename, why)
			continue
		}
		wg.Go(func() {
			defer s.release(from)
			s.serveRead(ctx, local.IP, from, p)
		})
	}
}

// refuse answers a request admit turned down.
func (s *Server) refuse(conn *net.UDPConn, from netip.AddrPort, file, why string) {
	s.drop(why)
	msg := "server busy, try again"
	if why == DropPerSource {
		msg = "too many transfers from your address"
	}
	total, unknown := s.inUse()
	s.warn.warn(s.log, why, "tftp: refusing a read", "from", from, "file", file, "transfers", total, "unknown_sources", unknown)
	conn.WriteToUDPAddrPort(errorPacket(errUndefined, msg), from)
}

func (s *Server) drop(reason string) {
	if s.cfg.Dropped != nil {
		s.cfg.Dropped(reason)
	}
}

// serveRead runs one read request to its end.
func (s *Server) serveRead(ctx context.Context, localIP net.IP, client netip.AddrPort, req *packet) {
	start := time.Now()
	conn, err := net.ListenUDP("udp4", &net.UDPAddr{IP: localIP})
	if err != nil {
		s.log.Error("tftp: cannot open a transfer socket", "err", err)
		return
	}
	defer conn.Close()
	// Shutdown closes the socket; the lifetime is the transfer's own
	// deadline, so the client can still be told.
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	deadline := start.Add(s.cfg.MaxLifetime)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()

	t := &transfer{conn: conn, client: client, retries: s.cfg.Retries, timeout: s.cfg.Timeout,
		silentTimeout: s.cfg.Timeout, silentTries: s.cfg.SilentTries, deadline: deadline}
	name, f, size, err := s.open(ctx, req, client.Addr())
	if err != nil {
		var te *tftpError
		if errors.As(err, &te) {
			t.send(errorPacket(te.code, te.msg))
		}
		s.finish(Transfer{Remote: client, File: req.filename, Duration: time.Since(start), Err: err})
		return
	}
	if c, ok := f.(io.Closer); ok {
		defer c.Close()
	}
	n, order, acc := negotiate(req, s.cfg.MaxBlockSize, int(s.cfg.MaxTimeout/time.Second))
	if n.tsize {
		acc["tsize"] = fmt.Sprint(size)
	}
	if n.timeoutSec > 0 {
		t.timeout = time.Duration(n.timeoutSec) * time.Second
	}
	t.blockSize, t.window = n.blockSize, n.windowSize
	sent, err := t.run(f, size, order, acc)
	if errors.Is(err, errLifetime) {
		t.send(errorPacket(errUndefined, "transfer took too long"))
	}
	s.finish(Transfer{Remote: client, File: name, Bytes: sent, Duration: time.Since(start), Err: err})
}

func (s *Server) finish(tr Transfer) {
	reason := dropReason(tr.Err)
	if reason != "" {
		s.drop(reason)
	}
	switch {
	case errors.Is(tr.Err, ErrSizeProbe):
		s.log.Debug("tftp: size probe", "client", tr.Remote, "file", tr.File)
	case reason == DropSilent:
		// What a forged source's request ends as: counted, not logged
		// each time (OnTransfer still tells a known node's history).
		s.log.Debug("tftp: read failed", "client", tr.Remote, "file", tr.File, "err", tr.Err)
	case tr.Err != nil:
		s.log.Info("tftp: read failed", "client", tr.Remote, "file", tr.File, "err", tr.Err)
	default:
		s.log.Debug("tftp: read done", "client", tr.Remote, "file", tr.File, "bytes", tr.Bytes, "duration", tr.Duration)
	}
	if s.cfg.OnTransfer != nil {
		s.cfg.OnTransfer(tr)
	}
}

// dropReason is the Drop reason of a transfer that ended with err ("" for
// a success, a size probe or an ordinary refusal such as a missing file).
func dropReason(err error) string {
	switch {
	case err == nil:
		return ""
	case errors.Is(err, errSilent):
		return DropSilent
	case errors.Is(err, errLifetime):
		return DropLifetime
	case errors.Is(err, errGaveUp):
		return DropStalled
	case errors.Is(err, regularfile.ErrNotRegular):
		return DropNotRegular
	}
	return ""
}

// tftpError is a failure the client is told about with an ERROR packet.
type tftpError struct {
	code uint16
	msg  string
}

func (e *tftpError) Error() string { return fmt.Sprintf("tftp error %d: %s", e.code, e.msg) }

// IsNotFound reports whether a Transfer's Err is the client being told
// "file not found" (a missing file, a name outside the root).
func IsNotFound(err error) bool {
	var te *tftpError
	return errors.As(err, &te) && te.code == errNotFound
}

// cleanName maps a requested name to one inside the root, or refuses it.
// PXE firmware sends names like "/undionly.kpxe" or "pxelinux\boot.0";
// any ".." component is refused outright, and os.Root refuses symlinks that
// lead outside.
func cleanName(name string) (string, error) {
	name = strings.ReplaceAll(name, `\`, "/")
	name = strings.TrimLeft(name, "/")
	if name == "" || strings.ContainsRune(name, 0) {
		return "", &tftpError{errNotFound, "file not found"}
	}
	for _, part := range strings.Split(name, "/") {
		if part == ".." {
			return "", &tftpError{errAccess, "access violation: path leaves the boot directory"}
		}
	}
	return name, nil
}

// open resolves the request to a readable file (netascii converted in memory).
func (s *Server) open(ctx context.Context, req *packet, client netip.Addr) (string, io.ReaderAt, int64, error) {
	if req.mode != "octet" && req.mode != "netascii" {
		return "", nil, 0, &tftpError{errIllegalOp, fmt.Sprintf("unsupported mode %q: use octet or netascii", req.mode)}
	}
	name, err := cleanName(req.filename)
	if err != nil {
		return req.filename, nil, 0, err
	}
	b, ok := s.cfg.Files[name]
	if !ok && s.cfg.Dynamic != nil {
		var err error
		if b, ok, err = s.cfg.Dynamic(ctx, name, client); err != nil {
			s.log.Info("tftp: generated file failed", "file", name, "err", err)
			return name, nil, 0, &tftpError{errNotFound, "file not found"}
		}
	}
	if ok {
		if req.mode == "netascii" {
			b = toNetascii(b)
		}
		return name, bytes.NewReader(b), int64(len(b)), nil
	}
	// Only a regular file, opened without blocking: a FIFO in the boot
	// directory would otherwise hold this transfer (and the server's
	// shutdown) until something writes to it.
	f, err := regularfile.OpenIn(s.root, name)
	if err != nil {
		if errors.Is(err, regularfile.ErrNotRegular) {
			// The client learns no more; our log and the node's history do.
			return name, nil, 0, fmt.Errorf("%w: %w", &tftpError{errNotFound, "file not found"}, err)
		}
		if errors.Is(err, fs.ErrNotExist) {
			return name, nil, 0, &tftpError{errNotFound, "file not found"}
		}
		return name, nil, 0, &tftpError{errAccess, "access violation"}
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return name, nil, 0, &tftpError{errNotFound, "file not found"}
	}
	if req.mode == "octet" {
		return name, f, st.Size(), nil
	}
	defer f.Close()
	// netascii is for small text files; boot binaries go as octet.
	const maxNetascii = 4 << 20
	if st.Size() > maxNetascii {
		return name, nil, 0, &tftpError{errAccess, "file too large for netascii mode: use octet"}
	}
	raw, err := io.ReadAll(f)
	if err != nil {
		return name, nil, 0, &tftpError{errAccess, "read error"}
	}
	text := toNetascii(raw)
	return name, bytes.NewReader(text), int64(len(text)), nil
}

// toNetascii converts LF to CR LF and a bare CR to CR NUL (RFC 764).
func toNetascii(b []byte) []byte {
	out := make([]byte, 0, len(b)+len(b)/16)
	for _, c := range b {
		switch c {
		case '\n':
			out = append(out, '\r', '\n')
		case '\r':
			out = append(out, '\r', 0)
		default:
			out = append(out, c)
		}
	}
	return out
}
