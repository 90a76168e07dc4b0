package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anvil-metal/anvil/internal/pause"
)

// ironicAPIVersion is the microversion the workload asks both servers for:
// Ironic 21.4's newest, which the controller also speaks.
const ironicAPIVersion = "1.81"

// workload is the side-by-side benchmark's HTTP client: plain requests,
// identical for both servers, no client library's extra calls.
type workload struct {
	base      string
	hc        *http.Client
	conc      int
	conflicts atomic.Int64 // 409 (node locked) answers retried
}

func newWorkload(base string, conc int) *workload {
	return &workload{base: base, conc: conc,
		hc: &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}
}

// call sends one request; out, if not nil, receives the JSON answer (a
// *[]byte the body undecoded).
// Any status but want is an error, except 409, which it retries for up
// to a minute (a node still locked by the previous action).
func (w *workload) call(ctx context.Context, method, path string, body any, want int, out any) error {
	var data []byte
	if body != nil {
		var err error
		if data, err = json.Marshal(body); err != nil {
			return err
		}
	}
	deadline := time.Now().Add(time.Minute)
	for {
		req, err := http.NewRequestWithContext(ctx, method, w.base+path, bytes.NewReader(data))
		if err != nil {
			return err
		}
		req.Header.Set("X-OpenStack-Ironic-API-Version", ironicAPIVersion)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		res, err := w.hc.Do(req)
		if err != nil {
			return err
		}
		b, err := io.ReadAll(res.Body)
		res.Body.Close()
		if err != nil {
			return err
		}
		if res.StatusCode == http.StatusConflict && time.Now().Before(deadline) {
			w.conflicts.Add(1)
			if !pause.For(ctx, 50*time.Millisecond) {
				return ctx.Err()
			}
			continue
		}
		if res.StatusCode != want {
			return fmt.Errorf("%s %s: HTTP %d: %.300s", method, path, res.StatusCode, b)
		}
		if raw, ok := out.(*[]byte); ok {
			*raw = b
			return nil
		}
		if out != nil {
			return json.Unmarshal(b, out)
		}
		return nil
	}
}

// enrol creates n fake-hardware nodes (fake deploy interface: the default
// direct deploy needs an agent) and returns their UUIDs.
func (w *workload) enrol(ctx context.Context, prefix string, n int) ([]string, error) {
	idx := make([]int, n)
	for i := range idx {
		idx[i] = i
	}
	ids := make([]string, n)
	err := forEach(ctx, w.conc, idx, func(i int) error {
		var node struct {
			UUID string `json:"uuid"`
		}
		err := w.call(ctx, http.MethodPost, "/v1/nodes", map[string]any{"driver": "fake-hardware",
			"name": fmt.Sprintf("%s-%05d", prefix, i), "deploy_interface": "fake",
			"properties":  map[string]any{"cpus": 32, "memory_mb": 262144, "local_gb": 960, "cpu_arch": "x86_64"},
			"driver_info": map[string]any{"ipmi_address": "127.0.0.1", "ipmi_username": "admin", "ipmi_password": "x"}},
			http.StatusCreated, &node)
		ids[i] = node.UUID
		return err
	})
	return ids, err
}

// remove deletes the nodes, conc at a time.
func (w *workload) remove(ctx context.Context, ids []string) error {
	return forEach(ctx, w.conc, ids, func(id string) error {
		return w.call(ctx, http.MethodDelete, "/v1/nodes/"+id, nil, http.StatusNoContent, nil)
	})
}

// listAll reads every node's detail as a client does: GET
// /v1/nodes/detail without a limit (both servers then answer at most
// 1000 nodes, their default maximum), then each "next" link until a page
// comes without one. With exactly 1000 nodes both answer a full page with
// a next link and then an empty page. Returns nodes and requests.
//
// The pages are not decoded: the bench shares the machine's CPU with the
// server it measures, and decoding megabytes of JSON would take as long
// as the controller takes to send them. Nodes are counted by their "uuid":
// keys (other keys only end in uuid; a value is never followed by a colon)
// and the next link is read from the page's tail (or head); check, in the
// warm-up, decodes the page to confirm both.
func (w *workload) listAll(ctx context.Context, check bool) (int, int, error) {
	path, nodes, requests := "/v1/nodes/detail", 0, 0
	for path != "" {
		var body []byte
		if err := w.call(ctx, http.MethodGet, path, nil, http.StatusOK, &body); err != nil {
			return nodes, requests, err
		}
		count, next := bytes.Count(body, []byte(`"uuid":`)), ""
		m := nextLast.FindSubmatch(body[max(0, len(body)-1024):])
		if m == nil {
			m = nextFirst.FindSubmatch(body[:min(len(body), 1024)])
		}
		if m != nil {
			if err := json.Unmarshal(m[1], &next); err != nil {
				return nodes, requests, fmt.Errorf("next link %s: %w", m[1], err)
			}
		}
		if check {
			var page struct {
				Nodes []json.RawMessage `json:"nodes"`
				Next  string            `json:"next"`
			}
			if err := json.Unmarshal(body, &page); err != nil {
				return nodes, requests, err
			}
			if len(page.Nodes) != count || page.Next != next {
				return nodes, requests, fmt.Errorf("page scan: %d nodes, next %q; decoded: %d nodes, next %q", count, next, len(page.Nodes), page.Next)
			}
		}
		nodes, requests, path = nodes+count, requests+1, ""
		if next != "" && count > 0 {
			u, err := url.Parse(next)
			if err != nil {
				return nodes, requests, fmt.Errorf("next link %q: %w", next, err)
			}
			path = u.RequestURI()
		}
	}
	return nodes, requests, nil
}

// nextLast and nextFirst find a page's next link, the page's last or
// first key (both servers write it last), as a JSON string.
var (
	nextLast  = regexp.MustCompile(`"next"\s*:\s*("(?:[^"\\]|\\.)*")\s*}\s*$`)
	nextFirst = regexp.MustCompile(`^\s*{\s*"next"\s*:\s*("(?:[^"\\]|\\.)*")`)
)

// warmUp lists once, decoding and checking the pages, and returns how
// many requests a listing takes.
func (w *workload) warmUp(ctx context.Context, want int) (int, error) {
	n, req, err := w.listAll(ctx, true)
	if err == nil && n != want {
		err = fmt.Errorf("listing saw %d nodes, want %d", n, want)
	}
	return req, err
}

// listRound runs one full listing on each of clients concurrent clients
// and returns how long each took.
func (w *workload) listRound(ctx context.Context, clients, want int) ([]time.Duration, error) {
	var mu sync.Mutex
	var d []time.Duration
	err := forEach(ctx, clients, make([]int, clients), func(int) error {
		t := time.Now()
		n, _, err := w.listAll(ctx, false)
		el := time.Since(t)
		if err != nil {
			return err
		}
		if n != want {
			return fmt.Errorf("listing saw %d nodes, want %d", n, want)
		}
		mu.Lock()
		d = append(d, el)
		mu.Unlock()
		return nil
	})
	return d, err
}

// summarise fills p50 and p95 from the listings' durations.
func (l *latencies) summarise(d []time.Duration) {
	slices.Sort(d)
	ms := func(q float64) float64 { return float64(d[int(q*float64(len(d)-1))].Microseconds()) / 1000 }
	l.Listings, l.P50ms, l.P95ms = len(d), ms(0.50), ms(0.95)
}

// lifecycle enrols n nodes and takes them manage -> provide -> active,
// waiting after each action until every node is in the stable state and
// no longer locked.
func (w *workload) lifecycle(ctx context.Context, prefix string, n int) error {
	ids, err := w.enrol(ctx, prefix, n)
	if err != nil {
		return err
	}
	for _, step := range []struct{ verb, state string }{{"manage", "manageable"}, {"provide", "available"}, {"active", "active"}} {
		err := forEach(ctx, w.conc, ids, func(id string) error {
			return w.call(ctx, http.MethodPut, "/v1/nodes/"+id+"/states/provision", map[string]any{"target": step.verb},
				http.StatusAccepted, nil)
		})
		if err != nil {
			return fmt.Errorf("%s: %w", step.verb, err)
		}
		if err := w.waitAll(ctx, prefix, step.state, n); err != nil {
			return err
		}
	}
	return nil
}

// waitAll polls, every 100 ms, the node list filtered by state until want
// nodes named prefix-* are in it and unlocked; a node that failed (looked
// for every 2 s) stops it.
func (w *workload) waitAll(ctx context.Context, prefix, state string, want int) error {
	q := "/v1/nodes?fields=name,reservation&provision_state=" + url.QueryEscape(state)
	for i := 1; ; i++ {
		var page struct {
			Nodes []struct {
				Name        string  `json:"name"`
				Reservation *string `json:"reservation"`
			} `json:"nodes"`
		}
		if err := w.call(ctx, http.MethodGet, q, nil, http.StatusOK, &page); err != nil {
			return err
		}
		ready := 0
		for _, n := range page.Nodes {
			if n.Reservation == nil && strings.HasPrefix(n.Name, prefix+"-") {
				ready++
			}
		}
		if ready >= want {
			return nil
		}
		if i%20 == 0 {
			if err := w.failed(ctx); err != nil {
				return fmt.Errorf("waiting for %s: %w", state, err)
			}
		}
		if !pause.For(ctx, 100*time.Millisecond) {
			return fmt.Errorf("waiting for %d nodes %s (%d so far): %w", want, state, ready, ctx.Err())
		}
	}
}

// failed reports a node in a failure state, so a broken run stops early.
func (w *workload) failed(ctx context.Context) error {
	for _, st := range []string{"enroll", "clean failed", "deploy failed"} {
		var page struct {
			Nodes []struct {
				Name      string `json:"name"`
				LastError string `json:"last_error"`
			} `json:"nodes"`
		}
		q := "/v1/nodes?fields=name,last_error&provision_state=" + url.QueryEscape(st)
		if err := w.call(ctx, http.MethodGet, q, nil, http.StatusOK, &page); err != nil {
			return err
		}
		for _, n := range page.Nodes {
			if n.LastError != "" {
				return fmt.Errorf("node %s is %s: %s", n.Name, st, n.LastError)
			}
		}
	}
	return nil
}

// ratios compares the two sides: speed and CPU as Ironic ÷ anvil (how
// many times better anvil is), memory as anvil ÷ Ironic (the fraction of
// Ironic's that anvil uses).
func (r *ironicReport) ratios() {
	a, i := r.Sides[0], r.Sides[1]
	div := func(x, y float64) float64 {
		if y == 0 {
			return 0
		}
		return x / y
	}
	r.Ratios = map[string]float64{
		"list_1_p50_speedup":          div(i.List1.P50ms, a.List1.P50ms),
		"list_n_p50_speedup":          div(i.ListN.P50ms, a.ListN.P50ms),
		"list_cpu_ratio":              div(i.ListCPUms, a.ListCPUms),
		"lifecycle_cpu_ratio":         div(i.CPUSeconds, a.CPUSeconds),
		"lifecycle_time_speedup":      div(i.Lifecycle, a.Lifecycle),
		"lifecycle_peak_rss_fraction": div(a.PeakRSSMB, i.PeakRSSMB),
		"peak_rss_fraction":           div(a.RunPeakRSSMB, i.RunPeakRSSMB),
		"idle_rss_fraction":           div(a.IdleRSSMB, i.IdleRSSMB),
		"create_speedup":              div(i.CreateSeconds, a.CreateSeconds),
		"create_cpu_ratio":            div(i.CreateCPU, a.CreateCPU),
		"delete_speedup":              div(perNode(i.DeleteSeconds, i.Deleted), perNode(a.DeleteSeconds, a.Deleted)),
	}
	r.Targets = map[string]bool{
		"create_25x":        r.Ratios["create_speedup"] >= 25,
		"list_1_p50_20x":    r.Ratios["list_1_p50_speedup"] >= 20,
		"list_n_p50_25x":    r.Ratios["list_n_p50_speedup"] >= 25,
		"lifecycle_cpu_40x": r.Ratios["lifecycle_cpu_ratio"] >= 40,
		"peak_rss_quarter":  r.Ratios["peak_rss_fraction"] <= 0.25,
		"idle_rss_sixth":    r.Ratios["idle_rss_fraction"] <= 1.0/6,
	}
}

func perNode(seconds float64, n int) float64 {
	if n == 0 {
		return 0
	}
	return seconds / float64(n)
}

func (r *ironicReport) print(out io.Writer) {
	fmt.Fprintf(out, "\n== side by side: %d nodes listed, %d taken enroll -> active\n", r.Nodes, r.Lifecycle)
	fmt.Fprintf(out, "%-46s", "")
	for _, s := range r.Sides {
		fmt.Fprintf(out, " %16s", s.Server)
	}
	if r.Ratios != nil {
		fmt.Fprintf(out, " %10s %8s", "ratio", "target")
	}
	fmt.Fprintln(out)
	row := func(name string, v func(sideResult) string, ratio, target string) {
		fmt.Fprintf(out, "%-46s", name)
		for _, s := range r.Sides {
			fmt.Fprintf(out, " %16s", v(s))
		}
		if r.Ratios != nil && ratio != "" {
			fmt.Fprintf(out, " %10s %8s", ratio, target)
		}
		fmt.Fprintln(out)
	}
	x := func(k string) string { return fmt.Sprintf("%.1f×", r.Ratios[k]) }
	frac := func(k string) string { return fmt.Sprintf("%.2f", r.Ratios[k]) }
	mark := func(k, t string) string {
		if r.Targets[k] {
			return t + " ok"
		}
		return t + " MISS"
	}
	ms := func(f float64) string { return fmtDur(time.Duration(f * float64(time.Millisecond))) }
	s := func(f float64) string { return fmt.Sprintf("%.2f s", f) }
	mb := func(f float64) string { return fmt.Sprintf("%.1f MB", f) }
	row("idle RSS after start-up (all processes)", func(s sideResult) string { return mb(s.IdleRSSMB) }, frac("idle_rss_fraction"), mark("idle_rss_sixth", "≤0.17"))
	conc := 0
	if len(r.Sides) > 0 {
		conc = r.Sides[0].Writers
	}
	row(fmt.Sprintf("create %d nodes, %d clients, wall", r.Nodes, conc), func(x sideResult) string { return s(x.CreateSeconds) }, x("create_speedup"), mark("create_25x", "≥25×"))
	row("  server CPU", func(x sideResult) string { return s(x.CreateCPU) }, x("create_cpu_ratio"), "")
	row("DELETE, per node (wall ÷ nodes deleted)", func(x sideResult) string {
		return fmt.Sprintf("%.2f ms ×%d", perNode(x.DeleteSeconds, x.Deleted)*1000, x.Deleted)
	}, x("delete_speedup"), "")
	row("  server CPU", func(x sideResult) string { return s(x.DeleteCPU) }, "", "")
	row("peak RSS, whole run (sampled every 100 ms)", func(s sideResult) string { return mb(s.RunPeakRSSMB) }, frac("peak_rss_fraction"), mark("peak_rss_quarter", "≤0.25"))
	n := 1
	if len(r.Sides) > 0 {
		n = r.Sides[0].ListN.Clients
	}
	row("GET /v1/nodes/detail (all pages), 1 client p50", func(s sideResult) string { return ms(s.List1.P50ms) }, x("list_1_p50_speedup"), mark("list_1_p50_20x", "≥20×"))
	row("  p95", func(s sideResult) string { return ms(s.List1.P95ms) }, "", "")
	row("  server CPU per listing (1 client)", func(s sideResult) string { return ms(s.ListCPUms) }, x("list_cpu_ratio"), "")
	row(fmt.Sprintf("GET /v1/nodes/detail, %d clients p50", n), func(s sideResult) string { return ms(s.ListN.P50ms) }, x("list_n_p50_speedup"), mark("list_n_p50_25x", "≥25×"))
	row("  p95", func(s sideResult) string { return ms(s.ListN.P95ms) }, "", "")
	row(fmt.Sprintf("%d nodes enroll -> active, wall", r.Lifecycle), func(x sideResult) string { return s(x.Lifecycle) }, x("lifecycle_time_speedup"), "")
	row("  server CPU (utime+stime, all processes)", func(x sideResult) string { return s(x.CPUSeconds) }, x("lifecycle_cpu_ratio"), mark("lifecycle_cpu_40x", "≥40×"))
	row("  peak RSS in this phase (sampled every 20 ms)", func(s sideResult) string { return mb(s.PeakRSSMB) }, frac("lifecycle_peak_rss_fraction"), "")
	row("  VmHWM summed (reset before the phase)", func(s sideResult) string { return mb(s.HWMMB) }, "", "")
	row("  server processes", func(s sideResult) string { return fmt.Sprint(s.Processes) }, "", "")
	row("  409 answers retried", func(s sideResult) string { return fmt.Sprint(s.Conflicts) }, "", "")
	row("load average at start / end", func(s sideResult) string {
		return strings.Fields(s.LoadAverage[0] + " ?")[0] + " / " + strings.Fields(s.LoadAverage[1] + " ?")[0]
	}, "", "")
}
