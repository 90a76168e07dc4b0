package ui

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

// The node page's BIOS and firmware sections in Debian's chromium,
// headless, over the real API and dashboard (SQLite). The whole-dashboard
// browser test, with a real controller, is cmd/anvil-controller's
// TestDashboardInBrowser; this one needs only the cache, which it stores.

// headless runs chromium with a fresh profile, or skips the test.
func headless(t *testing.T) context.Context {
	t.Helper()
	if testing.Short() {
		t.Skip("starts chromium")
	}
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Skip("chromium is not installed (apt-get install chromium; .ci/run installs it)")
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU,
		chromedp.Flag("disable-background-networking", true), chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-sync", true), chromedp.NoFirstRun, chromedp.NoDefaultBrowserCheck,
		chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 900))
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	// The first action starts the browser, which lives as long as the
	// context of that action: this one, not a step's deadline.
	require.NoError(t, chromedp.Do(ctx, chromedp.Navigate("about:blank")))
	return ctx
}

// waitFor polls a JavaScript condition for up to d, failing the test with
// what the page showed.
func waitFor(t *testing.T, ctx context.Context, what string, d time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + '\n' + document.getElementById('main').innerText`))
		t.Fatalf("%s: %v\npage text:\n%s", what, err, text)
	}
}

func jsTrue(js string) chromedp.Action[chromedp.Void] {
	p := chromedp.Poll[bool](js, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(0))
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := p(ctx, t)
		return chromedp.Void{}, err
	}
}

// typeInto sets an input's value and fires its input event, as typing does.
func typeInto(sel, value string) chromedp.Action[chromedp.Void] {
	return jsTrue(fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.value = %q; e.dispatchEvent(new Event('input')); return true; })()`, sel, value))
}

func js[T any](t *testing.T, ctx context.Context, expr string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](expr))
	require.NoError(t, err, expr)
	return v
}

func TestNodePageBIOSAndFirmwareInBrowser(t *testing.T) {
	e := newEnv(t, filepath.Join(t.TempDir(), "ui.db"), nil)
	// cleanups run last first: the page's event stream ends, and the
	// browser goes, before the server waits for its requests
	t.Cleanup(e.ui.Close)
	ctx := headless(t)
	n := e.biosNode(t, "r740")
	// a registry as long as a real one: the list starts open only because
	// a change is pending, and gets a filter box
	settings, err := e.st.ListBIOSSettings(context.Background(), n.UUID)
	require.NoError(t, err)
	for i := range 40 {
		settings = append(settings, store.BIOSSetting{Name: fmt.Sprintf("PxeDev%dVlanId", i+1), Value: "0", AttributeType: "Integer"})
	}
	require.NoError(t, e.st.ReplaceBIOSSettings(context.Background(), n.UUID, settings))
	ipmi := e.addNode(t, "old-ipmi", "manageable", func(n *store.Node) { n.Driver = "ipmi" })

	waitFor(t, ctx, "open the node page", 20*time.Second, chromedp.Navigate(e.srv.URL+"/ui/#/node/"+n.UUID),
		chromedp.WaitVisible(chromedp.CSS(`#bios-settings`)), chromedp.WaitVisible(chromedp.CSS(`#firmware-components`)))
	assert.True(t, js[bool](t, ctx, `document.getElementById('bios-section').open`), "open: a change is pending")
	assert.Equal(t, "· 42, 1 pending", js[string](t, ctx, `document.getElementById('bios-count').textContent`))
	assert.Contains(t, js[string](t, ctx, `document.getElementById('bios-pending-note').textContent`), "1 pending: set on the BMC, applied at the node's next boot")

	pv := `document.querySelector('#bios-settings tr[data-name="ProcVirtualization"]')`
	assert.Equal(t, "pending", js[string](t, ctx, pv+`.className`), "the pending row is highlighted")
	assert.Equal(t, "Disabled", js[string](t, ctx, pv+`.querySelector('mark').textContent`))
	assert.Equal(t, []string{"ProcVirtualization", "Enabled", "Disabled", "Enumeration", "Enabled, Disabled", "reset required"},
		js[[]string](t, ctx, `[...`+pv+`.cells].map(c => c.textContent)`))
	tag := `document.querySelector('#bios-settings tr[data-name="SystemServiceTag"]')`
	assert.Equal(t, "read-only", js[string](t, ctx, tag+`.className`))
	assert.Equal(t, []string{"SystemServiceTag", "ABC1234", "–", "String", "length ..7", "read-onlyunique"},
		js[[]string](t, ctx, `[...`+tag+`.cells].map(c => c.textContent)`))

	// the filter: by name, then pending changes only
	visible := `[...document.querySelectorAll('#bios-settings tbody tr')].filter(r => !r.hidden).map(r => r.dataset.name)`
	waitFor(t, ctx, "filter by name", 5*time.Second, typeInto(`#bios-filter`, "dev1v"),
		jsTrue(`document.getElementById('bios-shown').textContent === 'showing 1 of 42'`))
	assert.Equal(t, []string{"PxeDev1VlanId"}, js[[]string](t, ctx, visible), "a name containing the text")
	waitFor(t, ctx, "filter by part of a name", 5*time.Second, typeInto(`#bios-filter`, "PXEDEV1"),
		jsTrue(`document.getElementById('bios-shown').textContent === 'showing 11 of 42'`))
	waitFor(t, ctx, "pending only", 5*time.Second, typeInto(`#bios-filter`, ""),
		chromedp.Click(chromedp.CSS(`#bios-pending-only`)),
		jsTrue(`document.getElementById('bios-shown').textContent === 'showing 1 of 42'`))
	assert.Equal(t, []string{"ProcVirtualization"}, js[[]string](t, ctx, visible))

	// collapsible: the summary closes and opens it
	require.True(t, js[bool](t, ctx, `document.getElementById('bios-settings').checkVisibility()`))
	waitFor(t, ctx, "collapse", 5*time.Second, chromedp.Click(chromedp.CSS(`#bios-section > summary`)),
		jsTrue(`!document.getElementById('bios-section').open`))
	assert.False(t, js[bool](t, ctx, `document.getElementById('bios-settings').checkVisibility()`), "the table is hidden")

	rows := js[[][]string](t, ctx, `[...document.querySelectorAll('#firmware-components tbody tr')].map(r => [...r.cells].slice(0, 4).map(c => c.textContent))`)
	assert.Equal(t, [][]string{{"bios", "2.20.0", "2.19.1", "2.20.0"}, {"bmc", "7.00.00.171", "7.00.00.171", "–"}}, rows)
	if os.Getenv("ANVIL_UPDATE_SCREENSHOTS") != "" {
		waitFor(t, ctx, "open again, everything", 5*time.Second, chromedp.Click(chromedp.CSS(`#bios-section > summary`)),
			chromedp.Click(chromedp.CSS(`#bios-pending-only`)), typeInto(`#bios-filter`, ""),
			jsTrue(`document.getElementById('bios-section').open && document.getElementById('bios-shown').textContent === 'showing 42 of 42'`),
			jsTrue(`(document.getElementById('fw-h').scrollIntoView(), true)`))
		png, err := chromedp.Run(ctx, chromedp.CaptureScreenshot())
		require.NoError(t, err)
		require.NoError(t, os.WriteFile(filepath.Join("..", "..", "docs", "ui", "node-bios.png"), png, 0o644))
	}

	// The cache changes with the node's state (here: the BIOS applied the
	// pending value at a boot during cleaning): the page reads it again.
	for i := range settings {
		if settings[i].Name == "ProcVirtualization" {
			settings[i].Value, settings[i].PendingValue = "Disabled", nil
		}
	}
	require.NoError(t, e.st.ReplaceBIOSSettings(context.Background(), n.UUID, settings))
	_, err = store.MutateNode(context.Background(), e.st, n.UUID, func(n *store.Node) error { n.ProvisionState = "available"; return nil })
	require.NoError(t, err)
	waitFor(t, ctx, "read again after the state changed", 10*time.Second,
		jsTrue(`document.getElementById('bios-count').textContent === '· 42' && !document.getElementById('bios-pending-note')`))
	assert.Equal(t, "Disabled", js[string](t, ctx, pv+`.cells[1].textContent`))
	assert.Empty(t, js[string](t, ctx, pv+`.className`), "no longer pending")

	// a node without a cache says why, in both sections
	waitFor(t, ctx, "the IPMI node", 20*time.Second, chromedp.Navigate(e.srv.URL+"/ui/#/node/"+ipmi.UUID),
		chromedp.WaitVisible(chromedp.CSS(`#bios-reason`)), chromedp.WaitVisible(chromedp.CSS(`#firmware-reason`)))
	assert.Contains(t, js[string](t, ctx, `document.getElementById('bios-reason').textContent`), "no BIOS settings cached: the ipmi driver has none")
	assert.Contains(t, js[string](t, ctx, `document.getElementById('firmware-reason').textContent`), "no firmware versions cached: the ipmi driver has none")
	assert.True(t, js[bool](t, ctx, `document.getElementById('bios-section').open`), "an empty list starts open, to show why")
}
