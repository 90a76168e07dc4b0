package storetest

import (
	"context"
	"database/sql"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	_ "modernc.org/sqlite" // reads the fixture as written, without migrating it

	"github.com/anvil-metal/anvil/controller/store"
)

// LegacyFixture is a SQLite database written by the release that kept the
// conductor's working state in driver_internal_info (schema version 3),
// relative to a store package's directory. controller/api's legacy tests
// describe its nodes.
const LegacyFixture = "../../api/testdata/legacy/anvil.db"

// LegacyNodeCols are the node columns of schema version 3.
const LegacyNodeCols = `uuid, name, revision, driver, provision_state, power_state, maintenance, retired,
	instance_uuid, resource_class, fault, owner, lessee, conductor_group, chassis_uuid, description, shard,
	reservation, created_at, updated_at, provision_updated_at, data`

// LegacyRows reads the fixture's node rows as they are on disk, in
// LegacyNodeCols order.
func LegacyRows(t *testing.T) [][]any {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+LegacyFixture+"?mode=ro")
	require.NoError(t, err)
	defer db.Close()
	var version int
	require.NoError(t, db.QueryRow(`SELECT MAX(version) FROM schema_migrations`).Scan(&version))
	require.Equal(t, 3, version, "the fixture is a schema 3 database")
	rows, err := db.Query(`SELECT ` + LegacyNodeCols + ` FROM nodes ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	var out [][]any
	for rows.Next() {
		row := make([]any, 22)
		ptrs := make([]any, len(row))
		for i := range row {
			ptrs[i] = &row[i]
		}
		require.NoError(t, rows.Scan(ptrs...))
		out = append(out, row)
	}
	require.NoError(t, rows.Err())
	require.NotEmpty(t, out)
	return out
}

// CheckLegacyMigrated checks s, opened on the fixture's data: every node
// shows the driver_internal_info it had, now built from its operation
// record, with its revision, and the nodes in the middle of cleaning and
// deploying have their steps and position.
func CheckLegacyMigrated(t *testing.T, s store.Store, rows [][]any) {
	t.Helper()
	ctx := context.Background()
	for _, row := range rows {
		var legacy store.Node
		require.NoError(t, json.Unmarshal(asBytes(row[21]), &legacy))
		n, err := s.GetNode(ctx, legacy.UUID)
		require.NoError(t, err)
		name := *n.Name
		assert.Equal(t, row[2], n.Revision, "node %s: revision kept", name)
		assert.Equal(t, jsonOf(t, legacy.DriverInternalInfo), jsonOf(t, n.InternalInfo()), "node %s", name)
		assert.Empty(t, n.DriverInternalInfo, "node %s: the working state left driver_internal_info", name)
		op := n.Operation
		switch name {
		case "clean-mid", "manual-mid":
			require.NotNil(t, op.Clean, name)
			assert.Equal(t, 1, op.Clean.Index, name)
			assert.Equal(t, "erase_devices", op.Clean.Steps[op.Clean.Index].Step, name)
			require.NotNil(t, op.Agent.Command, name)
			assert.Equal(t, "erase_devices", op.Agent.Command.Step.Step, name)
			assert.NotEmpty(t, op.Agent.Token, name)
			assert.Equal(t, name == "manual-mid", op.ManualClean, name)
		case "deploy-mid":
			require.NotNil(t, op.Deploy)
			assert.Equal(t, "write_image", op.Deploy.Steps[op.Deploy.Index].Step)
			assert.Len(t, op.UserDeploySteps, 1)
		case "booting":
			require.NotNil(t, op.Agent.Await)
			assert.NotEmpty(t, op.Agent.BootNonce)
		case "idle":
			assert.Equal(t, store.Operation{}, op)
		}
	}
}

func asBytes(v any) []byte {
	switch b := v.(type) {
	case []byte:
		return b
	case string:
		return []byte(b)
	}
	return nil
}

func jsonOf(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
