package main

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"
)

// TestDashboardAsProjectReader: a project reader's dashboard shows its
// project's nodes only (rows and counts), no action button on them, and
// another project's node as not found.
func TestDashboardAsProjectReader(t *testing.T) {
	if testing.Short() {
		t.Skip("starts chromium")
	}
	dir := t.TempDir()
	var lines string
	for _, u := range []string{uiUser, "reader"} {
		hash, err := bcrypt.GenerateFromPassword([]byte(uiPass), bcrypt.MinCost)
		require.NoError(t, err)
		lines += u + ":" + string(hash) + "\n"
	}
	htpasswd, users := filepath.Join(dir, "htpasswd"), filepath.Join(dir, "users")
	require.NoError(t, os.WriteFile(htpasswd, []byte(lines), 0o600))
	require.NoError(t, os.WriteFile(users, []byte(uiUser+" admin system\nreader reader project:team-a\n"), 0o600))
	p := startController(t, "--database", "sqlite://"+filepath.Join(dir, "anvil.db"), "--auth", "http_basic", "--htpasswd", htpasswd,
		"--users-file", users)
	c := browserAuth{p.URL}
	for name, owner := range map[string]string{"team-a-01": "team-a", "team-a-02": "team-a", "team-b-01": "team-b"} {
		code, body := c.do(t, "POST", "/v1/nodes", `{"driver":"fake-hardware","name":"`+name+`","owner":"`+owner+`"}`)
		require.Equal(t, 201, code, body)
	}
	require.Equal(t, 202, first(c.do(t, "PUT", "/v1/nodes/team-a-02/states/provision", `{"target":"manage"}`)))
	waitState(t, c, "team-a-02", "manageable")
	mine, theirs := jsonField(t, c, "/v1/nodes/team-a-01", "uuid"), jsonField(t, c, "/v1/nodes/team-b-01", "uuid")

	ctx := startBrowserAs(t, "reader", uiPass)
	step(t, ctx, "open the fleet", 20*time.Second, chromedp.Navigate(p.URL+"/ui/"),
		chromedp.WaitVisible(chromedp.CSS(`#node-rows tr[data-uuid="`+mine+`"]`)),
		until(`document.getElementById('total').textContent === '2'`))
	assert.Equal(t, 2, eval[int](t, ctx, `document.querySelectorAll('#node-rows tr').length`), "the project's nodes only")
	assert.Equal(t, map[string]string{"enroll": "1", "manageable": "1"},
		eval[map[string]string](t, ctx, `Object.fromEntries([...document.querySelectorAll('#bars a')].map(a => [a.dataset.state, a.querySelector('.bar-count').textContent]))`),
		"counts of what the reader may see, not of the fleet")

	step(t, ctx, "its node's page", 20*time.Second, chromedp.Navigate(p.URL+"/ui/#/node/"+mine),
		chromedp.WaitVisible(chromedp.CSS(`#no-actions`)))
	assert.Equal(t, 0, eval[int](t, ctx, `document.querySelectorAll('#actions button').length`), "a reader gets no action button")
	assert.Equal(t, "Your role may not act on this node.", eval[string](t, ctx, `document.getElementById('no-actions').textContent`))

	step(t, ctx, "another project's node", 20*time.Second, chromedp.Navigate(p.URL+"/ui/#/node/"+theirs),
		until(`document.getElementById('main').innerText.includes('could not be found')`))
	assert.NotContains(t, eval[string](t, ctx, `document.getElementById('main').innerText`), "team-b-01")
}
