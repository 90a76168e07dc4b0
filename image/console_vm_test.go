//go:build vm

package image

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/anvil-metal/anvil/bmc/vbmc/ipmisim"
	"github.com/anvil-metal/anvil/controller/client"
)

// TestVMConsoleOverSOL is the console's whole path: a QEMU node whose
// serial port anvil-vbmc bridges to OpenIPMI's ipmi_sim SOL, the
// controller's SOL client holding the session, the API's WebSocket. The
// console is enabled through the API before inspection boots the node; the
// viewer sees the ramdisk's kernel boot on ttyS0, types a string the
// node's tty echoes back, reads the same lines from the console log, and
// its socket ends when the console is disabled.
func TestVMConsoleOverSOL(t *testing.T) {
	ipmisim.SkipIfMissing(t)
	e := newE2EWith(t, e2eConfig{serialSOL: true})
	sim := ipmisim.Start(t, ipmisim.Options{ChassisControl: fmt.Sprintf("%s chassis-control --url %s/control/e2e-node --username admin --password password",
		ipmisim.BuildVBMC(t), e.bmcURL), SOL: "tcp:" + e.qemu.SerialAddr()})
	c := e.c
	n := c.mustCall(t, "POST", "/v1/nodes", map[string]any{"driver": "ipmi", "name": "sol-vm", "console_interface": "ipmitool-socat",
		"deploy_interface": "direct",
		"driver_info":      map[string]any{"ipmi_address": "127.0.0.1", "ipmi_port": sim.Port, "ipmi_username": "admin", "ipmi_password": "password"}})
	c.mustCall(t, "POST", "/v1/ports", map[string]any{"address": e.mac, "node_uuid": n["uuid"]})
	start := time.Now()
	step := func(what string) { t.Logf("[%6.1fs] %s", time.Since(start).Seconds(), what) }

	c.mustCall(t, "PUT", "/v1/nodes/sol-vm/states/console", map[string]any{"enabled": true})
	info := c.mustCall(t, "GET", "/v1/nodes/sol-vm/states/console", nil)
	if info["console_enabled"] != true {
		t.Fatalf("console_enabled after PUT: %v", info)
	}
	ci, _ := info["console_info"].(map[string]any)
	if u, _ := ci["url"].(string); !strings.HasPrefix(u, "ws://") || !strings.HasSuffix(u, "/console/ws") {
		t.Fatalf("console_info %v", ci)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cons, err := client.New(c.url, nil).DialConsole(ctx, "sol-vm", true)
	if err != nil {
		t.Fatal(err)
	}
	defer cons.Close()
	if !cons.Status.Input {
		t.Fatal("the only viewer did not get the console's input")
	}
	out := &lockedBuffer{}
	ended := make(chan error, 1)
	go func() {
		for {
			p, err := cons.Read(ctx)
			if err != nil {
				ended <- err
				return
			}
			out.Write(p)
		}
	}()
	waitOut := func(what, want string, d time.Duration) {
		t.Helper()
		deadline := time.Now().Add(d)
		for !strings.Contains(out.String(), want) {
			if time.Now().After(deadline) {
				t.Fatalf("no %q on the console within %s (%s); console so far:\n%s", want, d, what, tailBytes([]byte(out.String()), 3000))
			}
			time.Sleep(100 * time.Millisecond)
		}
		step(what)
	}
	waitOut("the controller's SOL session is up", "[anvil] console connected", time.Minute)

	// Inspection boots the agent ramdisk (boot device pxe, then power on,
	// over IPMI); the console shows its boot.
	e.verb(t, "sol-vm", "manage")
	c.waitState(t, "sol-vm", "manageable", time.Minute)
	e.verb(t, "sol-vm", "inspect")
	step("inspection requested: the node boots the ramdisk")
	waitOut("the kernel's banner arrived over SOL", "Linux version", 2*time.Minute)
	waitOut("the kernel ran the ramdisk's init", "Run /init as init process", 2*time.Minute)

	const typed = "anvil-sol-echo-42"
	if err := cons.Write(ctx, []byte(typed)); err != nil {
		t.Fatal(err)
	}
	waitOut("typed characters came back (the tty's echo)", typed, time.Minute)

	log := rawGet(t, c.url+"/v1/nodes/"+n["uuid"].(string)+"/console/log")
	if !strings.Contains(log, "Linux version") || !strings.Contains(log, typed) {
		t.Errorf("the console log lacks the boot or the echo:\n%s", tailBytes([]byte(log), 2000))
	}

	browser := dashboardConsole(t, c.url, n["uuid"].(string))
	if browser != nil {
		step("the dashboard's terminal shows the boot, read-only beside the first viewer")
	}

	c.mustCall(t, "PUT", "/v1/nodes/sol-vm/states/console", map[string]any{"enabled": false})
	select {
	case err := <-ended:
		if !errors.Is(err, io.EOF) {
			t.Errorf("the console socket ended with %v, want a normal close", err)
		}
		step("disabling the console closed the WebSocket")
	case <-time.After(30 * time.Second):
		t.Fatal("the console socket stayed open after the console was disabled")
	}
	if browser != nil {
		browser.waitJS(t, "the dashboard's terminal closes", 30*time.Second,
			`document.querySelector('#console-status').textContent === 'console closed'`)
	}
}

// rawGet returns a GET's body as text (the console log is text/plain).
func rawGet(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, err := io.ReadAll(res.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// chromium is a headless chromium on the dashboard.
type chromium struct{ ctx context.Context }

func (b *chromium) waitJS(t *testing.T, what string, d time.Duration, cond string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, d)
	defer cancel()
	p := chromedp.Poll[bool](cond, chromedp.WithPollingInterval(100*time.Millisecond), chromedp.WithPollingTimeout(0))
	if _, err := chromedp.Run(ctx, p); err != nil {
		text, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.getElementById('main').innerText`))
		t.Fatalf("%s: %v\npage text:\n%s", what, err, tailBytes([]byte(text), 2000))
	}
}

// dashboardConsole opens the node page's serial console in chromium and
// checks that the terminal holds the ramdisk's boot (the scrollback) and
// that it is read-only, the test's WebSocket having the input; nil when
// chromium is not installed.
func dashboardConsole(t *testing.T, base, node string) *chromium {
	path, err := exec.LookPath("chromium")
	if err != nil {
		t.Logf("chromium is not installed: the dashboard part is skipped")
		return nil
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(),
		chromedp.ExecPath(path), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.NoDefaultBrowserCheck, chromedp.Flag("disable-dev-shm-usage", true), chromedp.UserDataDir(t.TempDir()))
	ctx, cancel := chromedp.NewContext(actx)
	t.Cleanup(func() { cancel(); cancelAlloc() })
	if err := chromedp.Do(ctx, chromedp.Navigate(base+"/ui/#/node/"+node)); err != nil {
		t.Fatal(err)
	}
	b := &chromium{ctx: ctx}
	b.waitJS(t, "the console card offers to open the terminal", time.Minute,
		`!!document.querySelector('#console [data-action="open console"]')`)
	if err := chromedp.Do(ctx, chromedp.Click(`#console [data-action="open console"]`)); err != nil {
		t.Fatal(err)
	}
	buffer := `(() => { const s = document.querySelector('#console-screen'); if (!s || !s.xterm) return '';
		const b = s.xterm.buffer.active; let out = ''; for (let i = 0; i < b.length; i++) out += b.getLine(i).translateToString(true) + '\n'; return out; })()`
	b.waitJS(t, "the terminal shows the ramdisk's boot", time.Minute,
		buffer+`.includes('Linux version') && `+buffer+`.includes('Run /init as init process')`)
	b.waitJS(t, "the page says it is read-only", 30*time.Second,
		`document.querySelector('#console-status').textContent === 'connected read-only: another viewer has the input'`)
	return b
}
