package main

import (
	"bufio"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// binary returns the controller binary: $ANVIL_CONTROLLER_BIN, or one built
// once per test process into a temp dir.
var buildOnce = sync.OnceValues(func() (string, error) {
	if p := os.Getenv("ANVIL_CONTROLLER_BIN"); p != "" {
		return p, nil
	}
	dir, err := os.MkdirTemp("", "anvil-controller-bin")
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "anvil-controller")
	cmd := exec.Command("go", "build", "-o", out, ".")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", &buildError{out: string(b), err: err}
	}
	return out, nil
})

type buildError struct {
	out string
	err error
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }

// controllerProc is a running anvil-controller.
type controllerProc struct {
	cmd  *exec.Cmd
	URL  string
	logs *strings.Builder
	mu   *sync.Mutex
	done chan struct{}
}

var listenRE = regexp.MustCompile(`anvil-controller listening"? addr=(\S+)`)

// startController runs the binary on a free loopback port with args.
func startController(t *testing.T, args ...string) *controllerProc {
	t.Helper()
	bin, err := buildOnce()
	require.NoError(t, err)
	cmd := exec.Command(bin, append([]string{"--listen", "127.0.0.1:0", "--log-level", "info"}, args...)...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	p := &controllerProc{cmd: cmd, logs: &strings.Builder{}, mu: &sync.Mutex{}, done: make(chan struct{})}
	addr := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			line := sc.Text()
			p.mu.Lock()
			p.logs.WriteString(line + "\n")
			p.mu.Unlock()
			if m := listenRE.FindStringSubmatch(line); m != nil {
				addr <- m[1]
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	go func() { _ = cmd.Wait(); close(p.done) }()
	t.Cleanup(func() { p.kill() })
	select {
	case a := <-addr:
		p.URL = "http://" + a
	case <-p.done:
		t.Fatalf("controller exited at start:\n%s", p.log())
	case <-time.After(20 * time.Second):
		t.Fatalf("controller did not start:\n%s", p.log())
	}
	return p
}

func (p *controllerProc) log() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.logs.String()
}

func (p *controllerProc) kill() {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// getJSON GETs path at the latest microversion.
func getJSON(t *testing.T, base, path string) (int, map[string]any) {
	t.Helper()
	req, err := http.NewRequest("GET", base+path, nil)
	require.NoError(t, err)
	req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	var m map[string]any
	_ = json.NewDecoder(res.Body).Decode(&m)
	return res.StatusCode, m
}

// send issues a request with a JSON body at the latest microversion.
func send(t *testing.T, method, url, body string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	res.Body.Close()
	return res.StatusCode
}
