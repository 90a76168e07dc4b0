package timeline

import (
	"context"
	"fmt"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/limits"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/controller/store/storetest"
)

// clock is a settable clock for the recorder's folding and rates.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newStore(t *testing.T) *sqlite.Store {
	st, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "anvil.db"))
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

func run(t *testing.T, r *Recorder) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { r.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
}

func flush(t *testing.T, r *Recorder) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	require.NoError(t, r.Flush(ctx))
}

func TestRecorderWritesFoldsAndBounds(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	n := storetest.NewNode("n")
	require.NoError(t, st.CreateNode(ctx, n))
	c := &clock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	r := New(Config{Store: st, Now: c.now, PerNode: limits.Rate{PerSecond: 1, Burst: 6}})
	run(t, r)

	r.Record(n.UUID, store.StageBoot, "cleaning", "")
	for range 5 { // a firmware retrying DHCP: one stage
		r.Record(n.UUID, store.StageDHCP, "offered snponly.efi to 52:54:00:00:00:01", store.OutcomeOK)
	}
	c.t = c.t.Add(2 * time.Second)
	r.Record(n.UUID, store.StageTFTP, "snponly.efi to 10.0.0.5", store.OutcomeNotFound)
	r.Record("", store.StageDHCP, "a stranger", "") // no node: nowhere
	flush(t, r)

	boots, err := st.ListBoots(ctx, n.UUID, 0)
	require.NoError(t, err)
	require.Len(t, boots, 1)
	require.Len(t, boots[0].Stages, 3)
	assert.Equal(t, []string{store.StageBoot, store.StageDHCP, store.StageTFTP},
		[]string{boots[0].Stages[0].Stage, boots[0].Stages[1].Stage, boots[0].Stages[2].Stage})
	assert.True(t, boots[0].Stages[2].At.Equal(c.t))

	// the same stage after the fold window is recorded again
	c.t = c.t.Add(foldWindow + time.Second)
	r.Record(n.UUID, store.StageTFTP, "snponly.efi to 10.0.0.5", store.OutcomeNotFound)
	// a node flooding its timeline is cut at its rate, per kind of stage:
	// 6 of these 50 downloads get in (and the TFTP stage, its own kind)
	for i := range 50 {
		r.Record(n.UUID, store.StageHTTP, string(rune('a'+i%26))+" file", store.OutcomeOK)
	}
	flush(t, r)
	boots, err = st.ListBoots(ctx, n.UUID, 0)
	require.NoError(t, err)
	assert.Len(t, boots[0].Stages, 4+6, "a node's stages are bounded by its rate")

	// a deleted node's stages are dropped quietly; another node's in the
	// same write are kept
	m := storetest.NewNode("m")
	require.NoError(t, st.CreateNode(ctx, m))
	require.NoError(t, st.DeleteNode(ctx, n))
	r.Record(n.UUID, store.StageBoot, "gone", "")
	r.Record(m.UUID, store.StageBoot, "kept", "")
	flush(t, r)
	assert.Zero(t, r.Dropped())
	kept, err := st.ListBoots(ctx, m.UUID, 0)
	require.NoError(t, err)
	require.Len(t, kept, 1)
	assert.Equal(t, "kept", kept[0].Stages[0].Detail)
}

// TestRecorderFlood: a stranger alternating refused lookups, refused boot
// scripts and downloads of the node's kernel (so no single-stage fold
// catches them) for 50 seconds, at 20 requests a second: the downloads fold,
// the refused requests keep to their small rate, the boot's chain stays
// whole and is what Explain quotes.
func TestRecorderFlood(t *testing.T) {
	ctx := context.Background()
	st := newStore(t)
	n := storetest.NewNode("n")
	require.NoError(t, st.CreateNode(ctx, n))
	c := &clock{t: time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)}
	r := New(Config{Store: st, Now: c.now})
	run(t, r)

	r.Record(n.UUID, store.StageBoot, "cleaning", "")
	r.Record(n.UUID, store.StagePower, "reboot", store.OutcomeOK)
	r.Record(n.UUID, store.StageDHCP, "offered snponly.efi to 52:54:00:00:00:01", store.OutcomeOK)
	r.Record(n.UUID, store.StageTFTP, "snponly.efi to 10.0.0.5 (1000 bytes, 1s)", store.OutcomeOK)
	for i := range 1000 {
		c.t = c.t.Add(50 * time.Millisecond)
		switch i % 3 {
		case 0:
			r.Record(n.UUID, store.StageLookup, fmt.Sprintf("from 10.6.%d.%d", i/250, i%250), "refused: no agent expected")
		case 1:
			r.Record(n.UUID, store.StageBootScript, "iPXE script to 10.6.6.6", store.OutcomeFailed+": not now")
		case 2:
			r.Record(n.UUID, store.StageHTTP, fmt.Sprintf("vmlinuz to 10.0.0.5 (%d bytes, %dms)", 1000, i), store.OutcomeOK)
		}
	}
	flush(t, r)
	boots, err := st.ListBoots(ctx, n.UUID, 1)
	require.NoError(t, err)
	require.Len(t, boots, 1)
	var chain []string
	unauth := 0
	for _, s := range boots[0].Stages {
		if s.Unauthenticated() {
			unauth++
			continue
		}
		chain = append(chain, s.Stage)
	}
	assert.Equal(t, []string{store.StageBoot, store.StagePower, store.StageDHCP, store.StageTFTP, store.StageHTTP}, chain,
		"the chain is whole; the repeated kernel download is one stage")
	assert.Equal(t, store.MaxUnauthenticatedPerBoot, unauth, "a flood of 666 refused requests")
	assert.Contains(t, Explain(boots[0]), "the kernel was downloaded at 12:00:00 UTC")
}

func TestRecorderQueueFullDrops(t *testing.T) {
	r := New(Config{Store: newStore(t), Queue: 2, PerNode: limits.Rate{PerSecond: 100, Burst: 100}})
	for i := range 5 { // Run not started: the queue fills
		r.Record("node", store.StageHTTP, string(rune('a'+i)), "")
	}
	assert.Equal(t, int64(3), r.Dropped())
	var nilRec *Recorder // components without a timeline hold nil
	nilRec.Record("node", store.StageBoot, "", "")
	nilRec.Learn(netip.MustParseAddr("10.0.0.1"), "node")
	assert.Empty(t, nilRec.NodeAt(netip.MustParseAddr("10.0.0.1")))
}

func TestAddressBook(t *testing.T) {
	c := &clock{t: time.Unix(1000, 0)}
	r := New(Config{Store: newStore(t), Now: c.now})
	a := netip.MustParseAddr("10.0.0.5")
	assert.Empty(t, r.NodeAt(a))
	r.Learn(a, "n1")
	assert.Equal(t, "n1", r.NodeAt(netip.MustParseAddr("::ffff:10.0.0.5")), "an IPv4-mapped address is the same host")
	r.Learn(a, "n2") // the address moved to another node
	assert.Equal(t, "n2", r.NodeAt(a))
	c.t = c.t.Add(addrTTL + time.Second)
	assert.Empty(t, r.NodeAt(a), "an address learnt long ago is not trusted")
}

func TestExplain(t *testing.T) {
	at := time.Date(2026, 11, 29, 12, 1, 3, 0, time.UTC)
	stage := func(name, detail, outcome string) store.BootStage {
		return store.BootStage{At: at, Stage: name, Detail: detail, Outcome: outcome}
	}
	boot := func(s ...store.BootStage) store.Boot {
		return store.Boot{Stages: append([]store.BootStage{stage(store.StageBoot, "cleaning", "")}, s...)}
	}
	for _, tc := range []struct {
		name string
		boot store.Boot
		want string
	}{
		{"nothing", store.Boot{}, ""},
		{"never powered", boot(), "the controller started the boot (cleaning) at 12:01:03 UTC; nothing of it was seen after that"},
		{"powered, no DHCP", boot(stage(store.StagePower, "reboot", store.OutcomeOK)),
			"the BMC powered the node (reboot) at 12:01:03 UTC; no DHCP request from its ports was answered"},
		{"offered, never fetched", boot(stage(store.StageDHCP, "offered snponly.efi to 52:54:00:12:34:56 (UEFI PXE)", store.OutcomeOK)),
			"DHCP offered snponly.efi to 52:54:00:12:34:56 (UEFI PXE) at 12:01:03 UTC; the file was never fetched"},
		{"tftp missing", boot(stage(store.StageDHCP, "offered snponly.efi to 52:54:00:12:34:56", store.OutcomeOK),
			stage(store.StageTFTP, "snponly.efi to 10.0.0.5", store.OutcomeNotFound), stage(store.StageTimeout, "x", "")),
			"TFTP of snponly.efi to 10.0.0.5 failed at 12:01:03 UTC: file not found (missing from the controller's --boot-dir?)"},
		{"firmware retrying after a failed download", boot(stage(store.StageDHCP, "offered snponly.efi to 52:54:00:12:34:56", store.OutcomeOK),
			stage(store.StageTFTP, "snponly.efi to 10.0.0.5", store.OutcomeNotFound),
			stage(store.StageDHCP, "offered snponly.efi to 52:54:00:12:34:56", store.OutcomeOK)),
			"TFTP of snponly.efi to 10.0.0.5 failed at 12:01:03 UTC: file not found (missing from the controller's --boot-dir?); DHCP offered it again at 12:01:03 UTC"},
		{"ipxe sent", boot(stage(store.StageTFTP, "snponly.efi to 10.0.0.5 (1000 bytes, 1s)", store.OutcomeOK)),
			"TFTP sent snponly.efi to 10.0.0.5 (1000 bytes, 1s) at 12:01:03 UTC; the iPXE script was never fetched"},
		{"script", boot(stage(store.StageBootScript, "iPXE", store.OutcomeOK)), "the kernel was never fetched"},
		{"kernel", boot(stage(store.StageHTTP, "vmlinuz (10 bytes, 1s)", store.OutcomeOK)),
			"the kernel was downloaded at 12:01:03 UTC (vmlinuz (10 bytes, 1s)); the ramdisk was never fetched"},
		{"ramdisk", boot(stage(store.StageHTTP, "initramfs.cpio.zst (10 bytes, 1s)", store.OutcomeOK)), "the agent never looked up"},
		{"http missing", boot(stage(store.StageHTTP, "vmlinuz", store.OutcomeNotFound)), "the download of vmlinuz failed at 12:01:03 UTC: file not found"},
		{"lookup", boot(stage(store.StageLookup, "boot b1 from 10.0.0.5", store.OutcomeOK)), "the agent looked up at 12:01:03 UTC; it never heartbeated"},
		{"bmc failed", boot(stage(store.StagePower, "reboot", "failed: no route")), "the BMC's power action (reboot) failed at 12:01:03 UTC: failed: no route"},
		{"a stranger's refused lookups after the chain", boot(stage(store.StageTFTP, "snponly.efi to 10.0.0.5 (1000 bytes, 1s)", store.OutcomeOK),
			stage(store.StageLookup, "from 10.6.6.6", "refused: no agent expected"), stage(store.StageBootScript, "iPXE to 10.6.6.6", "failed: no"),
			stage(store.StageLookup, "from 10.6.6.7", "refused: no agent expected")),
			"TFTP sent snponly.efi to 10.0.0.5 (1000 bytes, 1s) at 12:01:03 UTC; the iPXE script was never fetched"},
		{"the kernel missing, then a stranger", boot(stage(store.StageBootScript, "iPXE", store.OutcomeOK),
			stage(store.StageHTTP, "vmlinuz", store.OutcomeNotFound), stage(store.StageLookup, "from 10.6.6.6", "refused: no agent expected")),
			"the download of vmlinuz failed at 12:01:03 UTC: file not found"},
		{"only a stranger's stages", store.Boot{Stages: []store.BootStage{stage(store.StageLookup, "from 10.6.6.6", "refused: no agent expected")}},
			"the agent's lookup was refused at 12:01:03 UTC (refused: no agent expected)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := Explain(tc.boot)
			if tc.want == "" {
				assert.Empty(t, got)
				return
			}
			assert.Contains(t, got, tc.want)
		})
	}
}

// discard is a Store that keeps nothing: the benchmark measures the
// caller's side (what a first heartbeat or a DHCP answer pays).
type discard struct{}

func (discard) AddBootStages(context.Context, []store.NodeBootStages) error { return nil }

// BenchmarkRecordStage: the cost of recording a stage on the path that
// records it (fold check, rate, queue), over 1000 nodes.
func BenchmarkRecordStage(b *testing.B) {
	r := New(Config{Store: discard{}, PerNode: limits.Rate{PerSecond: 1e9, Burst: 1e9}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	nodes := make([]string, 1000)
	for i := range nodes {
		nodes[i] = fmt.Sprintf("node-%04d", i)
	}
	for i := 0; b.Loop(); i++ {
		r.Record(nodes[i%len(nodes)], store.StageHeartbeat, fmt.Sprint("agent from 10.0.0.", i%250), store.OutcomeOK)
	}
	b.StopTimer()
	b.ReportMetric(float64(r.Dropped()), "dropped")
}
