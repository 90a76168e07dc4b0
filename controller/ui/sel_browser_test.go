package ui

import (
	"context"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/bmc/vbmc"
	"github.com/anvil-metal/anvil/controller/api"
	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
)

// The node page's BMC event log card and NMI button in chromium, for a
// redfish node behind an in-memory anvil-vbmc: the SEL shows newest
// first; the NMI asks first, reaches the BMC, and the card then shows it.
// A fake-hardware node has neither.
func TestNodePageSELAndNMIInBrowser(t *testing.T) {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "ui.db"))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	vs := vbmc.NewServer(nil, "admin", "pw", vbmc.NewNode("node-1", vbmc.NewMemory()))
	vts := httptest.NewServer(vs.Handler())
	t.Cleanup(vts.Close)
	vs.AddSEL("node-1", "Memory DIMM B2", "Uncorrectable ECC error")
	m := bmc.New(bmc.Config{MinInterval: -1, PollInterval: 10 * time.Millisecond, ConnectTimeout: 2 * time.Second})
	cond := conductor.New(st, conductor.Config{Host: "ui-test"}, conductor.FakeDriver{}, conductor.NewBMCDriver(bmc.HardwareRedfish, m, nil))
	srv := api.New(api.Config{Store: st, Conductor: cond})
	h := New(Config{API: srv, Counts: st, BIOS: st})
	root := http.NewServeMux()
	root.Handle("/ui", h)
	root.Handle("/ui/", h)
	root.Handle("/", Protect(srv))
	hs := httptest.NewServer(root)
	hs.Config.RegisterOnShutdown(h.Close)
	t.Cleanup(hs.Close)
	e := &env{st: st, srv: hs, ui: h}
	t.Cleanup(e.ui.Close)
	ctx := headless(t)
	n := e.addNode(t, "hung", "active", func(n *store.Node) {
		n.Driver = "redfish"
		n.DriverInfo = map[string]any{"redfish_address": vts.URL, "redfish_username": "admin", "redfish_password": "pw",
			"redfish_system_id": "/redfish/v1/Systems/node-1"}
	})

	waitFor(t, ctx, "open the node page", 20*time.Second, chromedp.Navigate(hs.URL+"/ui/#/node/"+n.UUID),
		chromedp.WaitVisible(chromedp.CSS(`#sel-table`)))
	rows := `[...document.querySelectorAll('#sel-table tbody tr')].map(r => [...r.cells].map(c => c.textContent))`
	got := js[[][]string](t, ctx, rows)
	require.Len(t, got, 4)
	assert.Equal(t, []string{"4", "Memory DIMM B2", "Uncorrectable ECC error"}, []string{got[0][0], got[0][2], got[0][3]}, "newest first")

	// cancelling the confirmation sends nothing
	waitFor(t, ctx, "ask before the NMI", 10*time.Second, chromedp.Click(chromedp.CSS(`[data-action="NMI"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm`)))
	assert.Equal(t, "Send hung an NMI?", js[string](t, ctx, `document.getElementById('confirm-title').textContent`))
	waitFor(t, ctx, "cancel", 10*time.Second, chromedp.Click(chromedp.CSS(`#confirm-cancel`)), chromedp.WaitNotVisible(chromedp.CSS(`#confirm`)))
	assert.Equal(t, 0, vs.NMIs("node-1"))

	waitFor(t, ctx, "send the NMI", 10*time.Second, chromedp.Click(chromedp.CSS(`[data-action="NMI"]`)),
		chromedp.WaitVisible(chromedp.CSS(`#confirm`)), chromedp.Click(chromedp.CSS(`#confirm-ok`)),
		jsTrue(`document.getElementById('action-note').textContent === 'NMI: accepted'`),
		jsTrue(`document.querySelector('#sel-table tbody tr td:last-child')?.textContent === 'Diagnostic interrupt (NMI) asserted'`))
	assert.Equal(t, 1, vs.NMIs("node-1"))

	fake := e.addNode(t, "fake", "manageable", nil)
	waitFor(t, ctx, "a fake-hardware node", 20*time.Second, chromedp.Navigate(hs.URL+"/ui/#/node/"+fake.UUID),
		chromedp.WaitVisible(chromedp.CSS(`#sel-none`)), chromedp.WaitVisible(chromedp.CSS(`[data-action="reboot"]`)))
	assert.False(t, js[bool](t, ctx, `!!document.querySelector('[data-action="NMI"]')`), "no NMI button")
}
