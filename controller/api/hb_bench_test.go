package api

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/simagent"
)

// BenchmarkHeartbeat measures heartbeats handled per second, and their
// p99 latency: nodes waiting in clean wait, each with a simulated agent
// that looked up and runs a step, heartbeating over real HTTP into a
// file-backed store. 64 agents heartbeat at once, as in a fleet (two
// goroutines per core would measure one round trip at a time).
func BenchmarkHeartbeat(b *testing.B) {
	for _, nodes := range []int{500, 10000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) { benchHeartbeat(b, nodes) })
	}
}

func benchHeartbeat(b *testing.B, nodes int) {
	cc := agentConfig()
	cc.Agent.SilenceTimeout = time.Hour
	cc.CheckInterval = time.Hour
	t := &testing.T{}
	e := newEnvWith(t, cc, b.TempDir()+"/anvil.db")
	b.Cleanup(e.stop)
	e.t = t
	ctx := context.Background()
	agents := make([]*simagent.Agent, nodes)
	// Enrol in parallel: create, port, manage; then provide; each phase
	// waits for the whole fleet through the store's state counts.
	parallel := func(fn func(i int)) {
		var wg sync.WaitGroup
		var next atomic.Int64
		for w := 0; w < 16; w++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := int(next.Add(1)) - 1; i < nodes; i = int(next.Add(1)) - 1 {
					fn(i)
				}
			}()
		}
		wg.Wait()
	}
	waitCount := func(state string) {
		require.Eventually(b, func() bool {
			counts, err := e.st.CountNodesByState(ctx)
			return err == nil && counts[state] == nodes
		}, 10*time.Minute, 50*time.Millisecond, "fleet never reached %s", state)
	}
	name := func(i int) string { return fmt.Sprintf("hb-%05d", i) }
	mac := func(i int) string { return fmt.Sprintf("52:54:01:%02x:%02x:%02x", i>>16, (i>>8)&0xff, i&0xff) }
	parallel(func(i int) {
		n := e.createNode(name(i), map[string]any{"deploy_interface": "direct"})
		require.Equal(b, 201, e.do("POST", "/v1/ports", latest, map[string]any{"address": mac(i), "node_uuid": n["uuid"]}).status)
		require.Equal(b, 202, e.provision(name(i), "manage", nil).status)
	})
	waitCount("manageable")
	parallel(func(i int) { require.Equal(b, 202, e.provision(name(i), "provide", nil).status) })
	waitCount("clean wait") // rebooted into the ramdisk: now the agents boot
	parallel(func(i int) {
		a := simagent.New(e.srv.URL, mac(i))
		a.Outcomes["deploy.erase_devices_metadata"] = simagent.Outcome{Release: make(chan struct{})} // stays running
		require.Eventually(b, func() bool { return a.Lookup(ctx) == nil }, 10*time.Second, 10*time.Millisecond)
		_, err := a.Heartbeat(ctx)
		require.NoError(b, err)
		agents[i] = a
	})
	// Let the first command start everywhere, so the loop measures the
	// steady state: running steps reporting progress.
	for _, a := range agents {
		_, err := a.Heartbeat(ctx)
		require.NoError(b, err)
	}

	lat := make([]time.Duration, b.N)
	var next atomic.Int64
	b.ResetTimer()
	start := time.Now()
	b.SetParallelism(32)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			i := int(next.Add(1)) - 1
			t0 := time.Now()
			if _, err := agents[i%nodes].Heartbeat(ctx); err != nil {
				b.Error(err)
				return
			}
			lat[i] = time.Since(t0)
		}
	})
	elapsed := time.Since(start)
	b.StopTimer()
	slices.Sort(lat)
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "heartbeats/s")
	b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds())/1000, "p99-ms")
}
