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
	f, err := os.Open(filepath.Join("..", "..", "testdata", "statemachine", "transitions.tsv"))
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
		EvAbort, EvRescue, EvUnrescue, EvDone, EvFail, EvWait, EvResume}
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

func TestEveryOtherPairIsRefused(t *testing.T) {
	table := loadTable(t)
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
	assert.Equal(t, 24*15-63-len(extensions), refused)
}

// TestExtensions pins anvil's transitions beyond Ironic's: each is new
// (not a reference pair, so it cannot change Ironic's behaviour), allowed,
// and leads where docs/reference/api.md says.
func TestExtensions(t *testing.T) {
	table := loadTable(t)
	want := map[edge]State{{DeployWait, EvAbort}: DeployFailed}
	assert.Equal(t, want, extensions)
	for e, to := range want {
		_, inRef := table[e]
		assert.False(t, inRef, "%s --%s--> is Ironic's, not an extension", e.from, e.ev)
		assert.True(t, Extension(e.from, e.ev))
		assert.True(t, Allowed(e.from, e.ev))
		got, err := Next(e.from, e.ev)
		require.NoError(t, err)
		assert.Equal(t, to, got)
	}
	assert.False(t, Extension(CleanWait, EvAbort), "clean wait abort is Ironic's own")
}

func TestStatesAndClasses(t *testing.T) {
	require.Len(t, All(), 24)
	for _, s := range All() {
		assert.True(t, Valid(s))
		classes := 0
		for _, c := range []bool{Stable(s), Waiting(s), Failed(s), Working(s)} {
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
