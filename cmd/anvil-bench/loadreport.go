package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anvil-metal/anvil/internal/procfs"
)

// loadResult is what a run measured; printed as a table and as one JSON line.
type loadResult struct {
	Database           string             `json:"database"`
	Controllers        int                `json:"controllers"`
	Nodes              int                `json:"nodes"`
	Cleaning           int                `json:"cleaning"`
	Seconds            float64            `json:"seconds"`
	HeartbeatInterval  float64            `json:"heartbeat_interval_s"`
	EnrolSeconds       float64            `json:"enrol_seconds"`
	Heartbeats         calls              `json:"heartbeats"`
	HeartbeatsPerSec   float64            `json:"heartbeats_per_s"`
	HeartbeatsAfterEnd int64              `json:"heartbeats_after_end"`
	AgentReboots       int64              `json:"agent_reboots"`
	Lookups            calls              `json:"lookups"`
	Cleaned            int                `json:"cleaned"`
	CleanedPerMinute   float64            `json:"cleaned_per_minute"`
	CleanP50Seconds    float64            `json:"clean_p50_s"`
	CleanFailed        int64              `json:"clean_failed"`
	API                map[string]calls   `json:"api"`
	Processes          []procResult       `json:"processes"`
	MachineBusyPercent float64            `json:"machine_busy_percent"`
	LoadAverage        [2]string          `json:"load_average"` // 1-minute, before and after the load
	Targets            map[string]bool    `json:"targets"`
	ControllerLogs     map[string]logTail `json:"controller_logs"`
}

// calls summarises one kind of request.
type calls struct {
	OK      int            `json:"ok"`
	Failed  int            `json:"failed"`
	P50ms   float64        `json:"p50_ms"`
	P99ms   float64        `json:"p99_ms"`
	Reasons map[string]int `json:"reasons,omitempty"`
}

type procResult struct {
	Name       string  `json:"name"`
	PID        int     `json:"pid"`
	RSSPeakMB  float64 `json:"rss_peak_mb"`
	RSSFinalMB float64 `json:"rss_final_mb"`
	CPUSeconds float64 `json:"cpu_s"`
	CPUPercent float64 `json:"cpu_percent"`
}

type logTail struct {
	Warnings int      `json:"warnings"`
	Errors   int      `json:"errors"`
	First    []string `json:"first,omitempty"`
}

// recorder collects latencies and failure reasons of one kind of request.
type recorder struct {
	mu      sync.Mutex
	lat     []time.Duration
	reasons map[string]int
}

func (r *recorder) ok(d time.Duration) { r.mu.Lock(); r.lat = append(r.lat, d); r.mu.Unlock() }

func (r *recorder) fail(err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.reasons == nil {
		r.reasons = map[string]int{}
	}
	r.reasons[reason(err)]++
}

func (r *recorder) summary() calls {
	r.mu.Lock()
	defer r.mu.Unlock()
	c := calls{OK: len(r.lat), Reasons: r.reasons}
	for _, n := range r.reasons {
		c.Failed += n
	}
	d := slices.Clone(r.lat)
	slices.Sort(d)
	ms := func(q float64) float64 {
		if len(d) == 0 {
			return 0
		}
		return float64(d[int(q*float64(len(d)-1))].Microseconds()) / 1000
	}
	c.P50ms, c.P99ms = ms(0.50), ms(0.99)
	return c
}

var uuidRE = regexp.MustCompile(`[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}|127\.0\.0\.1:\d+`)

// reason names a failure so that equal causes count together.
func reason(err error) string {
	var ne net.Error
	if errors.Is(err, context.DeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
		return "timeout"
	}
	s := uuidRE.ReplaceAllString(err.Error(), "*")
	if len(s) > 140 {
		s = s[:140] + "…"
	}
	return s
}

// procStat is one process's memory and CPU time so far.
type procStat struct {
	rssKB, hwmKB    int
	anonKB, shmemKB int
	cpu             time.Duration
}

// clockTick is USER_HZ, the unit of /proc/PID/stat times: 100 on every
// Linux architecture Go supports.
const clockTick = 10 * time.Millisecond

// readProc reads /proc/PID/status and /proc/PID/stat; withChildren adds
// the CPU of reaped children (postgres backends that exited).
func readProc(pid int, withChildren bool) (procStat, error) {
	var s procStat
	status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return s, err
	}
	for _, line := range strings.Split(string(status), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		kb, _ := strconv.Atoi(f[1])
		switch f[0] {
		case "VmRSS:":
			s.rssKB = kb
		case "VmHWM:":
			s.hwmKB = kb
		case "RssAnon:":
			s.anonKB = kb
		case "RssShmem:":
			s.shmemKB = kb
		}
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return s, err
	}
	// Fields after the command name, which may contain spaces: state is
	// field 3, utime 14, stime 15, cutime 16, cstime 17.
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	n := 2
	if withChildren {
		n = 4
	}
	for _, v := range f[11 : 11+n] {
		t, _ := strconv.Atoi(v)
		s.cpu += time.Duration(t) * clockTick
	}
	return s, nil
}

// postgresStat sums the postgres server of port and all its processes
// (the postmaster and its backends and helpers). Its memory is their
// private memory plus the shared buffers once: each process's RSS counts
// the shared pages it touched again. It has no peak.
func postgresStat(port int) (procStat, error) {
	var total procStat
	ps, err := procfs.List("/proc")
	if err != nil {
		return total, err
	}
	master := 0
	parent := map[int]int{}
	for _, p := range ps {
		parent[p.PID] = p.PPID
		if isPostgresOn(procfs.Cmdline("/proc", p.PID), port) {
			master = p.PID
		}
	}
	if master == 0 {
		return total, fmt.Errorf("no postgres process for port %d", port)
	}
	for pid, ppid := range parent {
		if pid != master && ppid != master {
			continue
		}
		s, err := readProc(pid, pid == master)
		if err != nil {
			continue // a backend that just exited
		}
		total.anonKB += s.anonKB
		total.shmemKB = max(total.shmemKB, s.shmemKB)
		total.cpu += s.cpu
	}
	total.rssKB = total.anonKB + total.shmemKB
	total.hwmKB = total.rssKB
	return total, nil
}

// isPostgresOn says whether args start a postgres server on port.
func isPostgresOn(args []string, port int) bool {
	if len(args) == 0 || filepath.Base(args[0]) != "postgres" {
		return false
	}
	for i := 1; i+1 < len(args); i++ {
		if args[i] == "-p" && args[i+1] == strconv.Itoa(port) {
			return true
		}
	}
	return false
}

// machineStat reads the busy and total CPU time of the whole machine.
func machineStat() (busy, total time.Duration) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(strings.SplitN(string(b), "\n", 2)[0])[1:]
	for i, v := range f {
		t, _ := strconv.Atoi(v)
		total += time.Duration(t) * clockTick
		if i != 3 && i != 4 { // idle, iowait
			busy += time.Duration(t) * clockTick
		}
	}
	return busy, total
}

// sample is every measured process at one moment: the controllers, then
// postgres (if any), then the load generator itself, then the machine.
type sample struct {
	procs       []procStat
	busy, total time.Duration
	loadavg     string
}

func sampleAll(f *fleet) (sample, error) {
	var s sample
	for _, p := range f.procs {
		st, err := readProc(p.Process.Pid, false)
		if err != nil {
			return s, fmt.Errorf("controller %d: %w", p.Process.Pid, err)
		}
		s.procs = append(s.procs, st)
	}
	if f.pg != nil {
		st, err := postgresStat(f.pg.Port)
		if err != nil {
			return s, err
		}
		s.procs = append(s.procs, st)
	}
	self, err := readProc(os.Getpid(), false)
	if err != nil {
		return s, err
	}
	s.procs = append(s.procs, self)
	s.busy, s.total = machineStat()
	if b, err := os.ReadFile("/proc/loadavg"); err == nil {
		s.loadavg = strings.Fields(string(b))[0]
	}
	return s, nil
}

func (l *loadRun) result(f *fleet, elapsed, enrolled time.Duration, before, after sample) *loadResult {
	secs := elapsed.Seconds()
	r := &loadResult{Database: l.cfg.database, Controllers: len(f.procs), Nodes: l.cfg.nodes, Cleaning: l.cfg.cleaning,
		Seconds: secs, HeartbeatInterval: l.cfg.heartbeat.Seconds(), EnrolSeconds: enrolled.Seconds(),
		Heartbeats: l.hb.summary(), HeartbeatsAfterEnd: l.afterEnd.Load(), AgentReboots: l.reboots.Load(), Lookups: l.lookups.summary(),
		CleanFailed: l.cleanFailed.Load(), API: map[string]calls{}, ControllerLogs: map[string]logTail{}}
	r.HeartbeatsPerSec = float64(r.Heartbeats.OK+r.Heartbeats.Failed) / secs
	slices.Sort(l.cleanTimes)
	r.Cleaned = len(l.cleanTimes)
	r.CleanedPerMinute = float64(r.Cleaned) / elapsed.Minutes()
	if r.Cleaned > 0 {
		r.CleanP50Seconds = l.cleanTimes[r.Cleaned/2].Seconds()
	}
	for k, rec := range l.apiRec {
		r.API[k] = rec.summary()
	}
	var names []string
	for i, p := range f.procs {
		names = append(names, fmt.Sprintf("controller-%d", i))
		r.Processes = append(r.Processes, procResult{PID: p.Process.Pid})
	}
	if f.pg != nil {
		names = append(names, "postgres (all)")
		r.Processes = append(r.Processes, procResult{})
	}
	names = append(names, "load generator")
	r.Processes = append(r.Processes, procResult{PID: os.Getpid()})
	for i := range r.Processes {
		p := &r.Processes[i]
		p.Name = names[i]
		p.RSSPeakMB = float64(after.procs[i].hwmKB) / 1024
		p.RSSFinalMB = float64(after.procs[i].rssKB) / 1024
		p.CPUSeconds = (after.procs[i].cpu - before.procs[i].cpu).Seconds()
		p.CPUPercent = 100 * p.CPUSeconds / secs
	}
	if t := after.total - before.total; t > 0 {
		r.MachineBusyPercent = 100 * float64(after.busy-before.busy) / float64(t)
	}
	r.LoadAverage = [2]string{before.loadavg, after.loadavg}
	for i, path := range f.logs {
		r.ControllerLogs[names[i]] = readLogTail(path)
	}
	apiOK := true
	for _, k := range []string{"list", "detail", "show"} {
		apiOK = apiOK && r.API[k].P99ms < 100
	}
	rssOK := true
	for _, p := range r.Processes[:len(f.procs)] {
		rssOK = rssOK && p.RSSPeakMB < 200
	}
	r.Targets = map[string]bool{"api_p99_under_100ms": apiOK, "no_heartbeat_dropped": r.Heartbeats.Failed == 0,
		"rss_under_200mb": rssOK}
	return r
}

// readLogTail counts a controller log's warnings and errors and keeps the
// first few distinct messages.
func readLogTail(path string) logTail {
	var t logTail
	b, err := os.ReadFile(path)
	if err != nil {
		return t
	}
	seen := map[string]bool{}
	for _, line := range strings.Split(string(b), "\n") {
		switch {
		case strings.Contains(line, "level=WARN"):
			t.Warnings++
		case strings.Contains(line, "level=ERROR"):
			t.Errors++
		default:
			continue
		}
		msg := line
		if i := strings.Index(line, "msg="); i >= 0 {
			msg = uuidRE.ReplaceAllString(line[i:], "*")
		}
		if len(msg) > 160 {
			msg = msg[:160] + "…"
		}
		if !seen[msg] && len(t.First) < 5 {
			seen[msg] = true
			t.First = append(t.First, msg)
		}
	}
	return t
}

func (r *loadResult) print(out io.Writer) {
	row := func(name, format string, a ...any) {
		fmt.Fprintf(out, "%-40s "+format+"\n", append([]any{name}, a...)...)
	}
	fmt.Fprintf(out, "\n== %s, %d controller(s): %d nodes, %d cleaning at once, %.0f s of load\n", r.Database, r.Controllers, r.Nodes, r.Cleaning, r.Seconds)
	row("enrolment (create, port, manage)", "%.1f s", r.EnrolSeconds)
	hb := r.Heartbeats
	row("heartbeats sent", "%d (%.1f/s, interval %g s)", hb.OK+hb.Failed, r.HeartbeatsPerSec, r.HeartbeatInterval)
	row("heartbeat latency p50 / p99", "%.1f ms / %.1f ms", hb.P50ms, hb.P99ms)
	row("heartbeats failed or dropped", "%d", hb.Failed)
	printReasons(out, hb.Reasons)
	row("heartbeats refused after cleaning ended", "%d (expected: fake power cannot stop an agent)", r.HeartbeatsAfterEnd)
	row("agents restarted by a controller's reboot", "%d (their old token refused, as a rebooted ramdisk's)", r.AgentReboots)
	row("lookups ok / refused", "%d / %d (refused until the node waits for its agent)", r.Lookups.OK, r.Lookups.Failed)
	printReasons(out, r.Lookups.Reasons)
	row("nodes cleaned", "%d (%.0f/min, provide to available p50 %.1f s), clean failed %d", r.Cleaned, r.CleanedPerMinute, r.CleanP50Seconds, r.CleanFailed)
	for _, k := range []string{"list", "detail", "show", "provide", "manage"} {
		c := r.API[k]
		row("API "+k+" p50 / p99", "%.1f ms / %.1f ms (%d ok, %d failed)", c.P50ms, c.P99ms, c.OK, c.Failed)
		printReasons(out, c.Reasons)
	}
	fmt.Fprintf(out, "%-40s %10s %10s %10s %8s\n", "process", "RSS peak", "RSS end", "CPU s", "CPU %")
	for _, p := range r.Processes {
		fmt.Fprintf(out, "%-40s %7.1f MB %7.1f MB %10.1f %7.0f%%\n", p.Name, p.RSSPeakMB, p.RSSFinalMB, p.CPUSeconds, p.CPUPercent)
	}
	row("machine busy (all cores, all processes)", "%.0f%% (load average %s before, %s after)", r.MachineBusyPercent, r.LoadAverage[0], r.LoadAverage[1])
	for _, name := range slices.Sorted(maps.Keys(r.ControllerLogs)) {
		t := r.ControllerLogs[name]
		row(name+" log", "%d warnings, %d errors", t.Warnings, t.Errors)
		for _, m := range t.First {
			fmt.Fprintf(out, "    %s\n", m)
		}
	}
	row("targets", "API p99 < 100 ms: %v; no heartbeat dropped: %v; RSS < 200 MB: %v",
		r.Targets["api_p99_under_100ms"], r.Targets["no_heartbeat_dropped"], r.Targets["rss_under_200mb"])
}

func printReasons(out io.Writer, reasons map[string]int) {
	for _, k := range slices.Sorted(maps.Keys(reasons)) {
		fmt.Fprintf(out, "    %6d × %s\n", reasons[k], k)
	}
}
