package ui

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"

	"github.com/anvil-metal/anvil/controller/store"
)

// TestNodePageFastTrackInBrowser: a node whose agent is kept running
// (fast track) says so on its card, with since when and its last
// heartbeat; a node without one shows no such tag.
func TestNodePageFastTrackInBrowser(t *testing.T) {
	e := newEnv(t, filepath.Join(t.TempDir(), "ui.db"), nil)
	t.Cleanup(e.ui.Close)
	ctx := headless(t)
	on := "power on"
	at := time.Date(2026, 11, 29, 4, 0, 0, 0, time.UTC)
	kept := e.addNode(t, "kept", "available", func(n *store.Node) {
		n.PowerState = &on
		a := &n.Operation.Agent
		a.Token, a.BootID, a.LastHeartbeat = "tok", "boot-1", at.Add(5*time.Minute)
		a.FastTrack = &store.FastTrack{Since: at.Add(time.Minute), BootID: "boot-1", TokenSum: "x", AgentSince: at}
	})
	plain := e.addNode(t, "plain", "available", func(n *store.Node) { n.PowerState = &on })

	waitFor(t, ctx, "open the fast-track node's page", 20*time.Second, chromedp.Navigate(e.srv.URL+"/ui/#/node/"+kept.UUID),
		chromedp.WaitVisible(chromedp.CSS(`#fast-track`)))
	text := js[string](t, ctx, `document.getElementById('fast-track').textContent`)
	assert.True(t, strings.HasPrefix(text, "fast track: agent running since "), text)
	assert.Contains(t, text, ", last heartbeat ")
	assert.NotContains(t, text, "never")

	waitFor(t, ctx, "open the plain node's page", 20*time.Second, chromedp.Navigate(e.srv.URL+"/ui/#/node/"+plain.UUID),
		chromedp.WaitVisible(chromedp.CSS(`#power-state`)))
	assert.False(t, js[bool](t, ctx, `!!document.getElementById('fast-track')`))
}
