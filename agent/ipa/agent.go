// Package ipa lets a stock OpenStack Ironic drive anvil's agent: it speaks
// ironic-python-agent's (IPA's) side of Ironic's protocol, as of Ironic 21.4
// (2023.1): lookup and heartbeat towards Ironic, and IPA's REST API on
// port 9999, where Ironic pushes commands. The commands run on the same
// hardware managers anvil's own protocol drives; this package only
// translates.
//
// The agent selects it when the kernel command line carries Ironic's
// arguments (ipa-api-url=) and not anvil's (anvil.api=).
package ipa

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/agent"

	"github.com/anvil-metal/anvil/internal/pause"
)

// DefaultPort is IPA's listen and advertise port.
const DefaultPort = 9999

// tokenRejections is how many heartbeats in a row Ironic may refuse for
// the token (or an unknown node) before the agent looks itself up again.
const tokenRejections = 3

// Config is the IPA side's configuration, from IPA's kernel arguments.
type Config struct {
	API           string // ipa-api-url
	AdvertiseHost string // ipa-advertise-host; "" = the address routing to the API
	AdvertisePort int    // ipa-advertise-port; 0 = DefaultPort
	ListenAddr    string // ipa-listen-host:ipa-listen-port; "" = ":9999"
	Insecure      bool   // ipa-insecure
	// Fingerprint pins Ironic's TLS certificate ("sha256:<hex>",
	// anvil.api_fingerprint= or --api-fingerprint), as in anvil mode.
	Fingerprint     string
	GlobalRequestID string // ipa-global-request-id
	BootIF          string // BOOTIF: this MAC is looked up first
	NodeUUID        string // sent with the lookup when known
}

// Agent is the IPA-speaking agent loop: network, lookup, serve, heartbeat.
type Agent struct {
	Config  Config
	Network agent.Network
	// Hardware builds the dispatcher once the node is known.
	Hardware func(ctx context.Context, node map[string]any) (Hardware, error)
	Power    Power        // nil fails power_off/run_image
	Logs     LogCollector // nil fails collect_system_logs
	Sync     func()       // standby.sync
	Log      *slog.Logger
	Version  string
	Backoff  agent.Backoff
	// Listener, when set, is served instead of listening on ListenAddr
	// (tests).
	Listener net.Listener
	// MinHeartbeat bounds how often a forced heartbeat may go out; IPA's
	// is 5 s. Zero means 5 s.
	MinHeartbeat time.Duration
}

// Run looks the node up, serves IPA's API and heartbeats until ctx is done.
// Runtime failures are logged and retried; only a misconfiguration returns
// an error.
func (a *Agent) Run(ctx context.Context) error {
	if a.Network == nil || a.Hardware == nil {
		return errors.New("ipa: Network and Hardware are required")
	}
	if a.Log == nil {
		a.Log = slog.New(slog.DiscardHandler)
	}
	if a.MinHeartbeat <= 0 {
		a.MinHeartbeat = 5 * time.Second
	}
	if a.Backoff.Max <= 0 {
		a.Backoff.Max = 10 * time.Second // IPA's lookup starts at 1 s too
	}
	client, err := NewClient(a.Config, a.Version)
	if err != nil {
		return err
	}
	macs := a.networkUp(ctx)
	if macs == nil {
		return nil
	}
	lr := a.lookup(ctx, client, macs)
	if lr == nil {
		return nil
	}
	log := a.Log.With("node", lr.UUID())
	var hw Hardware
	for failures := 0; hw == nil; failures++ {
		if hw, err = a.Hardware(ctx, lr.Node); err != nil {
			log.Error("ipa: hardware managers", "err", err)
			if !pause.For(ctx, a.Backoff.Delay(failures)) {
				return nil
			}
		}
	}

	forced := make(chan struct{}, 1)
	force := func() {
		select {
		case forced <- struct{}{}:
		default:
		}
	}
	locked := make(chan struct{})
	ext := &Extensions{Hardware: hw, Power: a.Power, Logs: a.Logs, Log: log, Sync: a.Sync}
	ext.SetNode(lr.Node)
	srv := &Server{Version: a.Version, Started: time.Now(), Log: log}
	ext.Lockdown = func() {
		if srv.Lockdown() {
			close(locked)
		}
	}
	srv.Commands = newCommands(ctx, ext.handlers(), log, force)
	if lr.Config.AgentToken == "" { // none, or Ironic's "******" (ParseLookup)
		// Ironic hands the token out once; without it every command
		// would be refused, so say why loudly.
		log.Error("ipa: Ironic gave no agent token (already retrieved by an earlier boot?); commands will be refused until the node is rebooted into the ramdisk")
	}
	srv.SetToken(lr.Config.AgentToken)

	ln := a.Listener
	if ln == nil {
		addr := a.Config.ListenAddr
		if addr == "" {
			addr = ":" + strconv.Itoa(DefaultPort)
		}
		if ln, err = net.Listen("tcp", addr); err != nil {
			return fmt.Errorf("ipa: listen on %s: %w", addr, err)
		}
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 30 * time.Second, BaseContext: func(net.Listener) context.Context { return ctx }}
	go func() {
		if err := hs.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("ipa: API server stopped", "err", err)
		}
	}()
	defer func() {
		shut, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = hs.Shutdown(shut)
	}()
	log.Info("ipa: serving IPA's API", "listen", ln.Addr().String())

	callback := a.callbackURL(ctx, ln)
	a.heartbeats(ctx, log, client, lr, callback, forced, locked)
	return nil
}

// networkUp returns the MACs to look up with, BOOTIF's first; nil when ctx
// ended.
func (a *Agent) networkUp(ctx context.Context) []string {
	for failures := 0; ; failures++ {
		macs, err := a.Network.Up(ctx)
		if err == nil && len(macs) > 0 {
			return withBootIF(macs, a.Config.BootIF)
		}
		a.Log.Warn("ipa: network not up yet", "err", err)
		if !pause.For(ctx, a.Backoff.Delay(failures)) {
			return nil
		}
	}
}

// withBootIF puts the PXE interface (BOOTIF=01-aa-bb-cc-dd-ee-ff) first.
func withBootIF(macs []string, bootif string) []string {
	mac := strings.ToLower(strings.ReplaceAll(bootif, "-", ":"))
	if len(mac) == 20 && strings.HasPrefix(mac, "01:") {
		mac = mac[3:]
	}
	if _, err := net.ParseMAC(mac); err != nil {
		return macs
	}
	out := []string{mac}
	for _, m := range macs {
		if strings.ToLower(m) != mac {
			out = append(out, m)
		}
	}
	return out
}

// lookup retries until Ironic knows the node; nil when ctx ended. A locked
// node (409) waits 5, 10, then 30 s as IPA does.
func (a *Agent) lookup(ctx context.Context, c *Client, macs []string) *LookupResult {
	locked := 0 * time.Second
	for failures := 0; ; failures++ {
		lr, err := c.Lookup(ctx, macs, a.Config.NodeUUID)
		if err == nil {
			a.Log.Info("ipa: lookup succeeded", "node", lr.UUID(), "heartbeat_timeout", lr.Config.HeartbeatTimeout)
			return lr
		}
		d := a.Backoff.Delay(failures)
		if errors.Is(err, ErrConflict) {
			locked = nextLockPause(locked)
			d = locked
		}
		a.Log.Warn("ipa: lookup failed; retrying", "addresses", macs, "err", err, "retry_in", d.String())
		if !pause.For(ctx, d) {
			return nil
		}
	}
}

// nextLockPause is IPA's wait after a lookup found the node locked: 5,
// 10, then 30 s.
func nextLockPause(prev time.Duration) time.Duration {
	switch prev {
	case 0:
		return 5 * time.Second
	case 5 * time.Second:
		return 10 * time.Second
	}
	return 30 * time.Second
}

// callbackURL is what Ironic calls back: the advertised host and port, or
// the local address that routes to Ironic (IPA's _get_route_source).
func (a *Agent) callbackURL(ctx context.Context, ln net.Listener) string {
	port := a.Config.AdvertisePort
	if port == 0 {
		port = DefaultPort
	}
	host := a.Config.AdvertiseHost
	for failures := 0; host == ""; failures++ {
		if host = routeSource(a.Config.API); host == "" {
			a.Log.Warn("ipa: no route to Ironic to advertise an address from; set ipa-advertise-host")
			if !pause.For(ctx, a.Backoff.Delay(failures)) {
				return ""
			}
		}
	}
	return "http://" + net.JoinHostPort(host, strconv.Itoa(port))
}

func routeSource(api string) string {
	u, err := url.Parse(api)
	if err != nil {
		return ""
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	// UDP "connect" sends nothing; it only picks the route's source.
	conn, err := net.Dial("udp", net.JoinHostPort(u.Hostname(), port))
	if err != nil {
		return ""
	}
	defer conn.Close()
	addr, ok := conn.LocalAddr().(*net.UDPAddr)
	if !ok {
		return ""
	}
	return addr.IP.String()
}

// heartbeats runs IPA's heartbeater: one now, then every heartbeat_timeout
// × [0.3, 0.6] (jittered as IPA does), and a forced one when a command
// finishes, but not more often than MinHeartbeat.
func (a *Agent) heartbeats(ctx context.Context, log *slog.Logger, c *Client, lr *LookupResult, callback string,
	forced <-chan struct{}, locked <-chan struct{}) {
	var last time.Time
	wait := time.Duration(0)
	rejected := 0
	for {
		timer := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-locked:
			timer.Stop()
			log.Warn("ipa: locked down; no more heartbeats or commands")
			<-ctx.Done()
			return
		case <-forced:
			timer.Stop()
			if since := time.Since(last); since < a.MinHeartbeat {
				if !pause.For(ctx, a.MinHeartbeat-since) {
					return
				}
			}
		case <-timer.C:
		}
		err := c.Heartbeat(ctx, lr.UUID(), callback, lr.Config.AgentToken, a.Version)
		switch {
		case err == nil:
			log.Debug("ipa: heartbeat accepted", "callback_url", callback)
			last, rejected = time.Now(), 0
		case errors.Is(err, ErrConflict):
			log.Warn("ipa: heartbeat conflict (node locked)", "err", err)
		case errors.Is(err, ErrTokenRejected) || errors.Is(err, ErrNotFound):
			rejected++
			log.Warn("ipa: Ironic no longer takes this agent's heartbeats", "err", err, "times", rejected)
			if rejected >= tokenRejections {
				// Ironic wiped the token (the operation ended, and with
				// fake or failed power the machine still runs us): look
				// up again, like a fresh boot, for the next operation.
				log.Info("ipa: looking the node up again")
				return
			}
		default:
			log.Error("ipa: heartbeat failed", "err", err)
		}
		wait = heartbeatInterval(lr.Config.HeartbeatTimeout, rand.Float64())
	}
}

// heartbeatInterval is IPA's: heartbeat_timeout × uniform(0.3, 0.6), so a
// heartbeat or two may be lost before Ironic times the agent out. jitter
// is in [0, 1).
// The period is capped at a day: a huge heartbeat_timeout must not
// overflow into a negative (busy) period.
func heartbeatInterval(timeout, jitter float64) time.Duration {
	const maxPeriod = 24 * time.Hour
	d := timeout * (0.3 + 0.3*jitter) * float64(time.Second)
	if d > float64(maxPeriod) {
		return maxPeriod
	}
	return time.Duration(d)
}
