package api

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

// slowDeletes widens the window between a DELETE's checks and its write, as
// a loaded controller does: in-process the race is otherwise too quick to
// lose.
type slowDeletes struct{ store.Store }

func (s slowDeletes) DeleteNode(ctx context.Context, n *store.Node) error {
	time.Sleep(2 * time.Millisecond)
	return s.Store.DeleteNode(ctx, n)
}

// TestDeleteRacesProvisionVerbs fires a provision verb and a DELETE many
// times at once at one node, 50 trials per verb: exactly one side wins
// every time. Before the delete was conditional on the revision its checks
// saw, both sides won in about one trial in four.
func TestDeleteRacesProvisionVerbs(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Store = slowDeletes{c.Store} })
	const trials, each = 50, 25
	cases := []struct {
		verb   string
		from   string // the node rests here when the race starts
		create map[string]any
		after  string // where a winning verb leaves the node
	}{
		// direct: cleaning and deploying wait for an agent that never comes,
		// so a winning verb leaves the node in a state Ironic refuses to delete
		{"provide", "manageable", map[string]any{"deploy_interface": "direct"}, "clean wait"},
		{"active", "available", map[string]any{"deploy_interface": "direct", "automated_clean": false}, "wait call-back"},
	}
	for _, c := range cases {
		t.Run(c.verb, func(t *testing.T) {
			verbWins, deleteWins := 0, 0
			for i := range trials {
				name := fmt.Sprintf("race-%s-%d", c.verb, i)
				e.createNode(name, c.create)
				require.Equal(t, 202, e.provision(name, "manage", nil).status)
				e.waitState(name, "manageable")
				if c.from == "available" {
					require.Equal(t, 202, e.provision(name, "provide", nil).status)
					e.waitState(name, "available")
				}

				var wg sync.WaitGroup
				start := make(chan struct{})
				verbs, deletes := make([]resp, each), make([]resp, each)
				for j := range each {
					wg.Add(2)
					go func() {
						defer wg.Done()
						<-start
						verbs[j] = e.provision(name, c.verb, nil)
					}()
					go func() {
						defer wg.Done()
						<-start
						deletes[j] = e.do("DELETE", "/v1/nodes/"+name, latest, nil)
					}()
				}
				close(start)
				wg.Wait()

				verbOK, deleteOK := 0, 0
				for j := range each {
					switch v := verbs[j]; v.status {
					case http.StatusAccepted:
						verbOK++
					case http.StatusNotFound, http.StatusBadRequest, http.StatusConflict:
						assert.NotEmpty(t, v.fault(t))
					default:
						t.Errorf("trial %d: %s answered %d: %s", i, c.verb, v.status, v.body)
					}
					switch d := deletes[j]; d.status {
					case http.StatusNoContent:
						deleteOK++
					case http.StatusConflict:
						assert.Regexp(t, `Can not delete node .* while it is in provision state|is locked by host`, d.fault(t))
					case http.StatusNotFound:
						assert.Contains(t, d.fault(t), "could not be found")
					default:
						t.Errorf("trial %d: DELETE answered %d: %s", i, d.status, d.body)
					}
				}
				require.LessOrEqual(t, verbOK, 1, "trial %d", i)
				require.LessOrEqual(t, deleteOK, 1, "trial %d", i)
				require.Equal(t, 1, verbOK+deleteOK, "trial %d: exactly one side wins (verb %d, delete %d)", i, verbOK, deleteOK)

				got := e.do("GET", "/v1/nodes/"+name, latest, nil)
				if deleteOK == 1 {
					deleteWins++
					assert.Equal(t, http.StatusNotFound, got.status, "trial %d: the deleted node is gone", i)
					continue
				}
				verbWins++
				require.Equal(t, http.StatusOK, got.status, "trial %d: the verb's node stays", i)
				e.waitState(name, c.after)
			}
			t.Logf("%s vs DELETE: verb won %d, delete won %d of %d", c.verb, verbWins, deleteWins, trials)
		})
	}
}
