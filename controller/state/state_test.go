package state

import (
	"bufio"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// loadTable reads the reference transition table kept in testdata.
func loadTable(t *testing.T) map[edge]State {
	t.Helper()
	return loadTSV(t, "transitions.tsv")
}

// loadHoldTable reads Ironic's hold transitions (1.85) kept in testdata.
func loadHoldTable(t *testing.T) map[edge]State {
	t.Helper()
	return loadTSV(t, "hold.tsv")
}

func loadTSV(t *testing.T, name string) map[edge]State {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", "testdata", "statemachine", name))
	require.NoError(t, err)
	defer f.Close()
	table := map[edge]State{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		parts := strings.Split(line, "\t")
		require.Len(t, parts, 3, "line %q", line)
		table[edge{State(parts[0]), Event(parts[1])}] = State(parts[2])
	}
	require.NoError(t, sc.Err())
	return table
}

func allEvents() []Event {
	return []Event{EvManage, EvProvide, EvClean, EvInspect, EvAdopt, EvDeploy, EvRebuild, EvDelete,
		EvAbort, EvRescue, EvUnrescue, EvDone, EvFail, EvWait, EvResume, EvHold, EvUnhold, EvService}
}

func TestEveryReferenceTransition(t *testing.T) {
	table := loadTable(t)
	require.Len(t, table, 63)
	for e, want := range table {
		got, err := Next(e.from, e.ev)
		require.NoError(t, err, "%s --%s-->", e.from, e.ev)
		assert.Equal(t, want, got, "%s --%s-->", e.from, e.ev)
	}
	assert.Len(t, transitions, len(table), "code table has transitions the reference lacks")
}

// TestHoldTransitions pins Ironic's hold-state transitions (1.85): each
// is in Ironic's later table, none changes a 21.4 pair, and none is
// counted as an anvil extension.
func TestHoldTransitions(t *testing.T) {
	ref, hold := loadTable(t), loadHoldTable(t)
	require.Len(t, hold, 8)
	assert.Equal(t, hold, holdTransitions)
	for e, want := range hold {
		_, inRef := ref[e]
		assert.False(t, inRef, "%s --%s--> is in the 21.4 table", e.from, e.ev)
		assert.False(t, Extension(e.from, e.ev))
		got, err := Next(e.from, e.ev)
		require.NoError(t, err)
		assert.Equal(t, want, got, "%s --%s-->", e.from, e.ev)
	}
	tests := []struct {
		from State
		ev   Event
	}{
		{CleanHold, EvResume}, {CleanHold, EvFail}, {CleanHold, EvDelete}, {DeployHold, EvResume},
		{DeployHold, EvDelete}, {CleanWait, EvUnhold}, {DeployWait, EvUnhold}, {InspectWait, EvHold},
		{RescueWait, EvHold}, {Active, EvUnhold}, {CleanHold, EvHold},
	}
	for _, tc := range tests {
		assert.False(t, Allowed(tc.from, tc.ev), "%s --%s--> must be refused", tc.from, tc.ev)
	}
	assert.Equal(t, Available, DefaultTarget(CleanHold))
	assert.Equal(t, Active, DefaultTarget(DeployHold))
	for _, s := range []State{CleanHold, DeployHold} {
		assert.True(t, Held(s))
		assert.False(t, Working(s), "no work runs and no lock is held in %s", s)
		assert.False(t, Waiting(s), "no wait-state timeout applies in %s", s)
		assert.False(t, LookupAllowed(s), "Ironic refuses lookups in %s", s)
		assert.False(t, UpdateAllowed(s))
	}
}

func TestEveryOtherPairIsRefused(t *testing.T) {
	table := loadTable(t)
	for _, name := range []string{"hold.tsv", "service.tsv", "later.tsv"} {
		for e, to := range loadTSV(t, name) {
			table[e] = to
		}
	}
	refused := 0
	for _, s := range All() {
		for _, ev := range allEvents() {
			if _, ok := table[edge{s, ev}]; ok {
				continue
			}
			if Extension(s, ev) {
				continue // TestExtensions
			}
			_, err := Next(s, ev)
			var na *ErrNotAllowed
			require.ErrorAs(t, err, &na, "%s --%s--> must be refused", s, ev)
			assert.False(t, Allowed(s, ev))
			refused++
		}
	}
	assert.Equal(t, 30*18-63-8-20-1-len(extensions), refused)
}

// TestServiceTransitions pins Ironic's servicing transitions (1.87) and
// the abort in wait call-back of 1.110: each is in Ironic's later table,
// none changes an earlier pair, and none is an anvil extension.
func TestServiceTransitions(t *testing.T) {
	ref, hold := loadTable(t), loadHoldTable(t)
	svc, later := loadTSV(t, "service.tsv"), loadTSV(t, "later.tsv")
	require.Len(t, svc, 20)
	require.Len(t, later, 1)
	assert.Equal(t, svc, serviceTransitions)
	assert.Equal(t, later, laterTransitions)
	for _, tbl := range []map[edge]State{svc, later} {
		for e, want := range tbl {
			_, inRef := ref[e]
			_, inHold := hold[e]
			assert.False(t, inRef || inHold, "%s --%s--> is in an earlier table", e.from, e.ev)
			assert.False(t, Extension(e.from, e.ev))
			got, err := Next(e.from, e.ev)
			require.NoError(t, err)
			assert.Equal(t, want, got, "%s --%s-->", e.from, e.ev)
		}
	}
	for _, s := range []State{Servicing, ServiceWait, ServiceFailed, ServiceHold} {
		assert.Equal(t, Active, DefaultTarget(s), s)
	}
	assert.True(t, Working(Servicing))
	assert.True(t, Waiting(ServiceWait))
	assert.True(t, Failed(ServiceFailed))
	assert.True(t, Held(ServiceHold))
	assert.True(t, UpdateAllowed(ServiceFailed) && UpdateAllowed(ServiceHold), "Ironic's UPDATE_ALLOWED_STATES")
	assert.True(t, LookupAllowed(ServiceWait))
	assert.False(t, Allowed(Active, EvClean))
	assert.False(t, Allowed(ServiceWait, EvService), "a running service is not restarted")
	assert.False(t, Allowed(Servicing, EvAbort), "abort only while waiting, held or failed")
}

// TestExtensions: anvil has no transition of its own since Ironic 1.110
// made abort in wait call-back its own.
func TestExtensions(t *testing.T) {
	assert.Empty(t, extensions)
	assert.False(t, Extension(DeployWait, EvAbort))
	assert.False(t, Extension(CleanWait, EvAbort), "clean wait abort is Ironic's own")
}

func TestStatesAndClasses(t *testing.T) {
	require.Len(t, All(), 30)
	for _, s := range All() {
		assert.True(t, Valid(s))
		classes := 0
		for _, c := range []bool{Stable(s), Waiting(s), Failed(s), Working(s), Held(s)} {
			if c {
				classes++
			}
		}
		assert.Equal(t, 1, classes, "%q must be in exactly one class", s)
		if Stable(s) {
			assert.Equal(t, NoState, DefaultTarget(s), s)
		} else {
			assert.NotEqual(t, NoState, DefaultTarget(s), s)
		}
	}
	assert.False(t, Valid("bogus"))
}

func TestVerbs(t *testing.T) {
	tests := map[string]struct {
		ev  Event
		min int
	}{
		"manage": {EvManage, 4}, "provide": {EvProvide, 4}, "inspect": {EvInspect, 6},
		"abort": {EvAbort, 13}, "clean": {EvClean, 15}, "adopt": {EvAdopt, 17},
		"rescue": {EvRescue, 38}, "unrescue": {EvUnrescue, 38}, "active": {EvDeploy, 1},
		"deploy": {EvDeploy, 73}, "rebuild": {EvRebuild, 1}, "deleted": {EvDelete, 1}, "undeploy": {EvDelete, 73},
		"unhold": {EvUnhold, 85}, "service": {EvService, 87},
	}
	assert.Len(t, Verbs(), len(tests))
	for name, tc := range tests {
		v, ok := LookupVerb(name)
		require.True(t, ok, name)
		assert.Equal(t, tc.ev, v.Event, name)
		assert.Equal(t, tc.min, v.MinVersion, name)
	}
	_, ok := LookupVerb("bogus")
	assert.False(t, ok)
}
