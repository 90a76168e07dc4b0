package api

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"regexp"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/protocol"
)

// deepJSON is an object nested depth levels deep ({"a":{"a":...{}}}).
func deepJSON(depth int) string {
	return strings.Repeat(`{"a":`, depth-1) + "{}" + strings.Repeat("}", depth-1)
}

// jsonDepth is the deepest nesting of objects and arrays in a document, as
// a client's decoder meets it (a token stream: no recursion here).
func jsonDepth(t *testing.T, body []byte) int {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(body))
	depth, deepest := 0, 0
	for {
		tok, err := dec.Token()
		if errors.Is(err, io.EOF) {
			return deepest
		}
		require.NoError(t, err)
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
			deepest = max(deepest, depth)
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
	}
}

// fleetParses is the check a Python client's fleet list needs: the whole
// detail list decodes, and its nesting is our bound plus the few levels of
// the list itself ({"nodes":[{"extra":...}]}).
func fleetParses(t *testing.T, e *testEnv) {
	t.Helper()
	r := e.do("GET", "/v1/nodes/detail", latest, nil)
	require.Equal(t, 200, r.status, string(r.body))
	assert.True(t, utf8.Valid(r.body), "the fleet list is valid UTF-8")
	assert.False(t, strings.Contains(string(r.body), `\u0000`), "the fleet list holds a NUL")
	assert.LessOrEqual(t, jsonDepth(t, r.body), protocol.MaxJSONDepth+3)
}

// Finding 6: a node's extra (or any body) nested thousands deep was stored,
// and then no Python client could list the fleet.
func TestJSONBoundsNodeBodies(t *testing.T) { forEachStoreEnv(t, testJSONBoundsNodeBodies) }

func testJSONBoundsNodeBodies(t *testing.T, e *testEnv) {
	e.createNode("n1", nil)
	for name, tc := range map[string]struct {
		method, path, body string
		fault              string
	}{
		"create 5,000 deep": {"POST", "/v1/nodes", `{"driver":"fake-hardware","extra":` + deepJSON(5000) + `}`,
			"Malformed JSON body: nesting deeper than 32 levels"},
		"patch 5,000 deep": {"PATCH", "/v1/nodes/n1", `[{"op":"add","path":"/extra/x","value":` + deepJSON(5000) + `}]`,
			"Malformed JSON body: nesting deeper than 32 levels"},
		"create 33 deep": {"POST", "/v1/nodes", `{"driver":"fake-hardware","extra":` + deepJSON(32) + `}`,
			"nesting deeper than 32 levels"},
		"NUL escape in a value": {"POST", "/v1/nodes", `{"driver":"fake-hardware","extra":{"a":"x\u0000y"}}`,
			`Malformed JSON body: a string at offset 41 contains a NUL character (\u0000), which cannot be stored`},
		"NUL escape in a key": {"PATCH", "/v1/nodes/n1", `[{"op":"add","path":"/extra/x","value":{"a\u0000":1}}]`,
			`NUL character`},
		"raw NUL byte": {"POST", "/v1/nodes", "{\"driver\":\"fake-hardware\",\"extra\":{\"a\":\"x\x00y\"}}",
			`NUL character`},
		"invalid UTF-8": {"POST", "/v1/nodes", "{\"driver\":\"fake-hardware\",\"extra\":{\"a\":\"caf\xe9\"}}",
			"not valid UTF-8"},
		"lone surrogate": {"POST", "/v1/nodes", `{"driver":"fake-hardware","description":"x\ud800y"}`,
			"surrogate"},
		"lone low surrogate": {"PATCH", "/v1/nodes/n1", `[{"op":"add","path":"/extra/x","value":"\udc00"}]`,
			"surrogate"},
		"patch nested deeper by its path": {"PATCH", "/v1/nodes/n1",
			`[{"op":"add","path":"/extra/x","value":` + deepJSON(20) + `},` +
				`{"op":"add","path":"/extra/x/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a/a","value":` + deepJSON(20) + `}]`,
			"Schema error for node: extra is nested deeper than 32 levels"},
	} {
		t.Run(name, func(t *testing.T) {
			r := e.do(tc.method, tc.path, latest, tc.body)
			require.Equal(t, 400, r.status, string(r.body))
			assert.Contains(t, r.fault(t), tc.fault)
		})
	}
	// Within the bounds: 32 levels in all, a surrogate pair, non-ASCII.
	r := e.do("POST", "/v1/nodes", latest, `{"driver":"fake-hardware","name":"ok","extra":`+deepJSON(31)+
		`,"description":"caf\u00e9 \ud83d\ude00 ✓"}`)
	require.Equal(t, 201, r.status, string(r.body))
	assert.Equal(t, "café 😀 ✓", r.json(t)["description"])
	fleetParses(t, e)
}

// A node's dict fields are bounded one by one as Ironic's TEXT columns
// bound them; instance_info (a configdrive) only by the body.
func TestJSONBoundsFieldSize(t *testing.T) { forEachStoreEnv(t, testJSONBoundsFieldSize) }

func testJSONBoundsFieldSize(t *testing.T, e *testEnv) {
	big := map[string]any{"x": strings.Repeat("a", 70<<10)}
	for _, field := range []string{"extra", "properties", "driver_info", "network_data"} {
		r := e.do("POST", "/v1/nodes", latest, map[string]any{"driver": "fake-hardware", field: big})
		require.Equal(t, 400, r.status, field)
		assert.Equal(t, "Schema error for node: "+field+" is 71,688 bytes as JSON; at most 65,536 are allowed", r.fault(t))
	}
	almost := map[string]any{"x": strings.Repeat("a", maxFieldJSON-100)}
	n := e.createNode("near", map[string]any{"extra": almost, "instance_info": map[string]any{"configdrive": strings.Repeat("c", 900<<10)}})
	assert.Len(t, n["extra"].(map[string]any)["x"], maxFieldJSON-100)

	// PATCH is checked on its result: keys added one by one until over.
	e.createNode("grow", nil)
	chunk := strings.Repeat("b", 15000)
	for i := range 4 {
		r := e.do("PATCH", "/v1/nodes/grow", latest, []map[string]any{{"op": "add", "path": fmt.Sprintf("/extra/k%d", i), "value": chunk}})
		require.Equal(t, 200, r.status, string(r.body))
	}
	r := e.do("PATCH", "/v1/nodes/grow", latest, []map[string]any{{"op": "add", "path": "/extra/k4", "value": chunk}})
	require.Equal(t, 400, r.status, string(r.body))
	assert.Regexp(t, `^Schema error for node: extra is 75,\d{3} bytes as JSON; at most 65,536 are allowed$`, r.fault(t))
	assert.Len(t, e.do("GET", "/v1/nodes/grow", latest, nil).json(t)["extra"], 4, "the refused patch changed nothing")

	// RAID's target config is a node dict too.
	r = e.do("PUT", "/v1/nodes/grow/states/raid", latest, map[string]any{"logical_disks": []any{
		map[string]any{"raid_level": "1", "size_gb": 10, "volume_name": strings.Repeat("v", 70<<10)}}})
	require.Equal(t, 400, r.status, string(r.body))
	assert.Contains(t, r.fault(t), "target_raid_config is 71,")
	fleetParses(t, e)
}

// The other resources' dict fields have the same bound, on create and on
// PATCH, through each resource's one write path.
func TestJSONBoundsResourceFields(t *testing.T) {
	e := newEnv(t)
	node := e.createNode("owner", nil)["uuid"].(string)
	big := map[string]any{"x": strings.Repeat("a", 70<<10)}
	const limit = "71,688 bytes as JSON; at most 65,536 are allowed"
	for name, tc := range map[string]struct {
		path  string
		body  map[string]any
		fault string
	}{
		"port extra":   {"/v1/ports", map[string]any{"address": "52:54:00:20:00:01", "node_uuid": node, "extra": big}, "Schema error for port: extra is " + limit},
		"port llc":     {"/v1/ports", map[string]any{"address": "52:54:00:20:00:02", "node_uuid": node, "local_link_connection": big}, "local_link_connection is " + limit},
		"chassis":      {"/v1/chassis", map[string]any{"extra": big}, "Schema error for chassis: extra is " + limit},
		"portgroup":    {"/v1/portgroups", map[string]any{"node_uuid": node, "properties": big}, "properties is " + limit},
		"connector":    {"/v1/volume/connectors", map[string]any{"node_uuid": node, "type": "iqn", "connector_id": "iqn.x", "extra": big}, "extra is " + limit},
		"target":       {"/v1/volume/targets", map[string]any{"node_uuid": node, "volume_type": "iscsi", "volume_id": "v", "boot_index": 0, "properties": big}, "properties is " + limit},
		"allocation":   {"/v1/allocations", map[string]any{"resource_class": "gold", "extra": big}, "Schema error for allocation: extra is " + limit},
		"template":     {"/v1/deploy_templates", map[string]any{"name": "CUSTOM_A", "extra": big, "steps": []any{map[string]any{"interface": "bios", "step": "apply_configuration", "args": map[string]any{}, "priority": 150}}}, "Schema error for template: extra is " + limit},
		"template arg": {"/v1/deploy_templates", map[string]any{"name": "CUSTOM_B", "steps": []any{map[string]any{"interface": "bios", "step": "apply_configuration", "args": big, "priority": 150}}}, "Schema error for template: steps is "},
	} {
		t.Run(name, func(t *testing.T) {
			r := e.do("POST", tc.path, latest, tc.body)
			require.Equal(t, 400, r.status, string(r.body))
			assert.Contains(t, r.fault(t), tc.fault)
		})
	}
	// PATCH: the patched document is checked (a port's extra grown past it).
	r := e.do("POST", "/v1/ports", latest, map[string]any{"address": mac2, "node_uuid": node})
	require.Equal(t, 201, r.status, string(r.body))
	port := r.json(t)["uuid"].(string)
	chunk := strings.Repeat("p", 40000)
	require.Equal(t, 200, e.do("PATCH", "/v1/ports/"+port, latest, []map[string]any{{"op": "add", "path": "/extra/a", "value": chunk}}).status)
	r = e.do("PATCH", "/v1/ports/"+port, latest, []map[string]any{{"op": "add", "path": "/extra/b", "value": chunk}})
	require.Equal(t, 400, r.status, string(r.body))
	assert.Contains(t, r.fault(t), "extra is 80,")
}

var uuidRE = regexp.MustCompile(`(?i)[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}`)

// Finding 6 on discovery (unauthenticated): deep reports, strings cut in a
// character, NUL bytes, and 409s naming the node.
func TestDiscoveryJSONBounds(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind storeKind) {
		e := discoveryEnvOn(t, kind, nil)
		report := func(mac string) string {
			raw, err := json.Marshal(discoveryReport("SN-"+mac, mac))
			require.NoError(t, err)
			return string(raw)
		}
		for name, tc := range map[string]struct{ body, fault string }{
			"3,000 deep": {strings.Replace(report("52:54:00:10:00:01"), `"inventory":{`,
				`"inventory":{"extra":{"x":`+strings.Repeat("[", 3000)+strings.Repeat("]", 3000)+`},`, 1), "nesting deeper than 32 levels"},
			"NUL":           {strings.Replace(report("52:54:00:10:00:02"), "QEMU", `QEMU\u0000`, 1), `NUL character (\u0000)`},
			"invalid UTF-8": {strings.Replace(report("52:54:00:10:00:04"), "QEMU", "QEMU\xff", 1), "not valid UTF-8"},
		} {
			t.Run(name, func(t *testing.T) {
				r := e.do("POST", "/v1/discovery", "", tc.body)
				require.Equal(t, 400, r.status, "%.300s", r.body)
				assert.Contains(t, r.fault(t), tc.fault)
				assert.Empty(t, e.do("GET", "/v1/nodes", latest, nil).json(t)["nodes"], "nothing stored")
			})
		}

		// 63 ASCII bytes and a 2-byte character: the 64-byte clip must not
		// cut the character in half.
		rep := discoveryReport("SN-UTF8", "52:54:00:10:00:03")
		rep.Inventory.SystemVendor.Manufacturer = strings.Repeat("M", 63) + "é"
		rep.Inventory.SystemVendor.ProductName = "Prod"
		r := e.do("POST", "/v1/discovery", "", rep)
		require.Equal(t, 201, r.status, string(r.body))
		id := r.json(t)["node_uuid"].(string)
		t.Run("clip", func(t *testing.T) {
			stored, err := e.st.GetNode(t.Context(), id)
			require.NoError(t, err)
			desc := *stored.Description
			assert.True(t, utf8.ValidString(desc), "stored description %q", desc)
			assert.Contains(t, desc, strings.Repeat("M", 63)+" Prod")
			assert.True(t, utf8.ValidString(historyText(e, id)))
		})

		// Already enrolled (by MAC, by serial): the answer names no node.
		t.Run("409 names no node", func(t *testing.T) {
			for _, again := range []any{discoveryReport("SN-OTHER", "52:54:00:10:00:03"), discoveryReport("SN-UTF8", "52:54:00:10:00:09")} {
				r := e.do("POST", "/v1/discovery", "", again)
				require.Equal(t, 409, r.status, string(r.body))
				assert.NotRegexp(t, uuidRE, string(r.body))
				assert.Equal(t, "This machine is already enrolled (a port has one of its MACs, or a node was discovered with its serial); "+
					"discovery never changes an existing node.", r.fault(t))
			}
			assert.Contains(t, historyText(e, id), "refused", "the details stay in the node's history")
		})
		fleetParses(t, e)
	})
}

// Heartbeats carry agent results the controller stores: the same check.
func TestHeartbeatJSONBounds(t *testing.T) {
	e := newEnv(t)
	id := e.createNode("hb", nil)["uuid"].(string)
	for name, tc := range map[string]struct{ body, fault string }{
		"deep": {`{"agent_token":"t","agent_version":"1","boot_id":"b","fingerprint":"f","command":{"id":"c","name":"inventory","state":"SUCCEEDED","result":` +
			deepJSON(100) + `}}`, "nesting deeper than 32 levels"},
		"NUL":       {`{"agent_token":"t","agent_version":"1\u0000","boot_id":"b","fingerprint":"f"}`, "NUL character"},
		"UTF-8":     {"{\"agent_token\":\"t\",\"agent_version\":\"1\xc3\",\"boot_id\":\"b\",\"fingerprint\":\"f\"}", "not valid UTF-8"},
		"surrogate": {`{"agent_token":"t","agent_version":"\udfff","boot_id":"b","fingerprint":"f"}`, "surrogate"},
	} {
		t.Run(name, func(t *testing.T) {
			r := e.do("POST", "/v1/heartbeat/"+id, latest, tc.body)
			require.Equal(t, 400, r.status, string(r.body))
			assert.Contains(t, r.fault(t), tc.fault)
		})
	}
}

// largeNodeBody is a large node create: a 900 KiB configdrive in
// instance_info and an extra of 1,000 small dicts (60 KiB).
func largeNodeBody(b *testing.B) []byte {
	extra := map[string]any{}
	for i := range 1000 {
		extra[fmt.Sprintf("key-%04d", i)] = map[string]any{"rack": "r1", "slot": float64(i), "tags": []any{"a", "b"}}
	}
	body, err := json.Marshal(map[string]any{"driver": "fake-hardware", "extra": extra,
		"instance_info": map[string]any{"image_source": "http://example.com/img.qcow2", "configdrive": strings.Repeat("H4sI", 900<<10/4)}})
	require.NoError(b, err)
	return body
}

// BenchmarkLargeNodeBody is what the bounds cost a large node create
// beside the decoding the request does anyway; BenchmarkCreateLargeNode is
// the whole request.
func BenchmarkLargeNodeBody(b *testing.B) {
	body := largeNodeBody(b)
	b.Run("check body", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if err := checkBody(body); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("bound fields", func(b *testing.B) {
		m, err := decodeObject(body)
		require.NoError(b, err)
		for b.Loop() {
			for k, max := range map[string]int{"extra": maxFieldJSON, "instance_info": maxBody} {
				if err := boundField("node", k, m[k], max); err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("decode body", func(b *testing.B) {
		b.SetBytes(int64(len(body)))
		for b.Loop() {
			if _, err := decodeObject(body); err != nil {
				b.Fatal(err)
			}
		}
	})
}

func BenchmarkCreateLargeNode(b *testing.B) {
	e := newEnv(b)
	body := string(largeNodeBody(b))
	cpu0 := processCPU()
	for b.Loop() {
		require.Equal(b, 201, e.do("POST", "/v1/nodes", latest, body).status)
	}
	// CPU per request (server and client): on a shared machine, wall
	// time says more about the neighbours.
	b.ReportMetric(float64((processCPU()-cpu0).Microseconds())/1000/float64(b.N), "cpu-ms/op")
}
