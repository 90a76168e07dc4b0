package burnin

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/anvil-metal/anvil/hardware"
)

// reportEvery is how often a burn-in reports progress (the heartbeat
// carries the latest report; more often would only cost CPU).
const reportEvery = 2 * time.Second

// clock reports a time-bound run's progress as an erase's is read: a
// percentage, and a message with what is done and the time left.
type clock struct {
	fn    hardware.ProgressFunc
	start time.Time
	total time.Duration
}

func newClock(fn hardware.ProgressFunc, total time.Duration) clock {
	return clock{fn: fn, start: time.Now(), total: total}
}

func (c clock) elapsed() time.Duration { return time.Since(c.start) }

func (c clock) over() bool { return c.total > 0 && time.Since(c.start) >= c.total }

func (c clock) report(device, msg string) {
	el := time.Since(c.start)
	pct := 0.0
	left := ""
	if c.total > 0 {
		pct = 100 * float64(el) / float64(c.total)
		left = fmt.Sprintf(", %s left", remaining(c.total-el))
	}
	c.fn.Report(hardware.Progress{Percent: math.Min(pct, 99.9), Device: device, Message: msg + left})
}

// remaining says a duration for people: seconds below two minutes.
func remaining(d time.Duration) string {
	d = max(d, 0)
	if d < 2*time.Minute {
		return fmt.Sprintf("%d s", int(d.Seconds()+0.5))
	}
	return d.Round(time.Minute).String()
}

// Temperature is the hottest a kernel sensor read during the run.
type Temperature struct {
	Sensor   string  `json:"sensor"`
	MaxMilli int64   `json:"max_millicelsius"`
	Celsius  float64 `json:"max_celsius"`
}

// thermometer samples the kernel's thermal zones and hwmon sensors (where
// it reports any: a VM has none) and keeps each one's maximum.
type thermometer struct {
	root string
	mu   sync.Mutex
	max  map[string]int64
}

func newThermometer(root string) *thermometer {
	t := &thermometer{root: root, max: map[string]int64{}}
	t.sample()
	return t
}

func (t *thermometer) sample() {
	read := func(p string) (int64, bool) {
		b, err := os.ReadFile(p)
		if err != nil {
			return 0, false
		}
		v, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		return v, err == nil
	}
	label := func(p string) string {
		b, _ := os.ReadFile(p)
		return strings.TrimSpace(string(b))
	}
	seen := map[string]int64{}
	zones, _ := filepath.Glob(filepath.Join(t.root, "sys/class/thermal/thermal_zone*/temp"))
	for _, z := range zones {
		if v, ok := read(z); ok {
			dir := filepath.Dir(z)
			seen[filepath.Base(dir)+" "+label(filepath.Join(dir, "type"))] = v
		}
	}
	inputs, _ := filepath.Glob(filepath.Join(t.root, "sys/class/hwmon/hwmon*/temp*_input"))
	for _, in := range inputs {
		if v, ok := read(in); ok {
			dir, base := filepath.Dir(in), filepath.Base(in)
			name := label(filepath.Join(dir, "name")) + " " + label(filepath.Join(dir, strings.TrimSuffix(base, "_input")+"_label"))
			seen[filepath.Base(dir)+" "+strings.TrimSpace(name)] = v
		}
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for k, v := range seen {
		if cur, ok := t.max[k]; !ok || v > cur {
			t.max[k] = v
		}
	}
}

func (t *thermometer) result() []Temperature {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]Temperature, 0, len(t.max))
	for k, v := range t.max {
		out = append(out, Temperature{Sensor: k, MaxMilli: v, Celsius: float64(v) / 1000})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Sensor < out[j].Sensor })
	return out
}

// hottest says the highest reading for a summary, or "".
func hottest(ts []Temperature) string {
	var best *Temperature
	for i := range ts {
		if best == nil || ts[i].MaxMilli > best.MaxMilli {
			best = &ts[i]
		}
	}
	if best == nil {
		return ""
	}
	return fmt.Sprintf("; hottest %.0f °C (%s)", best.Celsius, best.Sensor)
}
