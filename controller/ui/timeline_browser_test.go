package ui

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

// The node page's boot timeline card in chromium: the latest boot's
// stages with their offsets and outcomes, followed live as stages arrive.
func TestNodePageBootTimelineInBrowser(t *testing.T) {
	e := newEnv(t, filepath.Join(t.TempDir(), "ui.db"), nil)
	t.Cleanup(e.ui.Close)
	ctx := headless(t)
	n := e.addNode(t, "stuck", "clean wait", nil)
	bg := context.Background()
	t0 := time.Date(2026, 11, 29, 12, 1, 0, 0, time.UTC)
	require.NoError(t, e.st.AddBootStages(bg, []store.NodeBootStages{{NodeUUID: n.UUID, Stages: []store.BootStage{
		{At: t0.Add(-time.Hour), Stage: store.StageBoot, Detail: "an older boot"},
		{At: t0, Stage: store.StageBoot, Detail: "into the agent ramdisk for cleaning"},
		{At: t0.Add(2 * time.Second), Stage: store.StagePower, Detail: "rebooting", Outcome: "ok"},
		{At: t0.Add(9500 * time.Millisecond), Stage: store.StageDHCP, Detail: "offered snponly.efi to 52:54:00:12:34:56 (UEFI PXE)", Outcome: "ok"},
	}}}))

	waitFor(t, ctx, "open the node page", 20*time.Second, chromedp.Navigate(e.srv.URL+"/ui/#/node/"+n.UUID),
		chromedp.WaitVisible(chromedp.CSS(`#timeline`)))
	assert.Equal(t, "Boot 2, began 2026-11-29T12:01:00.000Z", js[string](t, ctx, `document.querySelector('#timeline caption').textContent`))
	rows := `[...document.querySelectorAll('#timeline tbody tr')].map(r => [...r.cells].map(c => c.textContent))`
	assert.Equal(t, [][]string{
		{"+0.0s", "boot", "–", "into the agent ramdisk for cleaning"},
		{"+2.0s", "bmc.power", "ok", "rebooting"},
		{"+9.5s", "dhcp", "ok", "offered snponly.efi to 52:54:00:12:34:56 (UEFI PXE)"},
	}, js[[][]string](t, ctx, rows), "the latest boot only")

	// a failed TFTP request arrives: the card follows without a reload
	require.NoError(t, e.st.AddBootStages(bg, []store.NodeBootStages{{NodeUUID: n.UUID, Stages: []store.BootStage{
		{At: t0.Add(2*time.Minute + 3*time.Second), Stage: store.StageTFTP, Detail: "snponly.efi to 10.0.0.5", Outcome: "not found"},
	}}}))
	waitFor(t, ctx, "the new stage shows", 10*time.Second, jsTrue(`document.querySelectorAll('#timeline tbody tr').length === 4`))
	last := `document.querySelector('#timeline tbody tr:last-child')`
	assert.Equal(t, []string{"+2m03s", "tftp", "not found", "snponly.efi to 10.0.0.5"},
		js[[]string](t, ctx, `[...`+last+`.cells].map(c => c.textContent)`))
	assert.Equal(t, "state st-bad", js[string](t, ctx, last+`.querySelector('.state').className`), "a failure stands out")

	// a node never booted says so
	quiet := e.addNode(t, "quiet", "manageable", nil)
	waitFor(t, ctx, "a node without boots", 20*time.Second, chromedp.Navigate(e.srv.URL+"/ui/#/node/"+quiet.UUID),
		chromedp.WaitVisible(chromedp.CSS(`#timeline-none`)))
}
