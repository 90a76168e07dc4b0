package ui

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

// The node page's verification and burn-in card in chromium: the newest
// verify_hardware run and the newest run of each burn-in step, with date,
// outcome and summary, from the stored step results.
func TestNodePageEvidenceInBrowser(t *testing.T) {
	e := newEnv(t, filepath.Join(t.TempDir(), "ui.db"), nil)
	t.Cleanup(e.ui.Close)
	ctx := headless(t)
	n := e.addNode(t, "r650", "available", nil)
	bare := e.addNode(t, "new", "manageable", nil)
	base := time.Date(2026, 11, 20, 10, 0, 0, 0, time.UTC)
	for i, r := range []store.StepResult{
		{Step: "deploy.verify_hardware", Outcome: store.OutcomeSucceeded, Summary: "hardware verified: 0 differences failed, 0 accepted; health: 0 failed, 0 warnings"},
		{Step: "deploy.burnin_cpu", Outcome: store.OutcomeSucceeded, Summary: "cpu burn-in passed: 64 threads for 30 s"},
		{Step: "deploy.burnin_disk", Outcome: store.OutcomeFailed, Error: "burn-in of /dev/sdb failed: I/O error at offset 4096"},
		{Step: "deploy.erase_devices_metadata", Outcome: store.OutcomeSucceeded, Summary: "2 devices wiped"},
		{Step: "deploy.verify_hardware", Outcome: store.OutcomeFailed, Error: "the hardware differs from what is expected (1 problems): disk QM00002 (inspection): 1.0 GiB QEMU HARDDISK at /dev/sdb → missing",
			Summary: "hardware verification FAILED: 1 differences failed, 0 accepted; health: 0 failed, 0 warnings"},
	} {
		r.UUID, r.NodeUUID, r.Kind = uuid.NewString(), n.UUID, "clean"
		r.StartedAt = base.Add(time.Duration(i) * time.Hour)
		r.FinishedAt = r.StartedAt.Add(time.Minute)
		r.Result = json.RawMessage(`{"passed": false}`)
		require.NoError(t, e.st.PutStepResult(context.Background(), &r))
	}

	waitFor(t, ctx, "open the node page", 20*time.Second, chromedp.Navigate(e.srv.URL+"/ui/#/node/"+n.UUID),
		chromedp.WaitVisible(chromedp.CSS(`#evidence-table`)))
	rows := js[[][]string](t, ctx, `[...document.querySelectorAll('#evidence-table tbody tr')].map(r => [...r.cells].map(c => c.textContent))`)
	require.Len(t, rows, 3)
	assert.Equal(t, []string{"verification", "deploy.verify_hardware"}, rows[0][:2])
	assert.Equal(t, "failed", rows[0][3], "the newest verification, not the older pass")
	assert.Equal(t, "hardware verification FAILED: 1 differences failed, 0 accepted; health: 0 failed, 0 warnings: the hardware differs from what is expected (1 problems): disk QM00002 (inspection): 1.0 GiB QEMU HARDDISK at /dev/sdb → missing", rows[0][4])
	assert.NotEqual(t, "–", rows[0][2], "dated")
	assert.Equal(t, []string{"burn-in", "deploy.burnin_disk"}, rows[1][:2])
	assert.Equal(t, "burn-in of /dev/sdb failed: I/O error at offset 4096", rows[1][4], "no summary: the error")
	assert.Equal(t, []string{"burn-in", "deploy.burnin_cpu"}, rows[2][:2])
	assert.Equal(t, "succeeded", rows[2][3])

	waitFor(t, ctx, "a node with neither", 20*time.Second, chromedp.Navigate(e.srv.URL+"/ui/#/node/"+bare.UUID),
		chromedp.WaitVisible(chromedp.CSS(`#no-evidence`)))
}
