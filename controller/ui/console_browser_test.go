package ui

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/cdproto/input"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/api"
	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/console"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
)

// The node page's serial console in chromium, on a fake console source:
// enable it, open the terminal, see the scrollback and live output in
// xterm.js, type into the node, disable it and the terminal closes.
func TestNodePageConsoleInBrowser(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ui.db"))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	cond := conductor.New(st, conductor.Config{Host: "ui-test"}, conductor.FakeDriver{}, conductor.NewBMCDriver("ipmi", nil, nil))
	f := console.NewFake()
	m := console.New(console.Config{Opener: f})
	t.Cleanup(m.Close)
	srv := api.New(api.Config{Store: st, Conductor: cond, Consoles: m})
	h := New(Config{API: srv, Counts: st, BIOS: st})
	root := http.NewServeMux()
	root.Handle("/ui", h)
	root.Handle("/ui/", h)
	root.Handle("/", Protect(srv))
	hs := httptest.NewServer(root)
	hs.Config.RegisterOnShutdown(h.Close)
	t.Cleanup(hs.Close)
	t.Cleanup(h.Close)
	e := &env{st: st, srv: hs, ui: h}
	n := e.addNode(t, "serial", "manageable", func(n *store.Node) {
		n.Driver, n.Interfaces.Console = "ipmi", "ipmitool-socat"
		n.DriverInfo = map[string]any{"ipmi_address": "127.0.0.1", "ipmi_username": "u", "ipmi_password": "p"}
	})

	ctx := headless(t)
	waitFor(t, ctx, "open the node page", 20*time.Second, chromedp.Navigate(hs.URL+"/ui/#/node/"+n.UUID),
		chromedp.WaitVisible(chromedp.CSS(`#console [data-action="enable console"]`)))
	assert.Equal(t, "the console is disabled", js[string](t, ctx, `document.querySelector('#console-status').textContent`))
	waitFor(t, ctx, "enable the console", 20*time.Second, chromedp.Click(`#console [data-action="enable console"]`),
		chromedp.WaitVisible(chromedp.CSS(`#console [data-action="open console"]`)))
	select {
	case <-f.Opened():
	case <-time.After(10 * time.Second):
		t.Fatal("enabling from the page opened no session")
	}
	require.True(t, f.Print("ANVIL-RAMDISK-BANNER before anyone watched\r\n"))

	rows := `(document.querySelector('#console-screen .xterm-rows') || {}).textContent || ''`
	waitFor(t, ctx, "the terminal shows the scrollback", 20*time.Second, chromedp.Click(`#console [data-action="open console"]`),
		jsTrue(`(`+rows+`).includes('ANVIL-RAMDISK-BANNER before anyone watched')`))
	assert.Equal(t, "connected: you have the input", js[string](t, ctx, `document.querySelector('#console-status').textContent`))
	assert.Greater(t, js[float64](t, ctx, `document.adoptedStyleSheets.length`), 0.0, "xterm.js's styles apply under the page's CSP")

	f.Print("login: ")
	waitFor(t, ctx, "live output", 10*time.Second, jsTrue(`(`+rows+`).includes('login:')`))
	// Input.insertText: one input event, as a keyboard's (chromedp's
	// SendKeys sends key and char events that xterm.js both takes).
	waitFor(t, ctx, "type", 10*time.Second, chromedp.Focus(chromedp.CSS(`#console-screen .xterm-helper-textarea`)))
	_, err = chromedp.Call(ctx, input.InsertText, input.InsertTextParams{Text: "root"})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return f.Typed() == "root" }, 10*time.Second, 20*time.Millisecond, "typed: %q", f.Typed())

	waitFor(t, ctx, "disable the console", 20*time.Second, chromedp.Click(`#console [data-action="disable console"]`),
		jsTrue(`document.querySelector('#console-status').textContent === 'console closed' || document.querySelector('#console-status').textContent === 'console disabled'`),
		chromedp.WaitVisible(chromedp.CSS(`#console [data-action="enable console"]`)))
	assert.False(t, m.Enabled(n.UUID))
}
