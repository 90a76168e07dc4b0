package ui

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

// The rules page lists the rules in the order they run, never a
// sensitive rule's actions; a node's page says which rule changed what.
func TestRulesPagesInBrowser(t *testing.T) {
	e := newEnv(t, filepath.Join(t.TempDir(), "ui.db"), nil)
	t.Cleanup(e.ui.Close)
	ctx := headless(t)
	bg := context.Background()
	desc := "rack 7"
	plain := &store.InspectionRule{UUID: uuid.NewString(), Description: &desc, Phase: "main", Priority: 10, CreatedAt: time.Now(),
		Actions: []map[string]any{{"op": "add-trait", "args": map[string]any{"name": "CUSTOM_RACK7"}}}}
	secret := &store.InspectionRule{UUID: uuid.NewString(), Phase: "main", Priority: 90, Sensitive: true, CreatedAt: time.Now(),
		Actions: []map[string]any{{"op": "set-attribute", "args": map[string]any{"path": "driver_info/ipmi_password", "value": "rack-secret"}}}}
	require.NoError(t, e.st.CreateInspectionRule(bg, plain))
	require.NoError(t, e.st.CreateInspectionRule(bg, secret))
	n := e.addNode(t, "found", "enroll", nil)
	require.NoError(t, e.st.AppendEvent(bg, &store.Event{UUID: uuid.NewString(), NodeUUID: n.UUID, CreatedAt: time.Now(), Severity: "INFO",
		EventType: "discovery", Event: "discovery rule " + plain.UUID + ": add-trait CUSTOM_RACK7"}))

	waitFor(t, ctx, "open the rules page", 20*time.Second, chromedp.Navigate(e.srv.URL+"/ui/#/rules"),
		chromedp.WaitVisible(chromedp.CSS(`#rules-table`)))
	rows := js[[][]string](t, ctx, `[...document.querySelectorAll('#rules-table tbody tr')].map(r => [...r.cells].map(c => c.textContent))`)
	require.Len(t, rows, 2)
	assert.Equal(t, []string{"90", secret.UUID, "–", "always", "sensitive: not shown"}, rows[0], "highest priority first")
	assert.Equal(t, []string{"10", plain.UUID, "rack 7", "always", `add-trait {"name":"CUSTOM_RACK7"}`}, rows[1])
	assert.NotContains(t, js[string](t, ctx, `document.getElementById('main').innerText`), "rack-secret")

	waitFor(t, ctx, "open the node page", 20*time.Second, chromedp.Navigate(e.srv.URL+"/ui/#/node/"+n.UUID),
		chromedp.WaitVisible(chromedp.CSS(`#rule-changes`)))
	changes := js[[][]string](t, ctx, `[...document.querySelectorAll('#rule-changes tbody tr')].map(r => [...r.cells].slice(1).map(c => c.textContent))`)
	assert.Equal(t, [][]string{{"discovery", plain.UUID, "add-trait CUSTOM_RACK7"}}, changes)
}
