package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/cdproto/cdp"
	"github.com/chromedp/cdproto/network"
	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"
)

// The dashboard's browser test: a real controller (--simulate-agents, HTTP
// basic auth) and Debian's chromium, headless, driven over the DevTools
// protocol. Screenshots land in out/ui/, or with ANVIL_UPDATE_SCREENSHOTS=1
// in docs/ui/, which docs/operator/dashboard.md shows.

const (
	uiUser = "operator"
	uiPass = "dashboard-test-password"
)

// browserAuth is a client that speaks to the controller as the operator.
type browserAuth struct{ base string }

func (b browserAuth) do(t *testing.T, method, path, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, b.base+path, strings.NewReader(body))
	require.NoError(t, err)
	req.SetBasicAuth(uiUser, uiPass)
	req.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
	req.Header.Set("Content-Type", "application/json")
	res, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer res.Body.Close()
	raw, err := io.ReadAll(res.Body)
	require.NoError(t, err)
	return res.StatusCode, string(raw)
}

// setValue sets a form field's value as typing would (chromedp.SetValue
// refuses an empty value).
func setValue(sel, value string) chromedp.Action[chromedp.Void] {
	js := fmt.Sprintf(`(() => { const e = document.querySelector(%q); e.value = %q; return true; })()`, sel, value)
	e := chromedp.Evaluate[bool](js)
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := e(ctx, t)
		return chromedp.Void{}, err
	}
}

// search submits text in the fleet's search box with Enter, as a keyboard
// user does (a click could land on a state bar that the live counts just
// moved).
func search(text string) chromedp.Action[chromedp.Void] {
	set := setValue(`#search`, text)
	focus := until(`(document.getElementById('search').focus(), document.activeElement.id === 'search')`)
	enter := chromedp.KeyEvent("\r")
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		for _, a := range []chromedp.Action[chromedp.Void]{set, focus, enter} {
			if _, err := a(ctx, t); err != nil {
				return chromedp.Void{}, err
			}
		}
		return chromedp.Void{}, nil
	}
}

// until waits for a JavaScript condition (the step's deadline bounds it).
func until(js string) chromedp.Action[chromedp.Void] {
	p := chromedp.Poll[bool](js, chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(0))
	return func(ctx context.Context, t *chromedp.Target) (chromedp.Void, error) {
		_, err := p(ctx, t)
		return chromedp.Void{}, err
	}
}

// startBrowser runs headless chromium with a fresh profile.
func startBrowser(t *testing.T) context.Context {
	t.Helper()
	return startBrowserAs(t, uiUser, uiPass)
}

// startBrowserAs is startBrowser logged in as user.
func startBrowserAs(t *testing.T, user, pass string) context.Context {
	t.Helper()
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
	// The operator's browser holds the basic credentials: it sends them on
	// every request to any origin, as a browser does once it has them
	// cached, which is what makes CSRF possible.
	auth := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	require.NoError(t, chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
		if _, err := cdp.Call(ctx, tg, network.Enable, network.EnableParams{}); err != nil {
			return err
		}
		_, err := cdp.Call(ctx, tg, network.SetExtraHTTPHeaders, network.SetExtraHTTPHeadersParams{Headers: network.Headers{"Authorization": auth}})
		return err
	})))
	return ctx
}

// step runs browser actions with a deadline, failing the test with what
// the page showed.
func step(t *testing.T, ctx context.Context, what string, d time.Duration, actions ...chromedp.Action[chromedp.Void]) {
	t.Helper()
	sctx, cancel := context.WithTimeout(ctx, d)
	defer cancel()
	if err := chromedp.Do(sctx, actions...); err != nil {
		text, _ := chromedp.Run(ctx, chromedp.Evaluate[string](`location.href + '\n' + document.getElementById('live').textContent + '\n' + document.getElementById('main').innerText`))
		t.Fatalf("%s: %v\npage text:\n%s", what, err, text)
	}
}

func eval[T any](t *testing.T, ctx context.Context, js string) T {
	t.Helper()
	v, err := chromedp.Run(ctx, chromedp.Evaluate[T](js, chromedp.EvalAwaitPromise))
	require.NoError(t, err, js)
	return v
}

// screenshot writes the whole page (full) or what a screen shows.
func screenshot(t *testing.T, ctx context.Context, name string, full bool) {
	t.Helper()
	shot := chromedp.CaptureScreenshot()
	if full {
		shot = chromedp.FullScreenshot(100)
	}
	png, err := chromedp.Run(ctx, shot)
	require.NoError(t, err)
	// out/ui (ignored by git) every run; docs/ui, which docs/operator/dashboard.md shows,
	// when asked to refresh them.
	dir := filepath.Join("..", "..", "out", "ui")
	if os.Getenv("ANVIL_UPDATE_SCREENSHOTS") != "" {
		dir = filepath.Join("..", "..", "docs", "ui")
	}
	require.NoError(t, os.MkdirAll(dir, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, name), png, 0o644))
}

func TestDashboardInBrowser(t *testing.T) {
	if testing.Short() {
		t.Skip("starts chromium")
	}
	dir := t.TempDir()
	hash, err := bcrypt.GenerateFromPassword([]byte(uiPass), bcrypt.MinCost)
	require.NoError(t, err)
	htpasswd := filepath.Join(dir, "htpasswd")
	require.NoError(t, os.WriteFile(htpasswd, []byte(uiUser+":"+string(hash)+"\n"), 0o600))
	p := startController(t, "--database", "sqlite://"+filepath.Join(dir, "anvil.db"), "--auth", "http_basic", "--htpasswd", htpasswd,
		"--simulate-agents", "--simulate-step-time", "3s", "--heartbeat-interval", "200ms",
		"--boot-discovery", "--boot-discovery-driver", "fake-hardware")
	c := browserAuth{p.URL}

	// A small fleet: one node with a simulated agent, walked to manageable
	// and inspected (inventory and cached steps), and others resting.
	code, body := c.do(t, "POST", "/v1/nodes", `{"driver":"fake-hardware","name":"rack1-node01","deploy_interface":"direct",
		"inspect_interface":"agent","resource_class":"baremetal-large","owner":"team-a","driver_info":{"ipmi_address":"10.0.0.11","ipmi_password":"s3cret"}}`)
	require.Equal(t, 201, code, body)
	code, body = c.do(t, "POST", "/v1/ports", `{"address":"52:54:00:a0:00:01","node_uuid":"rack1-node01"}`)
	if code != 201 { // ports take the node's UUID
		uuid := jsonField(t, c, "/v1/nodes/rack1-node01", "uuid")
		code, body = c.do(t, "POST", "/v1/ports", `{"address":"52:54:00:a0:00:01","node_uuid":"`+uuid+`"}`)
	}
	require.Equal(t, 201, code, body)
	// rack1-node10 is cleaned while the fleet's screenshot is taken
	code, body = c.do(t, "POST", "/v1/nodes", `{"driver":"fake-hardware","name":"rack1-node10","deploy_interface":"direct","resource_class":"baremetal-large"}`)
	require.Equal(t, 201, code, body)
	uuid10 := jsonField(t, c, "/v1/nodes/rack1-node10", "uuid")
	code, body = c.do(t, "POST", "/v1/ports", `{"address":"52:54:00:a0:00:10","node_uuid":"`+uuid10+`"}`)
	require.Equal(t, 201, code, body)
	require.Equal(t, 202, first(c.do(t, "PUT", "/v1/nodes/rack1-node10/states/provision", `{"target":"manage"}`)))
	for i := 2; i <= 9; i++ {
		code, body := c.do(t, "POST", "/v1/nodes", fmt.Sprintf(`{"driver":"fake-hardware","name":"rack1-node%02d","resource_class":"baremetal-small"}`, i))
		require.Equal(t, 201, code, body)
	}
	for _, n := range []string{"rack1-node02", "rack1-node03", "rack1-node04"} {
		require.Equal(t, 202, first(c.do(t, "PUT", "/v1/nodes/"+n+"/states/provision", `{"target":"manage"}`)))
	}
	require.Equal(t, 202, first(c.do(t, "PUT", "/v1/nodes/rack1-node05/maintenance", `{"reason":"fan failure"}`)))
	waitState(t, c, "rack1-node04", "manageable")
	require.Equal(t, 202, first(c.do(t, "PUT", "/v1/nodes/rack1-node04/states/provision", `{"target":"provide"}`)))
	require.Equal(t, 202, first(c.do(t, "PUT", "/v1/nodes/rack1-node01/states/provision", `{"target":"manage"}`)))
	waitState(t, c, "rack1-node01", "manageable")
	require.Equal(t, 202, first(c.do(t, "PUT", "/v1/nodes/rack1-node01/states/provision", `{"target":"inspect"}`)))
	waitState(t, c, "rack1-node01", "manageable")
	waitState(t, c, "rack1-node04", "available")
	waitState(t, c, "rack1-node10", "manageable")
	uuid := jsonField(t, c, "/v1/nodes/rack1-node01", "uuid")

	ctx := startBrowser(t)

	t.Run("fleet", func(t *testing.T) {
		step(t, ctx, "open the fleet", 20*time.Second, chromedp.Navigate(p.URL+"/ui/"),
			chromedp.WaitVisible(chromedp.CSS(`#bars a[data-state="manageable"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#node-rows tr[data-uuid="`+uuid+`"]`)))
		counts := eval[map[string]string](t, ctx, `Object.fromEntries([...document.querySelectorAll('#bars a')].map(a => [a.dataset.state, a.querySelector('.bar-count').textContent]))`)
		assert.Equal(t, map[string]string{"manageable": "4", "enroll": "5", "available": "1"}, counts, "a bar per state with the API's counts")
		assert.Equal(t, "10", eval[string](t, ctx, `document.getElementById('total').textContent`))
		assert.Equal(t, 10, eval[int](t, ctx, `document.querySelectorAll('#node-rows tr').length`))
		assert.Contains(t, eval[string](t, ctx, `document.querySelector('#node-rows tr[data-uuid="`+uuid+`"]').innerText`), "team-a / baremetal-large")

		// a node being cleaned shows its step and progress in its row, live
		require.Equal(t, 202, first(c.do(t, "PUT", "/v1/nodes/rack1-node10/states/provision", `{"target":"provide"}`)))
		step(t, ctx, "progress in the fleet", 30*time.Second,
			until(`(document.querySelector('#node-rows tr[data-uuid="`+uuid10+`"] progress')?.value || 0) > 20`))
		screenshot(t, ctx, "fleet.png", true)

		// filter by state through the bar, then page through the server
		step(t, ctx, "filter by a state", 10*time.Second, chromedp.Click(chromedp.CSS(`#bars a[data-state="enroll"]`)),
			until(`document.querySelectorAll('#node-rows tr').length === 5`))
		step(t, ctx, "sort by name, descending", 10*time.Second, chromedp.Navigate(p.URL+"/ui/#/?state=enroll&limit=25&sort=name&dir=desc"),
			until(`document.querySelector('#node-rows tr .node-link')?.textContent === 'rack1-node09'`))
		step(t, ctx, "search part of a name", 10*time.Second, chromedp.Navigate(p.URL+"/ui/#/"),
			chromedp.WaitVisible(chromedp.CSS(`#search`)), search("NODE0"),
			until(`location.hash.includes('q=NODE0') && document.getElementById('page-info').textContent.includes('1–9')`),
			search("node07"),
			until(`location.hash.includes('q=node07') && document.querySelectorAll('#node-rows tr').length === 1 && document.querySelector('#node-rows').innerText.includes('rack1-node07')`),
			search("rack1-node03"),
			until(`document.getElementById('crumb')?.textContent === 'rack1-node03'`))
		step(t, ctx, "maintenance filter", 10*time.Second, chromedp.Navigate(p.URL+"/ui/#/?maintenance=true"),
			until(`document.querySelectorAll('#node-rows tr').length === 1 && document.querySelector('#node-rows').innerText.includes('rack1-node05')`))

		step(t, ctx, "phone width", 10*time.Second, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile),
			chromedp.Navigate(p.URL+"/ui/#/"), chromedp.WaitVisible(chromedp.CSS(`#node-rows tr[data-uuid="`+uuid+`"]`)))
		screenshot(t, ctx, "fleet-phone.png", false)
		step(t, ctx, "desktop again", 5*time.Second, chromedp.EmulateViewport(1280, 900))
	})

	t.Run("node and manual cleaning", func(t *testing.T) {
		step(t, ctx, "open the node", 20*time.Second, chromedp.Navigate(p.URL+"/ui/#/"),
			chromedp.Click(chromedp.CSS(`#node-rows tr[data-uuid="`+uuid+`"] a.node-link`)),
			until(`document.getElementById('provision-state')?.textContent === 'manageable'`),
			chromedp.WaitVisible(chromedp.CSS(`#disks`)), chromedp.WaitVisible(chromedp.CSS(`#clean-steps`)))
		page := eval[string](t, ctx, `document.getElementById('main').innerText`)
		assert.Contains(t, page, "deploy.erase_devices")
		assert.Contains(t, page, "10.0.0.11")
		assert.NotContains(t, page, "s3cret", "BMC secrets are masked")
		power := eval[string](t, ctx, `document.getElementById('power-state').textContent`)

		// An argument the step does not take: the API refuses before
		// anything is powered on, and the page shows its message.
		step(t, ctx, "clean form", 10*time.Second, chromedp.Click(chromedp.CSS(`#actions button[data-action="clean…"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#clean-form`)),
			chromedp.Click(chromedp.CSS(`#clean-form input[data-step="deploy.erase_devices"]`)),
			setValue(`fieldset[data-step="deploy.erase_devices"] input[data-extra]`, `{"bogus": true}`),
			chromedp.Click(chromedp.CSS(`#clean-submit`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)),
			chromedp.Click(chromedp.CSS(`#confirm-ok`)), chromedp.WaitVisible(chromedp.CSS(`#clean-error`)))
		assert.Contains(t, eval[string](t, ctx, `document.getElementById('clean-error').textContent`), "unexpected arguments: bogus")
		assert.Equal(t, "manageable", jsonField(t, c, "/v1/nodes/rack1-node01", "provision_state"))
		assert.Equal(t, power, eval[string](t, ctx, `document.getElementById('power-state').textContent`), "nothing was powered on")

		// The same step with a valid argument: progress moves, the node
		// comes back to manageable.
		step(t, ctx, "start cleaning", 10*time.Second,
			setValue(`fieldset[data-step="deploy.erase_devices"] input[data-extra]`, ``),
			setValue(`fieldset[data-step="deploy.erase_devices"] input[data-arg="verify_samples"]`, `16`),
			chromedp.Click(chromedp.CSS(`#clean-submit`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)),
			chromedp.Click(chromedp.CSS(`#confirm-ok`)), until(`document.getElementById('provision-state').textContent !== 'manageable'`))
		seen := map[float64]bool{}
		shot := false
		detail := "" // the running step's bytes and ETA, as the page shows them
		deadline := time.Now().Add(40 * time.Second)
		for time.Now().Before(deadline) {
			v := eval[float64](t, ctx, `(() => { const p = document.getElementById('step-progress'); return p ? p.value : -1; })()`)
			if v > 0 && v < 100 {
				seen[v] = true
				if d := eval[string](t, ctx, `document.querySelector('#step .step-detail, .step .step-detail')?.textContent || ''`); strings.Contains(d, " of ") && strings.Contains(d, "ETA ") {
					detail = d
				}
				if len(seen) == 2 && !shot {
					screenshot(t, ctx, "node.png", true)
					shot = true
				}
			}
			if len(seen) > 0 && eval[bool](t, ctx, `document.getElementById('provision-state').textContent === 'manageable' && !!document.getElementById('no-step')`) {
				break
			}
			time.Sleep(50 * time.Millisecond)
		}
		assert.GreaterOrEqual(t, len(seen), 2, "the progress bar moved: %v", seen)
		assert.Regexp(t, `^\d+% · [\d.]+ \S+ of [\d.]+ \S+ · ETA \S+`, detail, "bytes done of total, and an ETA")
		step(t, ctx, "cleaning ends in manageable", 30*time.Second,
			until(`document.getElementById('provision-state').textContent === 'manageable'`),
			until(`document.getElementById('clean-results')?.innerText.includes('/dev/nvme0n1 erased by nvme_format_crypto_erase')`))
		assert.Equal(t, "manageable", jsonField(t, c, "/v1/nodes/rack1-node01", "provision_state"))
		assert.Contains(t, eval[string](t, ctx, `document.getElementById('events').innerText`), "clean step deploy.erase_devices finished")
		step(t, ctx, "node at phone width", 10*time.Second, chromedp.EmulateViewport(390, 844, chromedp.EmulateMobile),
			until(`(window.scrollTo(0, 0), document.getElementById('clean-results') !== null)`))
		screenshot(t, ctx, "node-phone.png", false)
		step(t, ctx, "desktop again", 5*time.Second, chromedp.EmulateViewport(1280, 900))
	})

	t.Run("lifecycle from the page", func(t *testing.T) {
		state := func(want string) chromedp.Action[chromedp.Void] {
			return until(`document.getElementById('provision-state').textContent === '` + want + `'`)
		}
		step(t, ctx, "abort a running clean", 30*time.Second,
			chromedp.Click(chromedp.CSS(`#actions button[data-action="clean…"]`)), chromedp.WaitVisible(chromedp.CSS(`#clean-form`)),
			chromedp.Click(chromedp.CSS(`#clean-form input[data-step="deploy.erase_devices"]`)),
			chromedp.Click(chromedp.CSS(`#clean-submit`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)), chromedp.Click(chromedp.CSS(`#confirm-ok`)),
			chromedp.WaitVisible(chromedp.CSS(`#step-progress`)),
			chromedp.Click(chromedp.CSS(`#actions button[data-action="abort"]`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)),
			chromedp.Click(chromedp.CSS(`#confirm-ok`)), state("clean failed"),
			until(`document.getElementById('last-error').textContent.length > 0`),
			chromedp.Click(chromedp.CSS(`#actions button[data-action="manage"]`)), state("manageable"))
		step(t, ctx, "retire with a reason", 10*time.Second,
			chromedp.Click(chromedp.CSS(`#actions button[data-action="retire…"]`)), chromedp.WaitVisible(chromedp.CSS(`#confirm-reason`)),
			setValue(`#confirm-reason`, "end of life"), chromedp.Click(chromedp.CSS(`#confirm-ok`)),
			until(`document.getElementById('node-status').innerText.includes('retired: end of life')`),
			chromedp.Click(chromedp.CSS(`#actions button[data-action="unretire"]`)),
			until(`!document.getElementById('node-status').innerText.includes('retired')`))
		step(t, ctx, "provide", 40*time.Second, chromedp.Click(chromedp.CSS(`#actions button[data-action="provide"]`)), state("available"))
		step(t, ctx, "deploy with image URL and checksum", 40*time.Second,
			chromedp.Click(chromedp.CSS(`#actions button[data-action="deploy…"]`)), chromedp.WaitVisible(chromedp.CSS(`#deploy-form`)),
			setValue(`#image-source`, "http://127.0.0.1:9/images/ubuntu.raw"),
			setValue(`#image-checksum`, "sha256:5f70bf18a086007016e948b04aed3b82103a36bea41755b6cddfaf10ace3c6ef"),
			chromedp.Click(chromedp.CSS(`#deploy-form button[type=submit]`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)),
			chromedp.Click(chromedp.CSS(`#confirm-ok`)), state("active"))
		assert.Contains(t, jsonBody(t, c, "/v1/nodes/rack1-node01?fields=instance_info"), "http://127.0.0.1:9/images/ubuntu.raw")
		step(t, ctx, "undeploy", 40*time.Second, chromedp.Click(chromedp.CSS(`#actions button[data-action="undeploy"]`)),
			chromedp.WaitVisible(chromedp.CSS(`#confirm`)), chromedp.Click(chromedp.CSS(`#confirm-ok`)), state("available"))
		step(t, ctx, "power on, then off after confirming", 30*time.Second,
			chromedp.Click(chromedp.CSS(`#actions button[data-action="power on"]`)),
			until(`document.getElementById('power-state').textContent === 'power: power on'`),
			chromedp.Click(chromedp.CSS(`#actions button[data-action="power off"]`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)),
			chromedp.Click(chromedp.CSS(`#confirm-cancel`)), chromedp.WaitNotVisible(chromedp.CSS(`#confirm`)))
		assert.Equal(t, "power on", jsonField(t, c, "/v1/nodes/rack1-node01", "power_state"), "cancelled: nothing done")
		step(t, ctx, "power off", 30*time.Second,
			chromedp.Click(chromedp.CSS(`#actions button[data-action="power off"]`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)),
			chromedp.Click(chromedp.CSS(`#confirm-ok`)), until(`document.getElementById('power-state').textContent === 'power: power off'`))
	})

	t.Run("maintenance from the page", func(t *testing.T) {
		step(t, ctx, "maintenance on with a reason", 10*time.Second,
			chromedp.Click(chromedp.CSS(`#actions button[data-action="maintenance on…"]`)), chromedp.WaitVisible(chromedp.CSS(`#confirm-reason`)),
			setValue(`#confirm-reason`, "disk swap"), chromedp.Click(chromedp.CSS(`#confirm-ok`)),
			until(`document.getElementById('node-status').innerText.includes('maintenance: disk swap')`),
			chromedp.Click(chromedp.CSS(`#actions button[data-action="maintenance off"]`)),
			until(`!document.getElementById('node-status').innerText.includes('maintenance')`))
	})

	// A machine the boot service discovered reports hardware without a
	// driver and missing firmware; manual cleaning then finds a disk of its
	// inventory missing and fails closed. The node page shows all of it,
	// and the fleet's search finds the node by its description.
	t.Run("hardware warnings, disk check, inspect and reboot", func(t *testing.T) {
		code, body := c.do(t, "POST", "/v1/discovery", `{"boot_id":"b1","inventory":{
			"system_vendor":{"manufacturer":"Supermicro","product_name":"SYS-1029U","serial_number":"HW-WARN-1"},
			"cpu":{"count":8,"architecture":"x86_64"},"memory":{"total":8000000000,"physical_mb":8192},
			"interfaces":[{"name":"eno1","mac_address":"52:54:00:a0:00:99","driver":"e1000e"}],
			"disks":[{"name":"/dev/sda","size":500000000000,"serial":"DISK-GONE-1","model":"SSD"}],
			"pci":[{"address":"0000:03:00.0","vendor":"1000","device":"0097","class":"010700","driver":"","modules":["mpt3sas"]}],
			"firmware_missing":["i915/tgl_dmc.bin"]}}`)
		require.Equal(t, 201, code, body)
		var dr struct {
			NodeUUID string `json:"node_uuid"`
		}
		require.NoError(t, json.Unmarshal([]byte(body), &dr))
		hw := dr.NodeUUID
		code, body = c.do(t, "PATCH", "/v1/nodes/"+hw, `[{"op":"replace","path":"/deploy_interface","value":"direct"}]`)
		require.Equal(t, 200, code, body)
		require.Equal(t, 202, first(c.do(t, "PUT", "/v1/nodes/"+hw+"/states/provision", `{"target":"manage"}`)))
		waitState(t, c, hw, "manageable")
		require.Equal(t, 202, first(c.do(t, "PUT", "/v1/nodes/"+hw+"/states/provision",
			`{"target":"clean","clean_steps":[{"interface":"deploy","step":"erase_devices_metadata"}]}`)))
		require.Eventually(t, func() bool { return jsonField(t, c, "/v1/nodes/"+hw, "provision_state") == "clean failed" },
			60*time.Second, 100*time.Millisecond)

		step(t, ctx, "the node's warnings", 20*time.Second, chromedp.Navigate(p.URL+"/ui/#/node/"+hw),
			until(`document.getElementById('provision-state')?.textContent === 'clean failed'`),
			until(`document.querySelectorAll('ul.warnings li').length >= 3`))
		warnings := eval[string](t, ctx, `document.querySelector('ul.warnings').innerText`)
		assert.Contains(t, warnings, "SAS controller 0000:03:00.0 (1000:0097) has no driver")
		assert.Contains(t, warnings, "mpt3sas", "the module the ramdisk has for it")
		assert.Contains(t, warnings, "firmware i915/tgl_dmc.bin was not found")
		assert.Contains(t, warnings, "disk check before deploy.erase_devices_metadata: missing disk DISK-GONE-1, SSD")
		page := eval[string](t, ctx, `document.getElementById('main').innerText`)
		assert.Contains(t, page, "HW-WARN-1")
		assert.Contains(t, page, "52:54:00:a0:00:99")
		assert.Contains(t, eval[string](t, ctx, `document.getElementById('last-error').textContent`), "nothing was erased")

		step(t, ctx, "search by description", 10*time.Second, chromedp.Navigate(p.URL+"/ui/#/"),
			chromedp.WaitVisible(chromedp.CSS(`#search`)), search("sys-1029u"),
			until(`location.hash.includes('q=sys-1029u') && document.querySelectorAll('#node-rows tr').length === 1 && !!document.querySelector('#node-rows tr[data-uuid="`+hw+`"]')`))

		// The remaining actions, from the page: manage and inspect the
		// failed node, then reboot it (off before, so on proves it).
		require.Equal(t, 202, first(c.do(t, "PUT", "/v1/nodes/"+hw+"/states/power", `{"target":"power off"}`)))
		require.Eventually(t, func() bool { return jsonField(t, c, "/v1/nodes/"+hw, "power_state") == "power off" }, 20*time.Second, 50*time.Millisecond)
		step(t, ctx, "manage, inspect, reboot", 40*time.Second, chromedp.Navigate(p.URL+"/ui/#/node/"+hw),
			until(`document.getElementById('power-state')?.textContent === 'power: power off'`),
			chromedp.Click(chromedp.CSS(`#actions button[data-action="manage"]`)),
			until(`document.getElementById('provision-state').textContent === 'manageable'`),
			chromedp.Click(chromedp.CSS(`#actions button[data-action="inspect"]`)),
			chromedp.Click(chromedp.CSS(`#actions button[data-action="reboot"]`)), chromedp.WaitVisible(chromedp.CSS(`#confirm`)),
			chromedp.Click(chromedp.CSS(`#confirm-ok`)), until(`document.getElementById('power-state').textContent === 'power: power on'`))
		require.Eventually(t, func() bool { return jsonField(t, c, "/v1/nodes/"+hw, "inspection_finished_at") != "" }, 20*time.Second, 50*time.Millisecond,
			"inspection from the page ran")
		assert.Equal(t, "power on", jsonField(t, c, "/v1/nodes/"+hw, "power_state"))
	})

	// Keyboard only: Tab to a node's link and Enter opens it; typing a
	// name into the search and Enter opens that node. Throughout, the page
	// holds one live connection, and it loaded nothing from elsewhere.
	t.Run("keyboard, one live connection, nothing from outside", func(t *testing.T) {
		require.NoError(t, chromedp.Do(ctx, chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			_, err := cdp.Call(ctx, tg, page.AddScriptToEvaluateOnNewDocument, page.AddScriptToEvaluateOnNewDocumentParams{Source: `(() => {
				const ES = window.EventSource; window.__streams = 0;
				window.EventSource = class extends ES {
					constructor(...a) { super(...a); window.__streams++; }
					close() { if (this.readyState !== 2) window.__streams--; super.close(); }
				};
			})()`})
			return err
		})))
		step(t, ctx, "a fresh fleet page", 20*time.Second, chromedp.Navigate(p.URL+"/ui/?fresh#/"),
			chromedp.WaitVisible(chromedp.CSS(`#node-rows tr .node-link`)), until(`window.__streams === 1`))
		tabbed := ""
		for range 80 {
			tabbed = eval[string](t, ctx, `document.activeElement?.classList.contains('node-link') ? document.activeElement.textContent : ''`)
			if tabbed != "" {
				break
			}
			step(t, ctx, "Tab", 5*time.Second, chromedp.KeyEvent("\t"))
		}
		require.NotEmpty(t, tabbed, "no node link is reachable with Tab")
		step(t, ctx, "Enter on the focused link", 10*time.Second, chromedp.KeyEvent("\r"),
			until(`document.getElementById('crumb')?.textContent === '`+tabbed+`'`), until(`window.__streams === 1`))
		step(t, ctx, "type a name into the search", 10*time.Second, chromedp.Navigate(p.URL+"/ui/?fresh#/"),
			chromedp.WaitVisible(chromedp.CSS(`#search`)), until(`(document.getElementById('search').focus(), document.activeElement.id === 'search')`),
			chromedp.KeyEvent("rack1-node07\r"), until(`document.getElementById('crumb')?.textContent === 'rack1-node07'`),
			until(`window.__streams === 1`))
		outside := eval[[]string](t, ctx, `[...performance.getEntriesByType('resource'), ...performance.getEntriesByType('navigation')]
			.map(e => e.name).filter(u => !u.startsWith(location.origin + '/'))`)
		assert.Empty(t, outside, "everything comes from the controller")
		assert.Greater(t, eval[int](t, ctx, `performance.getEntriesByType('resource').length`), 3, "the resource list is not empty by accident")
	})

	t.Run("CSRF", func(t *testing.T) {
		// The page's own request without its token is refused...
		res := eval[map[string]any](t, ctx, `fetch('/v1/nodes/rack1-node02/states/provision', {method: 'PUT',
			headers: {'X-OpenStack-Ironic-API-Version': 'latest', 'Content-Type': 'application/json'},
			body: JSON.stringify({target: 'provide'})}).then(async r => ({status: r.status, body: await r.text()}))`)
		assert.Equal(t, 403.0, res["status"])
		assert.Contains(t, res["body"], "CSRF token missing or invalid")
		// ...with a wrong one too...
		res = eval[map[string]any](t, ctx, `fetch('/v1/nodes/rack1-node02/states/provision', {method: 'PUT',
			headers: {'X-OpenStack-Ironic-API-Version': 'latest', 'Content-Type': 'application/json', 'X-CSRF-Token': 'x'.repeat(43)},
			body: JSON.stringify({target: 'provide'})}).then(async r => ({status: r.status, body: await r.text()}))`)
		assert.Equal(t, 403.0, res["status"])
		assert.Equal(t, "manageable", jsonField(t, c, "/v1/nodes/rack1-node02", "provision_state"))

		// ...and another site's form, which the browser sends with the
		// operator's credentials, creates nothing (without the protection
		// this text/plain body is a valid node).
		evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<form method="POST" action="%s/v1/nodes" enctype="text/plain">`+
				`<input name='{"driver":"fake-hardware","extra":{"csrf":"' value='x"}}'></form><script>document.forms[0].submit()</script>`, p.URL)
		}))
		defer evil.Close()
		evilURL := strings.Replace(evil.URL, "127.0.0.1", "localhost", 1) // another site, not only another port
		step(t, ctx, "cross-site form", 15*time.Second, chromedp.Navigate(evilURL))
		var landed string
		require.Eventually(t, func() bool { // the form navigates away; evaluations fail while it does
			landed, _ = chromedp.Run(ctx, chromedp.Evaluate[string](`location.href.startsWith('`+p.URL+`') ? document.body.innerText : ''`))
			return landed != ""
		}, 15*time.Second, 100*time.Millisecond, "the form was never submitted")
		assert.Contains(t, landed, "Cross-origin request refused")
		_, list := c.do(t, "GET", "/v1/nodes?fields=extra", "")
		assert.NotContains(t, list, "csrf", "the cross-site form created no node")

		// The API's own clients are unaffected: no browser headers, no token.
		assert.Equal(t, 202, first(c.do(t, "PUT", "/v1/nodes/rack1-node02/states/provision", `{"target":"provide"}`)))
	})
}

func first(code int, _ string) int { return code }

func jsonField(t *testing.T, c browserAuth, path, field string) string {
	t.Helper()
	code, body := c.do(t, "GET", path, "")
	require.Equal(t, 200, code, body)
	var m map[string]any
	require.NoError(t, json.Unmarshal([]byte(body), &m))
	s, _ := m[field].(string)
	return s
}

func jsonBody(t *testing.T, c browserAuth, path string) string {
	t.Helper()
	code, body := c.do(t, "GET", path, "")
	require.Equal(t, 200, code, body)
	return body
}

func waitState(t *testing.T, c browserAuth, node, want string) {
	t.Helper()
	require.Eventually(t, func() bool {
		code, body := c.do(t, "GET", "/v1/nodes/"+node+"?fields=provision_state,reservation,last_error", "")
		require.Equal(t, 200, code, body)
		require.NotContains(t, body, "failed", body)
		return strings.Contains(body, `"provision_state":"`+want+`"`) && strings.Contains(body, `"reservation":null`)
	}, 60*time.Second, 100*time.Millisecond, "%s never reached %s", node, want)
}
