package ui

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

// benchFleet is 10,000 nodes as a busy fleet has them: every node with its
// agent's step cache (the bulk of a node document), 5% cleaning with
// progress.
func benchFleet(b *testing.B, n int) *env {
	e := newEnv(b, b.TempDir()+"/anvil.db", nil)
	args := map[string]any{}
	for _, a := range []string{"zeroize", "iterations", "skip_read_only", "skip_removable", "verify_samples", "allow_discard",
		"enable_nvme_secure_erase", "enable_ata_secure_erase", "concurrency", "erase_shared_filesystems"} {
		args[a] = map[string]any{"description": "the agent's description of " + a, "required": false}
	}
	cache := map[string]any{"fingerprint": "sha256:0123456789abcdef", "agent_version": "anvil-agent 1.0", "refreshed_at": time.Now().UTC(),
		"clean": []any{
			map[string]any{"interface": "deploy", "step": "erase_devices_metadata", "priority": 99, "argsinfo": args},
			map[string]any{"interface": "deploy", "step": "erase_devices", "priority": 10, "argsinfo": args},
			map[string]any{"interface": "deploy", "step": "erase_devices_express", "priority": 0, "argsinfo": args},
			map[string]any{"interface": "raid", "step": "delete_configuration", "priority": 0},
			map[string]any{"interface": "raid", "step": "create_configuration", "priority": 0, "argsinfo": args},
		},
		"deploy": []any{map[string]any{"interface": "deploy", "step": "write_image", "priority": 80, "argsinfo": args}}}
	for i := range n {
		e.addNode(b, fmt.Sprintf("rack%03d-node%02d", i/40, i%40), "available", func(nd *store.Node) {
			nd.DriverInfo = map[string]any{"ipmi_address": fmt.Sprintf("10.1.%d.%d", i/250, i%250), "ipmi_username": "admin", "ipmi_password": "x"}
			nd.Properties = map[string]any{"cpus": 64, "memory_mb": 524288, "local_gb": 3840, "cpu_arch": "x86_64"}
			desc := fmt.Sprintf("row %d, PDU %c", i/400, 'A'+i%2)
			nd.Description = &desc
			nd.DriverInternalInfo = map[string]any{"agent_step_cache": cache, "agent_version": "anvil-agent 1.0"}
			if i%20 == 0 {
				nd.ProvisionState = "clean wait"
				nd.CleanStep = map[string]any{"interface": "deploy", "step": "erase_devices", "priority": 10}
				nd.DriverInternalInfo["clean_steps"] = []any{map[string]any{"step": "erase_devices_metadata"}, map[string]any{"step": "erase_devices"}}
				nd.DriverInternalInfo["clean_step_index"] = 1
				nd.DriverInternalInfo["agent_command_status"] = map[string]any{"state": "RUNNING", "started_at": time.Now().UTC(),
					"progress": map[string]any{"percent": 37.5, "bytes_done": 1 << 40, "bytes_total": 3 << 40, "device": "/dev/nvme0n1"}}
			}
		})
	}
	return e
}

func timedGet(b *testing.B, c *http.Client, url string, out any) time.Duration {
	start := time.Now()
	res, err := c.Get(url)
	require.NoError(b, err)
	body, err := io.ReadAll(res.Body)
	res.Body.Close()
	took := time.Since(start)
	require.NoError(b, err)
	require.Equal(b, 200, res.StatusCode, string(body))
	if out != nil {
		require.NoError(b, json.Unmarshal(body, out))
	}
	return took
}

// percentiles reports the server time per page, p50 and p99.
func percentiles(b *testing.B, times []time.Duration) {
	slices.Sort(times)
	b.ReportMetric(float64(times[len(times)/2].Microseconds())/1000, "p50-ms/page")
	b.ReportMetric(float64(times[len(times)*99/100].Microseconds())/1000, "p99-ms/page")
}

// BenchmarkFleetPage10000 renders the fleet page's server side for 10,000
// nodes (one fleet for both cases: building it takes most of the time).
//   - all-pages: the counts and one page of 50 rows, for every page in
//     turn (server-side paging with markers, sorted by name);
//   - clean-wait: the first page of the 500 nodes being cleaned, the filter
//     an operator watching a clean wave uses, refreshed 100 times as the
//     live stream does.
func BenchmarkFleetPage10000(b *testing.B) {
	const nodes, limit = 10000, 50
	e := benchFleet(b, nodes)
	c := e.srv.Client()
	b.Run("all-pages", func(b *testing.B) {
		var times []time.Duration
		for range b.N {
			marker, rows := "", 0
			for {
				var page struct {
					Nodes      []json.RawMessage `json:"nodes"`
					NextMarker string            `json:"next_marker"`
				}
				took := timedGet(b, c, e.srv.URL+"/ui/api/counts", nil)
				took += timedGet(b, c, fmt.Sprintf("%s/ui/api/fleet?limit=%d&sort_key=name&marker=%s", e.srv.URL, limit, marker), &page)
				times = append(times, took)
				rows += len(page.Nodes)
				if marker = page.NextMarker; marker == "" {
					break
				}
			}
			require.Equal(b, nodes, rows)
		}
		b.StopTimer()
		percentiles(b, times)
		b.ReportMetric(float64(len(times))/float64(b.N), "pages/op")
	})
	// search: the fleet's text search (name, description or UUID), a
	// rare match (one rack's name) and a common one (half the fleet's
	// description), first page refreshed 100 times.
	// search-name is the same with name_contains (names only), for scale.
	search := func(param string, queries ...string) func(b *testing.B) {
		return func(b *testing.B) {
			var times []time.Duration
			for range b.N {
				for i := range 100 {
					var page struct {
						Nodes []json.RawMessage `json:"nodes"`
					}
					took := timedGet(b, c, e.srv.URL+"/ui/api/counts", nil)
					took += timedGet(b, c, e.srv.URL+"/ui/api/fleet?limit=50&sort_key=name&"+param+"="+queries[i%len(queries)], &page)
					require.NotEmpty(b, page.Nodes)
					times = append(times, took)
				}
			}
			b.StopTimer()
			percentiles(b, times)
		}
	}
	b.Run("search", search("text_contains", "RACK042-", "pdu+b"))
	b.Run("search-name", search("name_contains", "RACK042-", "node07"))
	b.Run("clean-wait", func(b *testing.B) {
		var times []time.Duration
		for range b.N {
			for range 100 {
				took := timedGet(b, c, e.srv.URL+"/ui/api/counts", nil)
				took += timedGet(b, c, e.srv.URL+"/ui/api/fleet?limit=50&provision_state=clean+wait&sort_key=name", nil)
				times = append(times, took)
			}
		}
		b.StopTimer()
		percentiles(b, times)
	})
}
