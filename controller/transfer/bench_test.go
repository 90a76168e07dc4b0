package transfer

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/postgres"
	"github.com/anvil-metal/anvil/controller/store/postgres/pgserver"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
)

// benchFleet sizes the benchmark fleet: ANVIL_TRANSFER_NODES nodes
// (default 10,000), each with two ports, eventsPerNode history entries and
// an inventory.
const eventsPerNode = 20

func benchNodes(b *testing.B) int {
	n := 10000
	if v := os.Getenv("ANVIL_TRANSFER_NODES"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(b, err)
	}
	return n
}

// writeBenchDoc writes a document of a fleet of n nodes to a file, through
// the exporter's own writer, and returns its path.
func writeBenchDoc(b *testing.B, n int) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "fleet.json")
	f, err := os.Create(path)
	require.NoError(b, err)
	defer f.Close()
	d := newDocWriter(f)
	d.header(time.Now().UTC())
	node := func(i int) *store.Node {
		return &store.Node{UUID: fleetUUID(kindNode, i), Name: strp(fmt.Sprintf("node-%05d", i)), Driver: "ipmi", ProvisionState: "available",
			PowerState: strp("power off"), CreatedAt: at(i), UpdatedAt: atp(i + 1), ProvisionUpdatedAt: atp(i + 1),
			DriverInfo: map[string]any{"ipmi_address": fmt.Sprintf("10.1.%d.%d", i/250, i%250), "ipmi_username": "admin", "ipmi_password": "secret"},
			Properties: map[string]any{"cpus": 64, "memory_mb": 524288, "local_gb": 960, "cpu_arch": "x86_64"},
			DriverInternalInfo: map[string]any{"agent_url": "http://10.2.0.1:9999", "agent_version": "1.0",
				"clean_steps": []any{map[string]any{"interface": "deploy", "step": "erase_devices", "priority": 10}}},
			ResourceClass: strp("baremetal"), Traits: []string{"CUSTOM_A", "CUSTOM_B"},
			Interfaces: store.Interfaces{Boot: "ipxe", Deploy: "direct", Management: "ipmitool", Power: "ipmitool"}}
	}
	d.open("nodes", '[')
	for i := 0; i < n; i++ {
		require.NoError(b, d.item(node(i)))
	}
	d.close(']')
	d.open("portgroups", '[')
	d.close(']')
	d.open("ports", '[')
	for i := 0; i < 2*n; i++ {
		require.NoError(b, d.item(&store.Port{UUID: fleetUUID(kindPort, i), Address: fmt.Sprintf("52:54:%02x:%02x:%02x:%02x", i>>24&255, i>>16&255, i>>8&255, i&255),
			NodeUUID: fleetUUID(kindNode, i/2), PXEEnabled: i%2 == 0, LocalLinkConnection: map[string]any{}, Extra: map[string]any{}, CreatedAt: at(i)}))
	}
	d.close(']')
	d.open("allocations", '[')
	d.close(']')
	d.open("history", '[')
	for i := 0; i < n; i++ {
		for j := 0; j < eventsPerNode; j++ {
			require.NoError(b, d.item(&store.Event{UUID: fleetUUID(kindEvent, i*eventsPerNode+j), NodeUUID: fleetUUID(kindNode, i), CreatedAt: at(i + j),
				Severity: "INFO", EventType: "cleaning", Event: fmt.Sprintf("clean step deploy.erase_devices finished on /dev/nvme%dn1", j), Conductor: "ctl-1"}))
		}
	}
	d.close(']')
	d.open("inventories", '{')
	inv := []byte(`{"cpu":{"model_name":"AMD EPYC 7763","count":64,"architecture":"x86_64"},"memory":{"physical_mb":524288},"disks":[` +
		strings.Repeat(`{"name":"/dev/nvme0n1","model":"SAMSUNG MZQL23T8HCLS","size":3840755982336,"rotational":false,"serial":"S64HNE0R000000"},`, 7) +
		`{"name":"/dev/sda","size":480103981056}]}`)
	for i := 0; i < n; i++ {
		require.NoError(b, d.keyed(fleetUUID(kindNode, i), inv))
	}
	d.close('}')
	require.NoError(b, d.finish())
	return path
}

// peakHeap samples the heap in use until stop is called, and returns the
// peak in MB.
func peakHeap() (stop func() float64) {
	runtime.GC()
	var peak uint64
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		var m runtime.MemStats
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			runtime.ReadMemStats(&m)
			peak = max(peak, m.HeapInuse)
			select {
			case <-done:
				return
			case <-t.C:
			}
		}
	}()
	return func() float64 {
		close(done)
		wg.Wait()
		return float64(peak) / (1 << 20)
	}
}

// BenchmarkTransfer imports a 10,000-node fleet into an empty store and
// exports it again, on SQLite and on PostgreSQL, reporting the peak heap
// of each (the document is ~100 MB: the stream must not hold it).
// Run with -benchtime=1x.
func BenchmarkTransfer(b *testing.B) {
	n := benchNodes(b)
	doc := writeBenchDoc(b, n)
	fi, err := os.Stat(doc)
	require.NoError(b, err)
	b.Logf("document: %d nodes, %.1f MB", n, float64(fi.Size())/(1<<20))
	stores := map[string]func(b *testing.B) store.Store{
		"sqlite": func(b *testing.B) store.Store {
			st, err := sqlite.Open(context.Background(), filepath.Join(b.TempDir(), "anvil.db"))
			require.NoError(b, err)
			return st
		},
		"postgres": func(b *testing.B) store.Store {
			srv := pgserver.ForTest(b)
			st, err := postgres.Open(context.Background(), srv.NewDatabase(b))
			require.NoError(b, err)
			return st
		},
	}
	for _, name := range []string{"sqlite", "postgres"} {
		b.Run(name+"/import", func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				st := stores[name](b)
				f, err := os.Open(doc)
				require.NoError(b, err)
				stop := peakHeap()
				b.StartTimer()
				sum, err := Import(context.Background(), st, f, ImportOptions{})
				b.StopTimer()
				b.ReportMetric(stop(), "peak-heap-MB")
				require.NoError(b, err)
				require.Equal(b, n, sum.Nodes)
				f.Close()

				stop = peakHeap()
				start := time.Now()
				_, err = Export(context.Background(), st, io.Discard, ExportOptions{})
				b.ReportMetric(time.Since(start).Seconds(), "export-s")
				b.ReportMetric(stop(), "export-peak-heap-MB")
				require.NoError(b, err)
				st.Close()
			}
		})
	}
}
