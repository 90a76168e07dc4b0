package api

import (
	"context"
	"net/http"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/anvil-metal/anvil/controller/store"
)

// MetricsRoute is how the API serves /metrics. Node counts by state and
// per-route statistics are the operator's business, so by default they
// need the API's credentials.
type MetricsRoute int

const (
	MetricsAuthed    MetricsRoute = iota // behind the API's auth
	MetricsPublic                        // to anyone (--metrics-public)
	MetricsElsewhere                     // not on the API: on a listener of its own (--metrics-listen)
)

func (m MetricsRoute) String() string {
	switch m {
	case MetricsPublic:
		return "public"
	case MetricsElsewhere:
		return "own listener"
	}
	return "behind auth"
}

// Metrics are the controller's Prometheus metrics, on a registry of their
// own (no global registry: tests can build several servers).
type Metrics struct {
	reg        *prometheus.Registry
	requests   *prometheus.HistogramVec
	claims     *prometheus.CounterVec
	untrusted  *prometheus.CounterVec
	suppressed *prometheus.CounterVec
	dropped    *prometheus.CounterVec
	limited    *prometheus.CounterVec
	deploys    *prometheus.HistogramVec
}

// NewMetrics registers request latency and a nodes-by-state gauge that
// counts from the store at scrape time (one indexed GROUP BY query).
func NewMetrics(st store.Nodes) *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{reg: reg, requests: prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "anvil_api_request_duration_seconds",
		Help:    "Latency of API requests by method, route and status.",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
	}, []string{"method", "route", "code"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_agent_second_claimants_total",
			Help: "Second agent claimants: lookups, heartbeats and boot-script fetches that brought a boot's secret after another party had used it. Each stopped the node's operation (security alarm).",
		}, []string{"via"}),
		untrusted: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_agent_requests_refused_total",
			Help: "Lookups and boot-script fetches refused for lacking what the boot requires (its nonce, the address leased to the node); nothing was given away.",
		}, []string{"via"}),
		suppressed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_history_events_suppressed_total",
			Help: "History events about unauthenticated requests left out by the per-node budget, by source (agent, boot).",
		}, []string{"source"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_boot_requests_dropped_total",
			Help: "Boot-service requests (DHCP, TFTP) refused or ignored by its bounds, by service and reason.",
		}, []string{"service", "reason"}),
		limited: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "anvil_public_requests_limited_total",
			Help: "Requests to the unauthenticated agent and boot endpoints refused by the per-source rate limit.",
		}, []string{"route"}),
		deploys: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "anvil_deploy_duration_seconds",
			Help:    "Time from the active request to active, by part (boot: until the agent was ready; steps: the rest) and by how the agent was ready (path: fast track, full boot).",
			Buckets: []float64{1, 5, 15, 30, 60, 120, 300, 600, 1200, 2400, 3600},
		}, []string{"part", "path"})}
	reg.MustRegister(m.requests, m.claims, m.untrusted, m.suppressed, m.dropped, m.limited, m.deploys, collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		&nodeStates{st: st, desc: prometheus.NewDesc("anvil_nodes", "Nodes by provision state.", []string{"provision_state"}, nil)})
	return m
}

// Suppressed counts n history events left out by a node's budget.
func (m *Metrics) Suppressed(source string, n int) {
	m.suppressed.WithLabelValues(source).Add(float64(n))
}

// DeployTimed records a deploy that reached active: its boot and steps
// parts, by the path its agent took.
func (m *Metrics) DeployTimed(path string, boot, steps time.Duration) {
	m.deploys.WithLabelValues("boot", path).Observe(boot.Seconds())
	m.deploys.WithLabelValues("steps", path).Observe(steps.Seconds())
}

// Dropped counts a boot-service request refused or ignored by its bounds.
func (m *Metrics) Dropped(service, reason string) {
	m.dropped.WithLabelValues(service, reason).Inc()
}

func (m *Metrics) observe(method, route string, code int, d time.Duration) {
	m.requests.WithLabelValues(method, route, strconv.Itoa(code)).Observe(d.Seconds())
}

// Handler serves /metrics.
func (m *Metrics) Handler() http.Handler { return promhttp.HandlerFor(m.reg, promhttp.HandlerOpts{}) }

type nodeStates struct {
	st   store.Nodes
	desc *prometheus.Desc
}

func (c *nodeStates) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *nodeStates) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	counts, err := c.st.CountNodesByState(ctx)
	if err != nil {
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	for st, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), st)
	}
}
