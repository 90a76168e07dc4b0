package storetest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

func stageNames(b store.Boot) []string {
	out := make([]string, len(b.Stages))
	for i, s := range b.Stages {
		out[i] = s.Stage + ":" + s.Detail
	}
	return out
}

// testBootTimelines: stages go into the node's current boot, a boot stage
// opens the next, boots come newest first with their stages in order, the
// agent's boot id names its boot, a boot keeps its first and latest
// stages within the bound, a node keeps its newest boots, an unknown node
// is refused, and the timeline goes with its node.
func testBootTimelines(t *testing.T, s store.Store) {
	ctx := context.Background()
	a, b := NewNode("a"), NewNode("b")
	require.NoError(t, s.CreateNode(ctx, a))
	require.NoError(t, s.CreateNode(ctx, b))
	t0 := time.Date(2026, 11, 29, 12, 1, 3, 0, time.UTC)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Second) }
	add := func(node string, stages []store.BootStage) error {
		return s.AddBootStages(ctx, []store.NodeBootStages{{NodeUUID: node, Stages: stages}})
	}

	empty, err := s.ListBoots(ctx, a.UUID, 0)
	require.NoError(t, err)
	assert.Empty(t, empty)

	// a stage before any boot of the controller's opens boot 1
	require.NoError(t, add(a.UUID, []store.BootStage{{At: at(0), Stage: store.StageDHCP, Detail: "early"}}))
	require.NoError(t, add(a.UUID, []store.BootStage{
		{At: at(1), Stage: store.StageBoot, Detail: "cleaning"},
		{At: at(2), Stage: store.StageDHCP, Detail: "offer snponly.efi", Outcome: store.OutcomeOK},
	}))
	require.NoError(t, add(a.UUID, []store.BootStage{
		{At: at(3), Stage: store.StageTFTP, Detail: "snponly.efi", Outcome: store.OutcomeNotFound},
		{At: at(4), Stage: store.StageLookup, BootID: "boot-42", Outcome: store.OutcomeOK},
	}))
	require.NoError(t, add(b.UUID, []store.BootStage{{At: at(5), Stage: store.StageBoot, Detail: "b"}}))

	boots, err := s.ListBoots(ctx, a.UUID, 0)
	require.NoError(t, err)
	require.Len(t, boots, 2)
	assert.Equal(t, int64(2), boots[0].Number)
	assert.Equal(t, "boot-42", boots[0].BootID)
	assert.Equal(t, []string{"boot:cleaning", "dhcp:offer snponly.efi", "tftp:snponly.efi", "lookup:"}, stageNames(boots[0]))
	assert.Equal(t, store.OutcomeNotFound, boots[0].Stages[2].Outcome)
	assert.True(t, boots[0].Stages[2].At.Equal(at(3)), boots[0].Stages[2].At)
	assert.Equal(t, []string{"dhcp:early"}, stageNames(boots[1]))
	assert.Empty(t, boots[1].BootID)

	latest, err := s.ListBoots(ctx, a.UUID, 1)
	require.NoError(t, err)
	require.Len(t, latest, 1)
	assert.Equal(t, int64(2), latest[0].Number)

	// a boot full of retries keeps its first stage and its latest ones
	var many []store.BootStage
	for i := range store.MaxStagesPerBoot + 10 {
		many = append(many, store.BootStage{At: at(10 + i), Stage: store.StageDHCP, Detail: fmt.Sprint(i)})
	}
	require.NoError(t, add(a.UUID, many))
	boots, err = s.ListBoots(ctx, a.UUID, 1)
	require.NoError(t, err)
	require.Len(t, boots[0].Stages, store.MaxStagesPerBoot)
	names := stageNames(boots[0])
	assert.Equal(t, "boot:cleaning", names[0])
	assert.Equal(t, fmt.Sprintf("dhcp:%d", store.MaxStagesPerBoot+9), names[len(names)-1])

	// the node keeps its newest boots; details are bounded
	for i := range store.MaxBootsPerNode + 3 {
		require.NoError(t, add(a.UUID, []store.BootStage{{At: at(100 + i), Stage: store.StageBoot, Detail: fmt.Sprint("boot ", i)},
			{At: at(100 + i), Stage: store.StageHTTP, Detail: strings.Repeat("x", 2*store.MaxStageDetail)}}))
	}
	boots, err = s.ListBoots(ctx, a.UUID, 0)
	require.NoError(t, err)
	require.Len(t, boots, store.MaxBootsPerNode)
	assert.Equal(t, int64(2+store.MaxBootsPerNode+3), boots[0].Number)
	assert.Equal(t, fmt.Sprint("boot:boot ", store.MaxBootsPerNode+2), stageNames(boots[0])[0])
	assert.LessOrEqual(t, len(boots[0].Stages[1].Detail), store.MaxStageDetail+len("…"))

	other, err := s.ListBoots(ctx, b.UUID, 0)
	require.NoError(t, err)
	require.Len(t, other, 1)
	assert.Equal(t, []string{"boot:b"}, stageNames(other[0]))

	// one batch for several nodes; with an unknown node in it, nothing
	err = add("no-such-node", []store.BootStage{{At: t0, Stage: store.StageDHCP}})
	assert.ErrorIs(t, err, store.ErrNotFound)
	err = s.AddBootStages(ctx, []store.NodeBootStages{{NodeUUID: b.UUID, Stages: []store.BootStage{{At: t0, Stage: store.StageBoot, Detail: "lost"}}},
		{NodeUUID: "no-such-node", Stages: []store.BootStage{{At: t0, Stage: store.StageDHCP}}}})
	assert.ErrorIs(t, err, store.ErrNotFound)
	require.NoError(t, s.AddBootStages(ctx, []store.NodeBootStages{
		{NodeUUID: b.UUID, Stages: []store.BootStage{{At: t0, Stage: store.StageBoot, Detail: "b2"}}},
		{NodeUUID: a.UUID, Stages: []store.BootStage{{At: t0, Stage: store.StageDHCP, Detail: "together"}}},
		{NodeUUID: b.UUID, Stages: []store.BootStage{{At: t0, Stage: store.StageLookup, Detail: "b2 lookup"}}},
	}))
	other, err = s.ListBoots(ctx, b.UUID, 0)
	require.NoError(t, err)
	require.Len(t, other, 2, "the failed batch wrote nothing")
	assert.Equal(t, []string{"boot:b2", "lookup:b2 lookup"}, stageNames(other[0]))
	boots, err = s.ListBoots(ctx, a.UUID, 1)
	require.NoError(t, err)
	assert.Equal(t, "dhcp:together", stageNames(boots[0])[len(boots[0].Stages)-1])

	require.NoError(t, s.DeleteNode(ctx, a))
	gone, err := s.ListBoots(ctx, a.UUID, 0)
	require.NoError(t, err)
	assert.Empty(t, gone)
}

// testBootTimelineFlood: a stranger's stages (refused lookups and boot
// scripts, failed downloads, alternating so no fold catches them) keep to
// their own small share of a boot and never push out its chain; the
// chain's own stages, once the boot is full, evict the stranger's first.
func testBootTimelineFlood(t *testing.T, s store.Store) {
	ctx := context.Background()
	n := NewNode("flooded")
	require.NoError(t, s.CreateNode(ctx, n))
	t0 := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	at := func(i int) time.Time { return t0.Add(time.Duration(i) * time.Millisecond) }
	chain := []store.BootStage{
		{At: at(0), Stage: store.StageBoot, Detail: "into the agent ramdisk for cleaning"},
		{At: at(1), Stage: store.StageBootDevice, Detail: "pxe", Outcome: store.OutcomeOK},
		{At: at(2), Stage: store.StagePower, Detail: "reboot", Outcome: store.OutcomeOK},
		{At: at(3), Stage: store.StageDHCP, Detail: "offered snponly.efi", Outcome: store.OutcomeOK},
	}
	var flood []store.BootStage
	for i := range 300 {
		st := store.BootStage{At: at(10 + i), Stage: store.StageLookup, Detail: fmt.Sprintf("from 10.0.0.%d", i), Outcome: "refused: no agent expected"}
		switch i % 3 {
		case 1:
			st = store.BootStage{At: at(10 + i), Stage: store.StageBootScript, Detail: "iPXE script to 10.0.0.9", Outcome: store.OutcomeFailed + ": no"}
		case 2:
			st = store.BootStage{At: at(10 + i), Stage: store.StageHTTP, Detail: fmt.Sprint("x", i), Outcome: store.OutcomeNotFound}
		}
		flood = append(flood, st)
		if i == 150 { // the real chain goes on meanwhile
			flood = append(flood, store.BootStage{At: at(10 + i), Stage: store.StageTFTP, Detail: "snponly.efi", Outcome: store.OutcomeOK})
		}
	}
	require.NoError(t, s.AddBootStages(ctx, []store.NodeBootStages{{NodeUUID: n.UUID, Stages: chain}}))
	for i := 0; i < len(flood); i += 50 { // in batches, as the recorder writes
		require.NoError(t, s.AddBootStages(ctx, []store.NodeBootStages{{NodeUUID: n.UUID, Stages: flood[i:min(i+50, len(flood))]}}))
	}
	boots, err := s.ListBoots(ctx, n.UUID, 1)
	require.NoError(t, err)
	require.Len(t, boots, 1)
	var real []string
	unauth := 0
	for _, st := range boots[0].Stages {
		if st.Unauthenticated() {
			unauth++
		} else {
			real = append(real, st.Stage)
		}
	}
	assert.Equal(t, store.MaxUnauthenticatedPerBoot, unauth)
	assert.Equal(t, []string{store.StageBoot, store.StageBootDevice, store.StagePower, store.StageDHCP, store.StageTFTP}, real,
		"the chain is whole")
	last := boots[0].Stages[len(boots[0].Stages)-1]
	assert.True(t, last.At.Equal(at(309)), "the stranger's latest are the ones kept: %v", last.At)

	// the chain's own stages fill the boot: the stranger's go first, then
	// the oldest but the first
	var more []store.BootStage
	for i := range store.MaxStagesPerBoot {
		more = append(more, store.BootStage{At: at(1000 + i), Stage: store.StageDHCP, Detail: fmt.Sprint("retry ", i), Outcome: store.OutcomeOK})
	}
	require.NoError(t, s.AddBootStages(ctx, []store.NodeBootStages{{NodeUUID: n.UUID, Stages: more}}))
	boots, err = s.ListBoots(ctx, n.UUID, 1)
	require.NoError(t, err)
	require.Len(t, boots[0].Stages, store.MaxStagesPerBoot)
	for _, st := range boots[0].Stages {
		assert.False(t, st.Unauthenticated(), "evicted before any chain stage: %+v", st)
	}
	assert.Equal(t, store.StageBoot, boots[0].Stages[0].Stage)
	assert.Equal(t, "retry 63", boots[0].Stages[store.MaxStagesPerBoot-1].Detail)
}
