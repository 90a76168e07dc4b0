// Package pgserver runs a throwaway PostgreSQL cluster from the
// distribution's binaries, on a loopback port, for tests and benchmarks: one
// cluster costs seconds to create, a database in it milliseconds.
package pgserver

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// ErrNotInstalled means no PostgreSQL server binaries were found.
var ErrNotInstalled = errors.New("PostgreSQL server not installed")

var errPortTaken = errors.New("port taken")

// Server is a running cluster. Its superuser is "anvil", trusted on
// loopback.
type Server struct {
	Port   int
	dir    string
	log    string
	stop   func()
	dbs    atomic.Int64
	prefix string
}

// Options tune a cluster.
type Options struct {
	// MaxConnections is postgres' max_connections (default 60).
	MaxConnections int
	// SharedBuffers is postgres' shared_buffers (default 16MB).
	SharedBuffers string
	// Durable keeps fsync on (default off: a throwaway cluster).
	Durable bool
}

// Start creates a cluster with initdb and starts postgres on a free
// loopback port. Stop it with Stop; its directory is removed then.
func Start(opts Options) (*Server, error) {
	if opts.MaxConnections == 0 {
		opts.MaxConnections = 60
	}
	if opts.SharedBuffers == "" {
		opts.SharedBuffers = "16MB"
	}
	bin, err := findBinDir()
	if err != nil {
		return nil, err
	}
	cred, err := serverCredential()
	if err != nil {
		return nil, err
	}
	dir, err := serverDir(cred)
	if err != nil {
		return nil, err
	}
	data := filepath.Join(dir, "data")
	initdb := serverCmd(bin, "initdb", dir, cred, "-D", data, "-A", "trust", "-U", "anvil",
		"-E", "UTF8", "--no-locale", "--no-sync")
	if out, err := initdb.CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("initdb: %w\n%s", err, out)
	}
	// The free port is found by binding and releasing it, so another process
	// may take it before postgres binds: then postgres exits and we retry.
	const attempts = 5
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			os.RemoveAll(dir)
			return nil, err
		}
		s := &Server{Port: port, dir: dir, prefix: fmt.Sprintf("anvil_%d", os.Getpid())}
		err = s.run(bin, data, cred, opts)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errPortTaken) || attempt == attempts {
			os.RemoveAll(dir)
			return nil, fmt.Errorf("start postgres: %w", err)
		}
	}
}

// ForTest starts a cluster stopped when t ends. The test is skipped, not
// failed, when PostgreSQL is not installed; on failure the server's log
// tail is printed.
func ForTest(t testing.TB) *Server {
	t.Helper()
	s, err := Start(Options{})
	if errors.Is(err, ErrNotInstalled) {
		t.Skipf("%v; install the postgresql package or set ANVIL_TEST_PG_BINDIR", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() { // the server's side of a failure
			log := s.Log()
			t.Logf("postgres log (last 8 kB):\n%s", log[max(0, len(log)-8192):])
		}
		s.Stop()
	})
	return s
}

// Log returns the server's log.
func (s *Server) Log() string { b, _ := os.ReadFile(s.log); return string(b) }

// Stop shuts the cluster down and removes its directory.
func (s *Server) Stop() {
	s.stop()
	os.RemoveAll(s.dir)
}

// URL is the URL of database name.
func (s *Server) URL(name string) string {
	return fmt.Sprintf("postgres://anvil@127.0.0.1:%d/%s?sslmode=disable", s.Port, name)
}

// CreateDatabase creates an empty database with CREATE DATABASE options and
// returns its URL.
func (s *Server) CreateDatabase(options string) (string, error) {
	name := fmt.Sprintf("%s_%d", s.prefix, s.dbs.Add(1))
	if err := s.Admin(`CREATE DATABASE ` + name + ` ` + options); err != nil {
		return "", err
	}
	return s.URL(name), nil
}

// NewDatabase creates an empty database for t, dropped when t ends.
func (s *Server) NewDatabase(t testing.TB) string {
	t.Helper()
	url, err := s.NewDatabaseWith(t, "")
	if err != nil {
		t.Fatal(err)
	}
	return url
}

// NewDatabaseWith is NewDatabase with CREATE DATABASE options.
func (s *Server) NewDatabaseWith(t testing.TB, options string) (string, error) {
	t.Helper()
	url, err := s.CreateDatabase(options)
	if err != nil {
		return "", err
	}
	name := url[strings.LastIndex(url, "/")+1 : strings.Index(url, "?")]
	t.Cleanup(func() {
		if err := s.Admin(`DROP DATABASE IF EXISTS ` + name + ` WITH (FORCE)`); err != nil {
			t.Errorf("drop test database: %v", err)
		}
	})
	return url, nil
}

// Admin runs a statement on the maintenance database; CREATE and DROP
// DATABASE cannot run inside the database they name.
func (s *Server) Admin(sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, s.URL("postgres"))
	if err != nil {
		return fmt.Errorf("connect to the maintenance database: %w", err)
	}
	defer conn.Close(ctx)
	if _, err := conn.Exec(ctx, sql); err != nil {
		return fmt.Errorf("%s: %w", sql, err)
	}
	return nil
}

// run starts postgres and waits until it accepts connections.
func (s *Server) run(bin, data string, cred *syscall.Credential, opts Options) error {
	s.log = filepath.Join(s.dir, fmt.Sprintf("postgres-%d.log", s.Port))
	logFile, err := os.Create(s.log)
	if err != nil {
		return fmt.Errorf("create server log: %w", err)
	}
	defer logFile.Close() // the child has its own descriptor
	args := []string{"-D", data, "-k", s.dir, "-p", strconv.Itoa(s.Port),
		"-c", "listen_addresses=127.0.0.1",
		"-c", "shared_buffers=" + opts.SharedBuffers, "-c", "max_connections=" + strconv.Itoa(opts.MaxConnections)}
	if !opts.Durable {
		// A throwaway cluster: durability off, because the machine running
		// the tests is shared.
		args = append(args, "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off")
	}
	cmd := serverCmd(bin, "postgres", s.dir, cred, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	exited := make(chan struct{})
	go func() { _ = cmd.Wait(); close(exited) }()
	s.stop = func() {
		// SIGINT is PostgreSQL's "fast" shutdown: sessions are ended and
		// the cluster is shut down cleanly without waiting for clients.
		_ = cmd.Process.Signal(syscall.SIGINT)
		select {
		case <-exited:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	url := s.URL("postgres") + "&connect_timeout=2"
	for {
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		select {
		case <-exited:
			log := s.Log()
			if strings.Contains(log, "could not bind") || strings.Contains(log, "Address already in use") {
				return fmt.Errorf("%w: %s", errPortTaken, log)
			}
			return fmt.Errorf("postgres exited before accepting connections:\n%s", log)
		case <-ctx.Done():
			s.stop()
			return fmt.Errorf("postgres did not accept connections within a minute (last error: %v):\n%s", err, s.Log())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func findBinDir() (string, error) {
	complete := func(dir string) bool {
		for _, name := range []string{"initdb", "postgres"} {
			fi, err := os.Stat(filepath.Join(dir, name))
			if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
				return false
			}
		}
		return true
	}
	if dir := os.Getenv("ANVIL_TEST_PG_BINDIR"); dir != "" {
		if complete(dir) {
			return dir, nil
		}
		return "", fmt.Errorf("ANVIL_TEST_PG_BINDIR=%s has no initdb and postgres", dir)
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if real, err := filepath.EvalSymlinks(p); err == nil && complete(filepath.Dir(real)) {
			return filepath.Dir(real), nil
		}
	}
	var candidates []string
	for _, pattern := range []string{"/usr/lib/postgresql/*/bin", "/usr/pgsql-*/bin", "/usr/local/pgsql/bin"} {
		m, _ := filepath.Glob(pattern)
		candidates = append(candidates, m...)
	}
	// Newest major version first: compare the numbers in the paths.
	version := func(p string) int {
		digits := strings.Map(func(r rune) rune {
			if r >= '0' && r <= '9' {
				return r
			}
			return -1
		}, p)
		v, _ := strconv.Atoi(digits)
		return v
	}
	slices.SortFunc(candidates, func(a, b string) int { return version(b) - version(a) })
	for _, dir := range candidates {
		if complete(dir) {
			return dir, nil
		}
	}
	return "", fmt.Errorf("%w: no initdb and postgres in PATH, /usr/lib/postgresql/*/bin, /usr/pgsql-*/bin or /usr/local/pgsql/bin", ErrNotInstalled)
}

// serverCredential is who runs initdb and postgres. PostgreSQL refuses to
// run as root (initdb: "cannot be run as root"; postgres: "root execution
// of the PostgreSQL server is not permitted"), and CI runs the tests as
// root; then the server runs as an unprivileged account instead: the
// "postgres" account the distribution package creates, else "nobody", else
// the conventional nobody ids. nil means: run as ourselves.
func serverCredential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	for _, name := range []string{"postgres", "nobody"} {
		u, err := user.Lookup(name)
		if err != nil {
			continue
		}
		uid, err1 := strconv.ParseUint(u.Uid, 10, 32)
		gid, err2 := strconv.ParseUint(u.Gid, 10, 32)
		if err1 != nil || err2 != nil || uid == 0 {
			continue
		}
		// An empty Groups list drops root's supplementary groups too.
		return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid), Groups: []uint32{}}, nil
	}
	return &syscall.Credential{Uid: 65534, Gid: 65534, Groups: []uint32{}}, nil
}

// serverDir makes the cluster's directory (data directory and Unix socket
// inside). As ourselves, any temporary directory does. As root, the
// server's account must own the directory and be able to reach it (a test's
// temporary directory sits under root's private 0700 one), so it is made
// under the first temporary directory whose every ancestor the account may
// search, and handed over to it.
func serverDir(cred *syscall.Credential) (string, error) {
	if cred == nil {
		return os.MkdirTemp("", "anvil-pg-")
	}
	var base string
	for _, dir := range []string{os.TempDir(), "/tmp", "/var/tmp", "/dev/shm"} {
		if searchable(dir, cred) {
			base = dir
			break
		}
	}
	if base == "" {
		return "", fmt.Errorf("no temporary directory that uid %d can reach; set TMPDIR to a world-searchable directory", cred.Uid)
	}
	dir, err := os.MkdirTemp(base, "anvil-pg-")
	if err != nil {
		return "", err
	}
	if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
		os.RemoveAll(dir)
		return "", err
	}
	if err := os.Chmod(dir, 0o700); err != nil { // PostgreSQL insists on a private data directory
		os.RemoveAll(dir)
		return "", err
	}
	return dir, nil
}

// searchable reports whether the account can traverse dir and all its
// ancestors.
func searchable(dir string, cred *syscall.Credential) bool {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return false
	}
	for {
		fi, err := os.Stat(dir)
		if err != nil || !fi.IsDir() {
			return false
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			return false
		}
		mode := fi.Mode().Perm()
		switch {
		case st.Uid == cred.Uid:
			if mode&0o100 == 0 {
				return false
			}
		case st.Gid == cred.Gid:
			if mode&0o010 == 0 {
				return false
			}
		case mode&0o001 == 0:
			return false
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return true
		}
		dir = parent
	}
}

// serverCmd prepares one of the server programs: as the server's account
// when cred is set, in dir (the account may not be able to read our working
// directory), with a minimal environment (PG* variables of the developer's
// shell must not redirect the cluster, and an unset or ungenerated locale
// must not break initdb), and killed with SIGQUIT, PostgreSQL's immediate
// shutdown, if the test binary dies without cleaning up.
func serverCmd(bin, name, dir string, cred *syscall.Credential, args ...string) *exec.Cmd {
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Dir = dir
	cmd.Env = []string{"PATH=" + bin + ":/usr/bin:/bin", "HOME=" + dir, "LC_ALL=C", "TZ=UTC"}
	// Go sets the parent-death signal after switching to cred, so the
	// switch does not clear it.
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred, Pdeathsig: syscall.SIGQUIT}
	return cmd
}
