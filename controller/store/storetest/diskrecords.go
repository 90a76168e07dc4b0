package storetest

import (
	"context"
	"database/sql"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/diskcheck"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlstore"
	"github.com/anvil-metal/anvil/protocol"
)

// The disk guard's records as releases before store.DiskRecords kept them:
// in driver_internal_info under disk_check and disks_at_deploy, JSON values
// as the conductor wrote them there.
var (
	legacyDiskCheck = store.DiskCheck{Step: "deploy.erase_devices_metadata", At: "2026-11-20T10:00:00Z", OK: false,
		Result: diskcheck.Result{
			Expected: []diskcheck.Disk{{Serial: "QM00001", Model: "QEMU HARDDISK", Size: 64 << 20, From: []string{diskcheck.FromInspection}},
				{Serial: "QM00002", Size: 64 << 20, From: []string{diskcheck.FromInspection, diskcheck.FromRootHint}}},
			Seen:          []diskcheck.Disk{{Name: "/dev/sda", Serial: "QM00001", Model: "QEMU HARDDISK", Size: 64 << 20}},
			Missing:       []diskcheck.Disk{{Serial: "QM00002", Size: 64 << 20, From: []string{diskcheck.FromInspection, diskcheck.FromRootHint}}},
			WithoutDriver: []protocol.PCIDevice{{Address: "0000:00:05.0", Vendor: "1000", Device: "005b", Class: "010400"}}}}
	legacyDeployed = []protocol.Disk{{Name: "/dev/sda", Serial: "QM00001", Model: "QEMU HARDDISK", Size: 64 << 20, ByPath: "pci-0000:00:1f.2-ata-1"}}
)

// PopulateLegacyDiskRecords creates, in a new store, nodes whose disk
// records are where releases before store.DiskRecords kept them
// (BeforeDiskRecords copies them into a database of the schema before).
// It returns the nodes as read back (what the API showed).
func PopulateLegacyDiskRecords(t *testing.T, s store.Store) map[string]*store.Node {
	t.Helper()
	ctx := context.Background()
	check, deployed := jsonValue(t, legacyDiskCheck), jsonValue(t, legacyDeployed)
	// checked: both records beside a key of the node's own; busy: a check
	// beside an operation under way (agent state included), which the
	// migration keeps; odd: a record this release would not show back,
	// which stays where it is; none: nothing to move.
	nodes := map[string]*store.Node{}
	for name, dii := range map[string]map[string]any{
		"checked": {"disk_check": check, "disks_at_deploy": deployed, "agent_url": "http://192.0.2.5:9999"},
		"busy":    {"disk_check": check},
		"odd":     {"disk_check": "checked by hand", "disks_at_deploy": deployed},
		"none":    {"agent_url": "http://192.0.2.6:9999"},
	} {
		n := NewNode("disks-" + name)
		n.DriverInternalInfo = dii
		if name == "busy" {
			n.ProvisionState = "clean wait"
			n.Operation = store.Operation{Clean: &store.StepPlan{Steps: []protocol.Step{{Interface: "deploy", Step: "erase_devices", Priority: 10}}},
				Agent: store.AgentSession{Token: "tok", Steps: &store.StepCache{Fingerprint: "fp"},
					CommandStatus: &protocol.CommandStatus{ID: "cmd-1", State: protocol.CommandRunning}}}
		}
		require.NoError(t, s.CreateNode(ctx, n))
		got, err := s.GetNode(ctx, n.UUID)
		require.NoError(t, err)
		nodes[name] = got
	}
	return nodes
}

// CheckDiskRecordsMoved checks s, reopened on PopulateLegacyDiskRecords'
// database after the migration: the records are in each node's operation
// record, no longer in its driver_internal_info, the API shows the same
// driver_internal_info, and nothing else changed.
func CheckDiskRecordsMoved(t *testing.T, s store.Store, before map[string]*store.Node) {
	t.Helper()
	ctx := context.Background()
	for name, was := range before {
		n, err := s.GetNode(ctx, was.UUID)
		require.NoError(t, err)
		assert.Equal(t, was.Revision, n.Revision, "%s: revision kept", name)
		assert.Equal(t, jsonOf(t, was.InternalInfo()), jsonOf(t, n.InternalInfo()), "%s: the API shows what it showed", name)
		switch name {
		case "checked":
			assert.Equal(t, &legacyDiskCheck, n.Operation.Disks.Check, name)
			assert.Equal(t, legacyDeployed, n.Operation.Disks.AtDeploy, name)
			assert.Equal(t, map[string]any{"agent_url": "http://192.0.2.5:9999"}, n.DriverInternalInfo, name)
		case "busy":
			assert.Equal(t, &legacyDiskCheck, n.Operation.Disks.Check, name)
			assert.Empty(t, n.DriverInternalInfo, name)
			want := was.Operation
			want.Disks.Check = &legacyDiskCheck
			assert.Equal(t, want, n.Operation, "%s: the operation under way and its agent state are kept", name)
		case "odd":
			assert.Nil(t, n.Operation.Disks.Check, name)
			assert.Equal(t, legacyDeployed, n.Operation.Disks.AtDeploy, name)
			assert.Equal(t, map[string]any{"disk_check": "checked by hand"}, n.DriverInternalInfo, "%s: what does not decode stays", name)
		case "none":
			assert.Equal(t, store.Operation{}, n.Operation, name)
			assert.Equal(t, was.DriverInternalInfo, n.DriverInternalInfo, name)
		}
	}
}

func jsonValue(t *testing.T, v any) any {
	t.Helper()
	var out any
	require.NoError(t, json.Unmarshal([]byte(jsonOf(t, v)), &out))
	return out
}

// diskRecordsNodeCols are the node columns of the schema before
// sqlstore.DiskRecordsMigration.
const diskRecordsNodeCols = `uuid, name, revision, driver, provision_state, power_state, maintenance, retired,
	instance_uuid, resource_class, fault, owner, lessee, conductor_group, chassis_uuid, description, shard,
	reservation, created_at, updated_at, provision_updated_at, data, operation`

// BeforeDiskRecords builds in dst, an empty database, the schema before
// sqlstore.DiskRecordsMigration (d's words; arg spells the n-th
// placeholder) and copies into it, row for row, the nodes and agent
// state of src, a database of today's schema that
// PopulateLegacyDiskRecords filled: a database as the release before the
// migration left it.
func BeforeDiskRecords(t *testing.T, src, dst *sql.DB, d sqlstore.Dialect, arg func(n int) string) {
	t.Helper()
	ctx := context.Background()
	create, stamp := `CREATE TABLE schema_migrations (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL)`, "'2026-11-01T12:00:00.000000Z'"
	if d == sqlstore.Postgres() {
		create, stamp = `CREATE TABLE schema_migrations (version integer PRIMARY KEY, applied_at timestamptz NOT NULL)`, "now()"
	}
	_, err := dst.ExecContext(ctx, create)
	require.NoError(t, err)
	for v := 1; v < sqlstore.DiskRecordsMigration; v++ {
		_, err := dst.ExecContext(ctx, sqlstore.Migration(d, v))
		require.NoError(t, err, "migration %d", v)
		_, err = dst.ExecContext(ctx, fmt.Sprintf(`INSERT INTO schema_migrations VALUES (%d, %s)`, v, stamp))
		require.NoError(t, err)
	}
	copyRows := func(table, cols string, n int) {
		rows, err := src.QueryContext(ctx, `SELECT `+cols+` FROM `+table+` ORDER BY 1`)
		require.NoError(t, err)
		defer rows.Close()
		marks := make([]string, n)
		for i := range marks {
			marks[i] = arg(i + 1)
		}
		insert := `INSERT INTO ` + table + ` (` + cols + `) VALUES (` + strings.Join(marks, ", ") + `)`
		for rows.Next() {
			row := make([]any, n)
			ptrs := make([]any, n)
			for i := range row {
				ptrs[i] = &row[i]
			}
			require.NoError(t, rows.Scan(ptrs...))
			_, err := dst.ExecContext(ctx, insert, row...)
			require.NoError(t, err)
		}
		require.NoError(t, rows.Err())
	}
	copyRows("nodes", diskRecordsNodeCols, 23)
	copyRows("agent_state", "node_uuid, data", 2)
}
