package api

import (
	"context"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

// racingStore makes the next races writes of ports and port groups lose:
// before such a write, another writer (the conductor attaching a VIF)
// changes the resource's extra, so the write's revision is stale.
type racingStore struct {
	store.Store
	races atomic.Int32
}

func (s *racingStore) lose() bool { return s.races.Add(-1) >= 0 }

func (s *racingStore) UpdatePort(ctx context.Context, p *store.Port) error {
	if s.lose() {
		other, err := s.Store.GetPort(ctx, p.UUID)
		if err != nil {
			return err
		}
		other.Extra = map[string]any{"other": "writer"}
		if err := s.Store.UpdatePort(ctx, other); err != nil {
			return err
		}
	}
	return s.Store.UpdatePort(ctx, p)
}

func (s *racingStore) UpdatePortgroup(ctx context.Context, pg *store.Portgroup) error {
	if s.lose() {
		other, err := s.Store.GetPortgroup(ctx, pg.UUID)
		if err != nil {
			return err
		}
		other.Extra = map[string]any{"other": "writer"}
		if err := s.Store.UpdatePortgroup(ctx, other); err != nil {
			return err
		}
	}
	return s.Store.UpdatePortgroup(ctx, pg)
}

// TestPatchRetriesLostRace: a PATCH of a port or port group that another
// writer changed between its read and its write is applied again to a
// fresh read (Ironic's node lock would have serialized the two), instead
// of answering 409 "please retry"; only a resource rewritten more often
// than the bounded retries allow is refused.
func TestPatchRetriesLostRace(t *testing.T) {
	for name, tc := range map[string]struct {
		races      int32
		wantStatus int
	}{
		"one lost race":    {1, http.StatusOK},
		"a few lost races": {3, http.StatusOK},
		"always rewritten": {patchAttempts, http.StatusConflict},
		"no race":          {0, http.StatusOK},
	} {
		t.Run(name, func(t *testing.T) {
			var rs *racingStore
			e := newEnv(t, func(c *Config) {
				if c.Store != nil {
					rs = &racingStore{Store: c.Store}
					c.Store = rs
				}
			})
			n := e.createNode("race", nil)
			r := e.do("POST", "/v1/portgroups", latest, map[string]any{"node_uuid": n["uuid"], "name": "bond0"})
			require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
			pg := r.json(t)["uuid"].(string)
			r = e.do("POST", "/v1/ports", latest, map[string]any{"node_uuid": n["uuid"], "address": "52:54:00:12:34:56"})
			require.Equal(t, http.StatusCreated, r.status, "%s", r.body)
			port := r.json(t)["uuid"].(string)

			for _, path := range []string{"/v1/ports/" + port, "/v1/portgroups/" + pg} {
				rs.races.Store(tc.races)
				r := e.do("PATCH", path, latest, []map[string]any{{"op": "add", "path": "/extra/mine", "value": "patch"}})
				require.Equal(t, tc.wantStatus, r.status, "%s: %s", path, r.body)
				if tc.wantStatus != http.StatusOK {
					assert.Contains(t, r.fault(t), "was changed by another request")
					continue
				}
				got := e.do("GET", path, latest, nil).json(t)["extra"].(map[string]any)
				assert.Equal(t, "patch", got["mine"], "%s: the patch is applied", path)
				if tc.races > 0 {
					assert.Equal(t, "writer", got["other"], "%s: to what the other writer left", path)
				}
			}
		})
	}
}
