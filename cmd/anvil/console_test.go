package main

import (
	"bytes"
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/api"
	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/console"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/controller/store/storetest"
)

// anvil node console shows the scrollback and live output and types what
// stdin holds up to Ctrl-]; console-log prints the scrollback.
func TestConsoleCLI(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	st, err := sqlite.Open(ctx, ":memory:")
	require.NoError(t, err)
	defer st.Close()
	cond := conductor.New(st, conductor.Config{Host: "cli", CheckInterval: time.Hour}, conductor.FakeDriver{},
		conductor.NewBMCDriver("ipmi", nil, nil))
	f := console.NewFake()
	m := console.New(console.Config{Opener: f})
	defer m.Close()
	srv := httptest.NewServer(api.New(api.Config{Store: st, Conductor: cond, Consoles: m}))
	defer srv.Close()
	n := storetest.NewNode("con-node")
	n.Driver, n.Interfaces.Console = "ipmi", "ipmitool-socat"
	n.DriverInfo = map[string]any{"ipmi_address": "127.0.0.1", "ipmi_username": "u", "ipmi_password": "p"}
	require.NoError(t, st.CreateNode(ctx, n))
	cli := func(stdin string, args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, args, strings.NewReader(stdin), &out, func(k string) string {
			if k == "ANVIL_URL" {
				return srv.URL
			}
			return ""
		})
		return out.String(), err
	}

	_, err = cli("", "node", "console", "con-node")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "is not enabled")
	require.NoError(t, m.Enable(n))
	<-f.Opened()
	f.Print("Welcome to the anvil ramdisk\r\n")
	require.Eventually(t, func() bool { b, _ := m.Scrollback(n.UUID); return len(b) > 0 }, 5*time.Second, 5*time.Millisecond)

	inR, inW := io.Pipe()
	live := &lockedBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"node", "console", "con-node"}, inR, live, func(k string) string {
			if k == "ANVIL_URL" {
				return srv.URL
			}
			return ""
		})
	}()
	require.Eventually(t, func() bool { return strings.Contains(live.String(), "Welcome to the anvil ramdisk") }, 5*time.Second, 5*time.Millisecond)
	assert.Contains(t, live.String(), "[anvil] console of con-node (you have the input); Ctrl-] quits")
	f.Print("login: ")
	require.Eventually(t, func() bool { return strings.Contains(live.String(), "login: ") }, 5*time.Second, 5*time.Millisecond)
	_, err = inW.Write([]byte("reboot\r\x1dignored"))
	require.NoError(t, err)
	require.NoError(t, <-done)
	require.Eventually(t, func() bool { return f.Typed() == "reboot\r" }, 5*time.Second, 5*time.Millisecond)

	out, err := cli("", "node", "console-log", "con-node")
	require.NoError(t, err)
	assert.Contains(t, out, "Welcome to the anvil ramdisk\r\n")
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}
func (l *lockedBuffer) String() string { l.mu.Lock(); defer l.mu.Unlock(); return l.b.String() }
