package ui

import (
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"

	"github.com/anvil-metal/anvil/controller/store"
)

// TestNodePageHealthAndDisablePowerOffInBrowser: the node page tags the
// BMC's health (a warning style unless OK) and disable_power_off, and
// offers no power-off for such a node; a plain node gets neither tag and
// keeps its power-off button.
func TestNodePageHealthAndDisablePowerOffInBrowser(t *testing.T) {
	e := newEnv(t, filepath.Join(t.TempDir(), "ui.db"), nil)
	t.Cleanup(e.ui.Close)
	ctx := headless(t)
	crit, on := "Critical", "power on"
	kept := e.addNode(t, "kept-on", "manageable", func(n *store.Node) {
		n.DisablePowerOff, n.Health, n.PowerState = true, &crit, &on
	})
	plain := e.addNode(t, "plain", "manageable", func(n *store.Node) { n.PowerState = &on })

	waitFor(t, ctx, "open the flagged node's page", 20*time.Second, chromedp.Navigate(e.srv.URL+"/ui/#/node/"+kept.UUID),
		chromedp.WaitVisible(chromedp.CSS(`#health`)), chromedp.WaitVisible(chromedp.CSS(`[data-action="reboot"]`)))
	assert.Equal(t, "health: Critical", js[string](t, ctx, `document.getElementById('health').textContent`))
	assert.Equal(t, "tag warn", js[string](t, ctx, `document.getElementById('health').className`))
	assert.Equal(t, "never powered off", js[string](t, ctx, `document.getElementById('disable-power-off').textContent`))
	assert.False(t, js[bool](t, ctx, `!!document.querySelector('[data-action="power off"]')`), "no power-off button")

	waitFor(t, ctx, "open the plain node's page", 20*time.Second, chromedp.Navigate(e.srv.URL+"/ui/#/node/"+plain.UUID),
		chromedp.WaitVisible(chromedp.CSS(`[data-action="power off"]`)))
	assert.False(t, js[bool](t, ctx, `!!document.getElementById('health') || !!document.getElementById('disable-power-off')`))
}
