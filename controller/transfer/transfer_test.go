package transfer

import (
	"bytes"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
)

// goldenPath is the small fleet's document; ANVIL_UPDATE_GOLDEN=1 rewrites it.
const goldenPath = "../../testdata/transfer/small-fleet.json"

func fixedNow() time.Time { return time.Date(2025, 3, 2, 8, 0, 0, 0, time.UTC) }

func openSQLite(t testing.TB) store.Store {
	t.Helper()
	st, err := sqlite.Open(context.Background(), ":memory:")
	require.NoError(t, err)
	t.Cleanup(func() { st.Close() })
	return st
}

func export(t testing.TB, src Source, opts ExportOptions) ([]byte, Summary) {
	t.Helper()
	var buf bytes.Buffer
	if opts.Now == nil {
		opts.Now = fixedNow
	}
	sum, err := Export(context.Background(), src, &buf, opts)
	require.NoError(t, err)
	return buf.Bytes(), sum
}

// smallFleet counts what fillFleet writes with no extra nodes.
func smallFleet() Summary {
	return Summary{Chassis: 2, Nodes: 4, Portgroups: 1, Ports: 3, Allocations: 2, VolumeConnectors: 1, VolumeTargets: 1,
		Events: 5, Inventories: 2, StepResults: 2, Records: 1, Templates: 1, Runbooks: 1, InspectionRules: 1, BIOSSettings: 2, Firmware: 1}
}

func TestExportGolden(t *testing.T) {
	st := openSQLite(t)
	fillFleet(t, st, 0)
	doc, sum := export(t, st, ExportOptions{})
	assert.Equal(t, smallFleet(), sum)
	if os.Getenv("ANVIL_UPDATE_GOLDEN") != "" {
		require.NoError(t, os.MkdirAll(filepath.Dir(goldenPath), 0o755))
		require.NoError(t, os.WriteFile(goldenPath, doc, 0o644))
	}
	want, err := os.ReadFile(goldenPath)
	require.NoError(t, err, "ANVIL_UPDATE_GOLDEN=1 creates it")
	assert.Equal(t, string(want), string(doc))
	// One object per line: greppable, and diffable between two exports.
	assert.Equal(t, 2+4+1+3+2+1+1+5+2+2+1+1+1+1+1+1+16*2+1, bytes.Count(doc, []byte("\n")), "BIOS settings and firmware: a line per node")
	assert.Contains(t, string(doc), `"ipmi_password":"p<a&s>s\"wörd\u0000"`, "secrets are exported, unescaped HTML")
}

// TestGoldenRoundTrip imports the golden document and exports it again:
// the same bytes, and the objects the store returns are the exported ones.
func TestGoldenRoundTrip(t *testing.T) {
	want, err := os.ReadFile(goldenPath)
	require.NoError(t, err)
	st := openSQLite(t)
	sum, err := Import(context.Background(), st, bytes.NewReader(want), ImportOptions{})
	require.NoError(t, err)
	assert.Equal(t, smallFleet(), sum)
	doc, _ := export(t, st, ExportOptions{})
	assert.Equal(t, string(want), string(doc))

	ctx := context.Background()
	n, err := st.GetNode(ctx, "rack1-03")
	require.NoError(t, err)
	assert.Equal(t, "clean failed", n.ProvisionState)
	assert.Equal(t, "clean step deploy.erase_devices failed: /dev/sdb: write error at sector 123456", *n.LastError)
	assert.Equal(t, at(2), n.CreatedAt, "created_at kept, to the nanosecond")
	assert.Equal(t, at(45), *n.UpdatedAt, "updated_at kept, not set to the import time")
	assert.Equal(t, int64(1), n.Revision)
	inv, err := st.GetInventory(ctx, fleetUUID(kindNode, 2))
	require.NoError(t, err)
	assert.JSONEq(t, `{"cpu":{"model_name":"EPYC","count":64},"disks":[{"name":"/dev/nvme0n1","size":960197124096}],"memory":{"physical_mb":524288}}`, string(inv))
	events, err := st.ListEvents(ctx, fleetUUID(kindNode, 3), 0)
	require.NoError(t, err)
	require.Len(t, events, 2)
	assert.Equal(t, "ERROR", events[1].Severity, "history keeps its order")

	results, err := st.ListStepResults(ctx, store.ResultPage{NodeUUID: fleetUUID(kindNode, 3)})
	require.NoError(t, err)
	require.Len(t, results, 2)
	assert.Equal(t, "deploy.erase_devices", results[0].Step, "newest first, as exported")
	assert.Equal(t, store.OutcomeFailed, results[0].Outcome)
	assert.JSONEq(t, `{"devices":[{"plan":{"device":"/dev/sdb"},"status":"failed","bytes":63209472}]}`, string(results[0].Result))
	assert.Equal(t, at(43), results[0].StartedAt)
	records, err := st.ListEraseRecords(ctx, store.ResultPage{NodeUUID: fleetUUID(kindNode, 999)})
	require.NoError(t, err)
	require.Len(t, records, 1, "a deleted node's record travels too")
	assert.JSONEq(t, `{"record":{"device":"/dev/sda","serial":"S1<&>"},"signature":"c2ln"}`, string(records[0].Data))
	tpl, err := st.GetDeployTemplate(ctx, "CUSTOM_RAID1")
	require.NoError(t, err)
	assert.Equal(t, fleetUUID(kindTemplate, 1), tpl.UUID)
	assert.Equal(t, 90, tpl.Steps[0].Priority)
	assert.Equal(t, at(51), tpl.CreatedAt)
	assert.Equal(t, at(52), *tpl.UpdatedAt)
	rb, err := st.GetRunbook(ctx, "CUSTOM_BIOS_TUNE")
	require.NoError(t, err)
	assert.Equal(t, fleetUUID(kindRunbook, 1), rb.UUID)
	assert.Equal(t, []int{2, 1}, []int{rb.Steps[0].Order, rb.Steps[1].Order}, "steps as written")
	assert.True(t, rb.DisableRamdisk)
	assert.Equal(t, "team-a", *rb.Owner)
	assert.Equal(t, at(58), *rb.UpdatedAt)
	rule, err := st.GetInspectionRule(ctx, fleetUUID(kindInspectionRule, 1))
	require.NoError(t, err)
	assert.True(t, rule.Sensitive, "a sensitive rule travels, secret and all")
	assert.Equal(t, "s3cr<e>t", rule.Actions[0]["args"].([]any)[1])
	assert.Equal(t, 40, rule.Priority)
	assert.Equal(t, at(60), *rule.UpdatedAt)
	bios, err := st.GetBIOSSetting(ctx, fleetUUID(kindNode, 2), "BootMode")
	require.NoError(t, err)
	assert.Equal(t, []string{"Bios", "Uefi"}, bios.AllowableValues)
	assert.Equal(t, at(53), bios.CreatedAt, "BIOS setting times kept")
	assert.Equal(t, at(54), *bios.UpdatedAt)
	fw, err := st.ListFirmwareComponents(ctx, fleetUUID(kindNode, 3))
	require.NoError(t, err)
	require.Len(t, fw, 1)
	assert.Equal(t, "1.0", fw[0].InitialVersion, "initial version kept")
	assert.Equal(t, "1.2", *fw[0].LastVersionFlashed)
}

func TestImportRefusesBadBIOSSections(t *testing.T) {
	for name, c := range map[string]struct{ doc, want string }{
		"unknown node": {doc("bios_settings", `{"00000001-0000-4000-8000-000000000009":[{"name":"A","value":"1","created_at":"2025-03-01T10:00:00Z"}]}`),
			`node "00000001-0000-4000-8000-000000000009" is not an object earlier in the document`},
		"node twice": {doc("nodes", "["+nodeA+"]", "firmware_components",
			`{"00000001-0000-4000-8000-000000000001":[],"00000001-0000-4000-8000-000000000001":[]}`), "appears twice"},
		"name twice": {doc("nodes", "["+nodeA+"]", "bios_settings",
			`{"00000001-0000-4000-8000-000000000001":[{"name":"A","value":"1"},{"name":"A","value":"2"}]}`), `[1]: name "A" appears twice`},
		"no component": {doc("nodes", "["+nodeA+"]", "firmware_components",
			`{"00000001-0000-4000-8000-000000000001":[{"current_version":"1"}]}`), "[0]: name is missing or empty"},
		"unknown field": {doc("nodes", "["+nodeA+"]", "bios_settings",
			`{"00000001-0000-4000-8000-000000000001":[{"name":"A","colour":"red"}]}`), `unknown field "colour"`},
		"not an object": {doc("bios_settings", "[]"), `expected "{", found "["`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Import(context.Background(), openSQLite(t), strings.NewReader(c.doc), ImportOptions{})
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), c.want)
		})
	}
}

// TestImportDocumentWithoutResults: a version 1 document written before
// step results and erase records existed still imports.
func TestImportDocumentWithoutResults(t *testing.T) {
	old, err := os.ReadFile("../../testdata/transfer/small-fleet-without-results.json")
	require.NoError(t, err)
	sum, err := Import(context.Background(), openSQLite(t), bytes.NewReader(old), ImportOptions{})
	require.NoError(t, err)
	want := smallFleet()
	want.StepResults, want.Records, want.Templates, want.Runbooks, want.InspectionRules, want.BIOSSettings, want.Firmware = 0, 0, 0, 0, 0, 0, 0
	// nor chassis and volumes: its node's chassis is created
	want.Chassis, want.VolumeConnectors, want.VolumeTargets = 1, 0, 0
	assert.Equal(t, want, sum)
}

// TestImportDocumentWithoutChassis: a version 1 document written before
// chassis and volume resources were exported still imports; the chassis
// its node names (earlier releases took any chassis_uuid) is created.
func TestImportDocumentWithoutChassis(t *testing.T) {
	old, err := os.ReadFile("../../testdata/transfer/small-fleet-without-chassis.json")
	require.NoError(t, err)
	st := openSQLite(t)
	sum, err := Import(context.Background(), st, bytes.NewReader(old), ImportOptions{})
	require.NoError(t, err)
	want := smallFleet()
	want.Chassis, want.VolumeConnectors, want.VolumeTargets, want.Templates, want.Runbooks, want.InspectionRules, want.BIOSSettings, want.Firmware = 1, 0, 0, 0, 0, 0, 0, 0
	assert.Equal(t, want, sum)
	n, err := st.GetNode(context.Background(), "web-01")
	require.NoError(t, err)
	c, err := st.GetChassis(context.Background(), *n.ChassisUUID)
	require.NoError(t, err)
	assert.Empty(t, c.Extra)
	assert.ErrorIs(t, st.DeleteChassis(context.Background(), c.UUID), store.ErrNotEmpty)
}

// doc builds a document from the valid empty one: members replaces or adds
// members (raw JSON), a value of "-" leaves the member out.
func doc(members ...string) string {
	order := []string{"format", "version", "exported_at", "nodes", "portgroups", "ports", "allocations", "history", "inventories"}
	vals := map[string]string{"format": `"anvil-export"`, "version": "1", "exported_at": `"2025-03-02T08:00:00Z"`,
		"nodes": "[]", "portgroups": "[]", "ports": "[]", "allocations": "[]", "history": "[]", "inventories": "{}"}
	var extra []string
	for i := 0; i+1 < len(members); i += 2 {
		if _, ok := vals[members[i]]; !ok {
			extra = append(extra, members[i])
		}
		vals[members[i]] = members[i+1]
	}
	var parts []string
	for _, k := range append(order, extra...) {
		if vals[k] != "-" {
			parts = append(parts, `"`+k+`":`+vals[k])
		}
	}
	return "{" + strings.Join(parts, ",\n") + "}\n"
}

const (
	nodeA = `{"uuid":"00000001-0000-4000-8000-000000000001","driver":"fake-hardware","provision_state":"enroll","created_at":"2025-03-01T10:00:00Z"}`
	nodeB = `{"uuid":"00000001-0000-4000-8000-000000000002","name":"b","driver":"fake-hardware","provision_state":"enroll","created_at":"2025-03-01T10:00:00Z"}`
)

func TestImportRefusesBadDocuments(t *testing.T) {
	golden, err := os.ReadFile(goldenPath)
	require.NoError(t, err)
	tests := map[string]struct {
		doc  string
		want string
	}{
		"empty input":       {"", "invalid export document: the document is empty"},
		"not an object":     {"[1,2]", `document: not an anvil export: it must be one JSON object, not "["`},
		"other format":      {doc("format", `"ironic-dump"`), `member "format" at byte 9: is "ironic-dump", not "anvil-export": not an anvil export`},
		"newer version":     {doc("version", "2"), "member \"version\" at byte 35: 2 is not supported: this controller reads version 1; import with the controller version that exported it, or a newer one"},
		"version as string": {doc("version", `"1"`), "version"},
		"data before header": {`{"nodes":[],"format":"anvil-export","version":1}`,
			`member "nodes" at byte 8: "format" and "version" must come first`},
		"unknown member":        {doc("nodez", "[]"), `member "nodez" at byte 175: unknown member (a typo, or a document from a newer controller)`},
		"unknown node field":    {doc("nodes", "["+strings.Replace(nodeA, `"driver"`, `"colour":"red","driver"`, 1)+"]"), `nodes[0] at byte 86: json: unknown field "colour"`},
		"internal id":           {doc("nodes", "["+strings.Replace(nodeA, `{`, `{"id":7,`, 1)+"]"), `nodes[0] at byte 86: json: unknown field "id"`},
		"unknown interface":     {doc("nodes", "["+strings.Replace(nodeA, `{`, `{"interfaces":{"colour_interface":"x"},`, 1)+"]"), `unknown field "colour_interface"`},
		"wrong type":            {doc("nodes", "["+strings.Replace(nodeA, `{`, `{"maintenance":"yes",`, 1)+"]"), `nodes[0] at byte 86: json: cannot unmarshal string into Go struct field Node.maintenance of type bool`},
		"malformed JSON":        {doc("nodes", "["+nodeA+",{\"uuid\":}]"), "nodes[1] at byte 221: malformed JSON: invalid character '}' looking for beginning of value"},
		"truncated":             {string(golden[:len(golden)/2]), "the document ends early (truncated?)"},
		"trailing data":         {doc() + "{}", "document at byte 169: data after the end of the document"},
		"missing section":       {doc("inventories", "-"), `document: no "inventories" member`},
		"member twice":          {strings.Replace(doc(), `"ports":[]`, `"ports":[],"ports":[]`, 1), `member "ports" at byte 124: appears twice`},
		"null section":          {doc("nodes", "null"), `member "nodes" at byte 84: expected "[", found null`},
		"duplicate node":        {doc("nodes", "["+nodeA+","+nodeA+"]"), `nodes[1] at byte 221: uuid "00000001-0000-4000-8000-000000000001" appears twice`},
		"node without driver":   {doc("nodes", "["+strings.Replace(nodeA, `"fake-hardware"`, `""`, 1)+"]"), "nodes[0] at byte 86: driver is missing or empty"},
		"dangling port":         {doc("nodes", "["+nodeA+"]", "ports", `[{"uuid":"p1","address":"52:54:00:00:00:01","node_uuid":"nope"}]`), `ports[0] at byte 250: node_uuid "nope" is not an object earlier in the document`},
		"port before portgroup": {doc("nodes", "["+nodeA+"]", "ports", `[{"uuid":"p1","address":"52:54:00:00:00:01","node_uuid":"00000001-0000-4000-8000-000000000001","portgroup_uuid":"g1"}]`), `portgroup_uuid "g1" is not a portgroup earlier in the document`},
		"uuid shared by kinds": {doc("nodes", "["+nodeA+"]", "portgroups", `[{"uuid":"x1","node_uuid":"00000001-0000-4000-8000-000000000001"}]`,
			"allocations", `[{"uuid":"x1","state":"active"}]`), `allocations[0] at byte 332: uuid "x1" is already the uuid of a portgroup`},
		"history of no node":   {doc("nodes", "["+nodeA+"]", "history", `[{"uuid":"e1","node_uuid":"00000001-0000-4000-8000-000000000009"}]`), `history[0] at byte 282: node_uuid "00000001-0000-4000-8000-000000000009" is not an object earlier`},
		"inventory of no node": {doc("inventories", `{"n1":{"cpu":{}}}`), `inventories["n1"] at byte 169: node "n1" is not an object earlier`},
		"duplicate name":       {doc("nodes", "["+nodeB+","+strings.Replace(nodeB, "0002", "0003", 1)+"]"), `nodes[1] at byte 232: name "b" appears twice`},
		"duplicate template name": {doc("deploy_templates", `[{"uuid":"t1","name":"CUSTOM_A","steps":[{"interface":"deploy","step":"s","args":{},"priority":1}]},`+
			`{"uuid":"t2","name":"CUSTOM_A","steps":[{"interface":"deploy","step":"s","args":{},"priority":1}]}]`), `deploy_templates[1] at byte 286: name "CUSTOM_A" appears twice`},
		"template without steps": {doc("deploy_templates", `[{"uuid":"t1","name":"CUSTOM_A","steps":[]}]`), `deploy_templates[0] at byte 188: steps is missing or empty`},
		"template step without interface": {doc("deploy_templates", `[{"uuid":"t1","name":"CUSTOM_A","steps":[{"step":"s","args":{},"priority":1}]}]`),
			`steps[0] needs an interface, a step and a priority of 0 or more`},
		"duplicate runbook name": {doc("runbooks", `[{"uuid":"r1","name":"CUSTOM_A","steps":[{"interface":"deploy","step":"s","args":{},"order":1}]},`+
			`{"uuid":"r2","name":"CUSTOM_A","steps":[{"interface":"deploy","step":"s","args":{},"order":1}]}]`), `name "CUSTOM_A" appears twice`},
		"runbook without steps": {doc("runbooks", `[{"uuid":"r1","name":"CUSTOM_A","steps":null}]`), `runbooks[0] at byte 180: steps is missing or empty`},
		"runbook step with a negative order": {doc("runbooks", `[{"uuid":"r1","name":"CUSTOM_A","steps":[{"interface":"deploy","step":"s","order":-1}]}]`),
			`steps[0] needs an interface, a step and an order of 0 or more`},
		"public runbook with an owner": {doc("runbooks", `[{"uuid":"r1","name":"CUSTOM_A","public":true,"owner":"p","steps":[{"interface":"deploy","step":"s","order":1}]}]`),
			`a public runbook has no owner`},
		"duplicate inspection rule": {doc("inspection_rules", `[{"uuid":"i1","phase":"main","actions":[{"op":"fail","args":["x"]}]},`+
			`{"uuid":"i1","phase":"main","actions":[{"op":"fail","args":["x"]}]}]`), `uuid "i1" appears twice`},
		"inspection rule without actions": {doc("inspection_rules", `[{"uuid":"i1","phase":"main","actions":[]}]`), `actions is missing or empty`},
		"inspection rule of another phase": {doc("inspection_rules", `[{"uuid":"i1","phase":"early","actions":[{"op":"fail","args":["x"]}]}]`),
			`phase "early" is not main`},
	}
	for name, tt := range tests {
		t.Run(name, func(t *testing.T) {
			st := openSQLite(t)
			sum, err := Import(context.Background(), st, strings.NewReader(tt.doc), ImportOptions{})
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tt.want)
			assert.Zero(t, sum, "a seekable document is checked before anything is written")
			nodes, err := st.ListNodeSummaries(context.Background(), store.NodeFilter{}, store.Page{})
			require.NoError(t, err)
			assert.Empty(t, nodes)
		})
	}
}

// TestImportFromPipeFailsHalfWay reads a document that cannot be checked
// first (a pipe): the import stops at the bad object and says what it
// wrote and that the target must be dropped.
func TestImportFromPipeFailsHalfWay(t *testing.T) {
	golden, err := os.ReadFile(goldenPath)
	require.NoError(t, err)
	bad := bytes.Replace(golden, []byte(`"portgroup_uuid":"00000002-`), []byte(`"portgroup_uuid":"ffffffff-`), 1)
	require.NotEqual(t, golden, bad)
	st := openSQLite(t)
	sum, err := Import(context.Background(), st, io.MultiReader(bytes.NewReader(bad)), ImportOptions{})
	require.ErrorIs(t, err, ErrInvalid)
	assert.Equal(t, Summary{Chassis: 2, Nodes: 4, Portgroups: 1}, sum)
	assert.Contains(t, err.Error(), "import failed after writing 2 chassis, 4 nodes, 1 portgroups, 0 ports")
	assert.Contains(t, err.Error(), "the target database is incomplete: drop it (or remove the SQLite file) and import again into an empty database")
}

func TestImportRefusesNonEmptyTarget(t *testing.T) {
	golden, err := os.ReadFile(goldenPath)
	require.NoError(t, err)
	ctx := context.Background()
	t.Run("nodes", func(t *testing.T) {
		st := openSQLite(t)
		require.NoError(t, st.CreateNode(ctx, &store.Node{UUID: "00000000-0000-4000-8000-00000000beef", Driver: "fake-hardware", ProvisionState: "enroll"}))
		_, err := Import(ctx, st, bytes.NewReader(golden), ImportOptions{})
		require.ErrorIs(t, err, ErrNotEmpty)
		assert.EqualError(t, err, "target database is not empty: it holds nodes (e.g. 00000000-0000-4000-8000-00000000beef); import only into a new, empty database")
	})
	t.Run("allocations", func(t *testing.T) {
		st := openSQLite(t)
		require.NoError(t, st.CreateAllocation(ctx, &store.Allocation{UUID: "a1", State: "allocating"}))
		_, err := Import(ctx, st, bytes.NewReader(golden), ImportOptions{})
		require.ErrorIs(t, err, ErrNotEmpty)
	})
	t.Run("inspection rules", func(t *testing.T) {
		st := openSQLite(t)
		require.NoError(t, st.CreateInspectionRule(ctx, &store.InspectionRule{UUID: "r1", Phase: "main",
			Actions: []map[string]any{{"op": "fail", "args": []any{"x"}}}}))
		_, err := Import(ctx, st, bytes.NewReader(golden), ImportOptions{})
		require.ErrorIs(t, err, ErrNotEmpty)
		assert.Contains(t, err.Error(), "it holds inspection rules (e.g. r1)")
	})
}

func TestExportRefusesReservedNodes(t *testing.T) {
	ctx := context.Background()
	st := openSQLite(t)
	fillFleet(t, st, 0)
	_, err := store.MutateNode(ctx, st, "rack1-03", func(n *store.Node) error {
		n.Reservation = strp("ctl-1")
		return nil
	})
	require.NoError(t, err)
	var buf bytes.Buffer
	_, err = Export(ctx, st, &buf, ExportOptions{})
	require.ErrorIs(t, err, ErrReserved)
	assert.Contains(t, err.Error(), "00000001-0000-4000-8000-000000000003 (clean failed, held by ctl-1)")
	assert.Contains(t, err.Error(), "cannot resume reliably from another database")
	assert.Contains(t, err.Error(), "--force")
	assert.Zero(t, buf.Len(), "nothing written")

	doc, sum := export(t, st, ExportOptions{Force: true})
	assert.Equal(t, smallFleet(), sum)
	assert.Contains(t, string(doc), `"reservation":"ctl-1"`, "forced: the reservation goes along, so the new controller resumes the operation")
}

// TestExportPages crosses list pages of every kind the source pages.
func TestExportPages(t *testing.T) {
	st := openSQLite(t)
	fillFleet(t, st, 2*pageSize+3)
	doc, sum := export(t, st, ExportOptions{})
	assert.Equal(t, 4+2*pageSize+3, sum.Nodes)
	dst := openSQLite(t)
	got, err := Import(context.Background(), dst, bytes.NewReader(doc), ImportOptions{})
	require.NoError(t, err)
	assert.Equal(t, sum, got)
	again, _ := export(t, dst, ExportOptions{})
	assert.Equal(t, string(doc), string(again))
}

// FuzzImport feeds arbitrary documents to Import into a real store: it
// never panics, refuses with ErrInvalid before writing anything, or
// accepts; an accepted document exports to one that imports and exports
// to the same bytes again.
func FuzzImport(f *testing.F) {
	golden, err := os.ReadFile(goldenPath)
	require.NoError(f, err)
	f.Add(golden)
	f.Add([]byte(doc()))
	f.Add([]byte(doc("nodes", "["+nodeA+","+nodeB+"]", "history", `[{"uuid":"e1","node_uuid":"00000001-0000-4000-8000-000000000001"}]`,
		"inventories", `{"00000001-0000-4000-8000-000000000002":{"cpu":{"count":1}}}`)))
	f.Add([]byte(doc("version", "2")))
	f.Fuzz(func(t *testing.T, data []byte) {
		ctx := context.Background()
		st := openSQLite(t)
		sum, err := Import(ctx, st, bytes.NewReader(data), ImportOptions{})
		if err != nil {
			if errors.Is(err, ErrInvalid) {
				require.Zero(t, sum)
				return
			}
			// What only the store checks (a duplicate history UUID).
			require.Contains(t, err.Error(), "the target database is incomplete")
			return
		}
		first, exported := export(t, st, ExportOptions{})
		require.Equal(t, sum, exported)
		again := openSQLite(t)
		_, err = Import(ctx, again, bytes.NewReader(first), ImportOptions{})
		require.NoError(t, err)
		second, _ := export(t, again, ExportOptions{})
		require.Equal(t, string(first), string(second))
	})
}
