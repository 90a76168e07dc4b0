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
)

// Config configures a Server.
type Config struct {
	// Root is the only directory served; names are resolved inside it and
	// nothing outside it (by "..", absolute path or symlink) can be read.
	Root string
	// MaxTransfers bounds concurrent transfers (default 128); requests
	// beyond it get an error so a client retries rather than starving all.
	MaxTransfers int
	// Timeout is the retransmission timeout when the client sets none
	// (default 1 s); Retries how often a packet is sent again before the
	// transfer is abandoned (default 5).
	Timeout time.Duration
	Retries int
	// MaxBlockSize caps the blksize option (default and ceiling 65464).
	MaxBlockSize int
	Logger       *slog.Logger
	// OnTransfer, if set, is called once per finished or failed read.
	OnTransfer func(Transfer)
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
	cfg  Config
	root *os.Root
	log  *slog.Logger
	sem  chan struct{}

	mu     sync.Mutex
	active map[netip.AddrPort]bool // clients with a transfer running: a repeated RRQ is a retransmit
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
	if cfg.MaxTransfers <= 0 {
		cfg.MaxTransfers = 128
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = time.Second
	}
	if cfg.Retries <= 0 {
		cfg.Retries = 5
	}
	if cfg.MaxBlockSize <= 0 || cfg.MaxBlockSize > maxBlockSize {
		cfg.MaxBlockSize = maxBlockSize
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	return &Server{cfg: cfg, root: root, log: log, sem: make(chan struct{}, cfg.MaxTransfers), active: map[netip.AddrPort]bool{}}, nil
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
		s.mu.Lock()
		dup := s.active[from]
		if !dup {
			s.active[from] = true
		}
		s.mu.Unlock()
		if dup {
			continue // the client sent its RRQ again before our first reply arrived
		}
		select {
		case s.sem <- struct{}{}:
		default:
			s.forget(from)
			s.log.Warn("tftp: too many transfers, refusing", "from", from, "file", p.filename, "max", s.cfg.MaxTransfers)
			conn.WriteToUDPAddrPort(errorPacket(errUndefined, "server busy, try again"), from)
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-s.sem }()
			defer s.forget(from)
			s.serveRead(ctx, local.IP, from, p)
		}()
	}
}

func (s *Server) forget(a netip.AddrPort) {
	s.mu.Lock()
	delete(s.active, a)
	s.mu.Unlock()
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
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()

	t := &transfer{conn: conn, client: client, retries: s.cfg.Retries, timeout: s.cfg.Timeout}
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
	n, order, acc := negotiate(req, s.cfg.MaxBlockSize)
	if n.tsize {
		acc["tsize"] = fmt.Sprint(size)
	}
	if n.timeoutSec > 0 {
		t.timeout = time.Duration(n.timeoutSec) * time.Second
	}
	t.blockSize, t.window = n.blockSize, n.windowSize
	sent, err := t.run(f, size, order, acc)
	s.finish(Transfer{Remote: client, File: name, Bytes: sent, Duration: time.Since(start), Err: err})
}

func (s *Server) finish(tr Transfer) {
	if errors.Is(tr.Err, ErrSizeProbe) {
		s.log.Debug("tftp: size probe", "client", tr.Remote, "file", tr.File)
	} else if tr.Err != nil {
		s.log.Info("tftp: read failed", "client", tr.Remote, "file", tr.File, "err", tr.Err)
	} else {
		s.log.Debug("tftp: read done", "client", tr.Remote, "file", tr.File, "bytes", tr.Bytes, "duration", tr.Duration)
	}
	if s.cfg.OnTransfer != nil {
		s.cfg.OnTransfer(tr)
	}
}

// tftpError is a failure the client is told about with an ERROR packet.
type tftpError struct {
	code uint16
	msg  string
}

func (e *tftpError) Error() string { return fmt.Sprintf("tftp error %d: %s", e.code, e.msg) }

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
	f, err := s.root.Open(name)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return name, nil, 0, &tftpError{errNotFound, "file not found"}
		}
		return name, nil, 0, &tftpError{errAccess, "access violation"}
	}
	st, err := f.Stat()
	if err != nil || !st.Mode().IsRegular() {
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
