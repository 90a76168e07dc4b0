package api

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

func intp(i int) *int { return &i }

// seedBIOS creates node name with two settings, one from a registry.
func seedBIOS(t *testing.T, e *testEnv, name string) string {
	t.Helper()
	id := e.createNode(name, nil)["uuid"].(string)
	no, yes := false, true
	require.NoError(t, e.st.ReplaceBIOSSettings(context.Background(), id, []store.BIOSSetting{
		{Name: "ProcVirtualization", Value: "Enabled", AttributeType: "Enumeration", AllowableValues: []string{"Enabled", "Disabled"},
			ReadOnly: &no, ResetRequired: &yes, Unique: &no},
		{Name: "NumCores", Value: "8", AttributeType: "Integer", LowerBound: intp(1), UpperBound: intp(64)},
	}))
	return id
}

var registryKeys = []string{"attribute_type", "allowable_values", "lower_bound", "max_length", "min_length",
	"read_only", "reset_required", "unique", "upper_bound"}

func keysOf(m map[string]any) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestBIOSList(t *testing.T) {
	e := newEnv(t)
	id := seedBIOS(t, e, "b1")

	assert.Equal(t, http.StatusNotFound, e.do("GET", "/v1/nodes/b1/bios", "1.39", nil).status, "no /bios below 1.40, as in Ironic")

	r := e.do("GET", "/v1/nodes/b1/bios", "1.40", nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var body struct {
		BIOS []map[string]any `json:"bios"`
	}
	require.NoError(t, json.Unmarshal(r.body, &body))
	require.Len(t, body.BIOS, 2)
	s := body.BIOS[0]
	assert.Equal(t, "NumCores", s["name"], "by name")
	assert.Equal(t, "8", s["value"])
	assert.ElementsMatch(t, []string{"name", "value", "created_at", "updated_at", "links"}, keysOf(s))
	assert.Nil(t, s["updated_at"])
	_, err := time.Parse("2006-01-02T15:04:05.000000-07:00", s["created_at"].(string))
	assert.NoError(t, err)
	links := s["links"].([]any)
	assert.Equal(t, e.srv.URL+"/v1/nodes/b1/bios/NumCores", links[0].(map[string]any)["href"], "under the node as named")
	assert.Equal(t, "self", links[0].(map[string]any)["rel"])
	assert.Equal(t, e.srv.URL+"/nodes/b1/bios/NumCores", links[1].(map[string]any)["href"])
	assert.Equal(t, "bookmark", links[1].(map[string]any)["rel"])

	// 1.74: still name and value by default; detail adds the registry
	r = e.do("GET", "/v1/nodes/"+id+"/bios", latest, nil)
	body.BIOS = nil // Unmarshal would merge into the maps already there
	require.NoError(t, json.Unmarshal(r.body, &body))
	assert.ElementsMatch(t, []string{"name", "value", "created_at", "updated_at", "links"}, keysOf(body.BIOS[0]))
	r = e.do("GET", "/v1/nodes/"+id+"/bios?detail=True", latest, nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	body.BIOS = nil // Unmarshal would merge into the maps already there
	require.NoError(t, json.Unmarshal(r.body, &body))
	want := append([]string{"name", "value", "created_at", "updated_at", "links"}, registryKeys...)
	assert.ElementsMatch(t, want, keysOf(body.BIOS[0]))
	cores, virt := body.BIOS[0], body.BIOS[1]
	assert.Equal(t, "Integer", cores["attribute_type"])
	assert.Equal(t, float64(1), cores["lower_bound"])
	assert.Equal(t, float64(64), cores["upper_bound"])
	assert.Nil(t, cores["read_only"])
	assert.Equal(t, []any{}, cores["allowable_values"], "none is [] as in Ironic")
	assert.Equal(t, []any{"Enabled", "Disabled"}, virt["allowable_values"])
	assert.Equal(t, true, virt["reset_required"])
	assert.Equal(t, false, virt["read_only"])
	assert.Nil(t, virt["lower_bound"])

	// fields picks; times and links are always there (object_to_dict)
	r = e.do("GET", "/v1/nodes/b1/bios?fields=name,upper_bound", latest, nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	body.BIOS = nil // Unmarshal would merge into the maps already there
	require.NoError(t, json.Unmarshal(r.body, &body))
	assert.ElementsMatch(t, []string{"name", "upper_bound", "created_at", "updated_at", "links"}, keysOf(body.BIOS[0]))

	// a node without settings lists none
	e.createNode("bare", nil)
	r = e.do("GET", "/v1/nodes/bare/bios", latest, nil)
	assert.JSONEq(t, `{"bios":[]}`, string(r.body))
}

func TestBIOSListRefusals(t *testing.T) {
	e := newEnv(t)
	seedBIOS(t, e, "b1")
	for _, c := range []struct {
		path, ver string
		status    int
		fault     string
	}{
		{"/v1/nodes/b1/bios?detail=True", "1.73", 400, "Invalid query parameter ?detail=True received."},
		{"/v1/nodes/b1/bios?fields=name", "1.73", 400, "Invalid query parameter ?fields=name received."},
		{"/v1/nodes/b1/bios?detail=True&fields=name", latest, 400, "Can not specify ?detail=True and fields in the same request."},
		{"/v1/nodes/b1/bios?detail=maybe", latest, 400, `Invalid value for detail: "maybe" is not a boolean`},
		{"/v1/nodes/b1/bios?fields=node_id", latest, 400, `Field(s) "node_id" are not valid`},
		{"/v1/nodes/b1/bios?limit=1", latest, 400, "Unknown argument(s): limit"},
		{"/v1/nodes/nope/bios", latest, 404, "Node nope could not be found."},
	} {
		r := e.do("GET", c.path, c.ver, nil)
		assert.Equal(t, c.status, r.status, "%s at %s: %s", c.path, c.ver, r.body)
		assert.Equal(t, c.fault, r.fault(t), c.path)
	}
	// detail=False with fields is not both
	assert.Equal(t, http.StatusOK, e.do("GET", "/v1/nodes/b1/bios?detail=False&fields=name", latest, nil).status)
}

func TestBIOSSetting(t *testing.T) {
	e := newEnv(t)
	id := seedBIOS(t, e, "b1")

	assert.Equal(t, http.StatusNotFound, e.do("GET", "/v1/nodes/b1/bios/NumCores", "1.39", nil).status)
	r := e.do("GET", "/v1/nodes/b1/bios/NumCores", "1.40", nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var body map[string]map[string]any
	body = nil
	require.NoError(t, json.Unmarshal(r.body, &body))
	require.Contains(t, body, "NumCores", "Ironic answers {name: setting}")
	s := body["NumCores"]
	assert.ElementsMatch(t, []string{"name", "value", "created_at", "updated_at", "links"}, keysOf(s))
	assert.Equal(t, "8", s["value"])
	assert.Equal(t, e.srv.URL+"/v1/nodes/"+id+"/bios/NumCores", s["links"].([]any)[0].(map[string]any)["href"], "under the node's UUID")

	r = e.do("GET", "/v1/nodes/b1/bios/ProcVirtualization", latest, nil)
	body = nil
	require.NoError(t, json.Unmarshal(r.body, &body))
	s = body["ProcVirtualization"]
	assert.ElementsMatch(t, append([]string{"name", "value", "created_at", "updated_at", "links"}, registryKeys...), keysOf(s),
		"from 1.74 a setting shows its registry")
	assert.Equal(t, "Enumeration", s["attribute_type"])

	r = e.do("GET", "/v1/nodes/b1/bios/NoSuch", latest, nil)
	assert.Equal(t, http.StatusNotFound, r.status)
	assert.Equal(t, "Node "+id+" doesn't have a BIOS setting 'NoSuch'", r.fault(t))
	r = e.do("GET", "/v1/nodes/b1/bios/bad%20name", latest, nil)
	assert.Equal(t, http.StatusBadRequest, r.status)
	assert.Equal(t, "Expected name for setting_name: bad name", r.fault(t))
	r = e.do("GET", "/v1/nodes/nope/bios/NumCores", latest, nil)
	assert.Equal(t, http.StatusNotFound, r.status)
	assert.Equal(t, "Node nope could not be found.", r.fault(t))
	assert.Equal(t, http.StatusBadRequest, e.do("GET", "/v1/nodes/b1/bios/NumCores?fields=name", latest, nil).status)
}

// TestFirmwareAt186: GET /v1/nodes/{node}/firmware answers Ironic's shape
// from 1.86 (below, 404: see TestNodeSubresourcesBelowTheirVersion).
func TestFirmwareAt186(t *testing.T) {
	e := newEnv(t)
	id := e.createNode("fw", nil)["uuid"].(string)
	flashed := "1.2"
	require.NoError(t, e.st.ReplaceFirmwareComponents(context.Background(), id, []store.FirmwareComponent{
		{Component: "bmc", CurrentVersion: "1.0"}, {Component: "bios", CurrentVersion: "2.1"}}))
	require.NoError(t, e.st.ReplaceFirmwareComponents(context.Background(), id, []store.FirmwareComponent{
		{Component: "bmc", CurrentVersion: "1.2", LastVersionFlashed: &flashed}, {Component: "bios", CurrentVersion: "2.1"}}))
	assert.Equal(t, http.StatusNotFound, e.do("GET", "/v1/nodes/fw/firmware", "1.85", nil).status)

	at := func(query string) resp { return e.do("GET", "/v1/nodes/fw/firmware"+query, "1.86", nil) }
	r := at("")
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var body struct {
		Firmware []map[string]any `json:"firmware"`
	}
	require.NoError(t, json.Unmarshal(r.body, &body))
	require.Len(t, body.Firmware, 2)
	bios, bmc := body.Firmware[0], body.Firmware[1]
	assert.ElementsMatch(t, []string{"component", "initial_version", "current_version", "last_version_flashed", "created_at", "updated_at"},
		keysOf(bmc), "no links, as in Ironic")
	assert.Equal(t, "bmc", bmc["component"])
	assert.Equal(t, "1.0", bmc["initial_version"])
	assert.Equal(t, "1.2", bmc["current_version"])
	assert.Equal(t, "1.2", bmc["last_version_flashed"])
	assert.NotNil(t, bmc["updated_at"])
	assert.Equal(t, "bios", bios["component"])
	assert.Nil(t, bios["last_version_flashed"])
	assert.Nil(t, bios["updated_at"])

	r = at("?fields=component")
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	body.Firmware = nil
	require.NoError(t, json.Unmarshal(r.body, &body))
	assert.ElementsMatch(t, []string{"component", "created_at", "updated_at"}, keysOf(body.Firmware[0]))
	assert.Equal(t, http.StatusBadRequest, at("?fields=bogus").status)
	assert.Equal(t, http.StatusBadRequest, at("?fields=component&detail=true").status)
}

// FuzzBIOSQuery feeds arbitrary query strings, at every version the BIOS
// list serves, through the list's query handling: a client error in
// Ironic's format, or fields the view knows, never a panic.
func FuzzBIOSQuery(f *testing.F) {
	for _, seed := range []string{"", "detail=True", "fields=name,value", "detail=true&fields=name", "fields=", "fields=,,",
		"detail=", "detail=maybe", "fields=node_id", "limit=1", "detail=1;fields=x", "%ff=1", "fields=%zz"} {
		f.Add(seed, uint8(34))
	}
	b := &store.BIOSSetting{Name: "X", Value: "1", CreatedAt: time.Now()}
	f.Fuzz(func(t *testing.T, raw string, v uint8) {
		vals, err := webobQuery(raw)
		if err != nil {
			assertClientError(t, err)
			return
		}
		r := httptest.NewRequest("GET", "/v1/nodes/n/bios?"+vals.Encode(), nil)
		r = r.WithContext(context.WithValue(r.Context(), ctxVersion, biosVersion+int(v)%(maxMinor-biosVersion+1)))
		q, err := parseQuery(r, "detail", "fields")
		if err != nil {
			assertClientError(t, err)
			return
		}
		detail, err := q.boolean("detail")
		if err != nil {
			assertClientError(t, err)
			return
		}
		fields, err := biosListFields(r, q, detail)
		if err != nil {
			assertClientError(t, err)
			return
		}
		for _, f := range fields {
			require.Contains(t, biosFieldMin, f)
		}
		_, err = json.Marshal(biosView("http://x", "n", b, fields))
		require.NoError(t, err)
	})
}

// TestBIOSPasswordValueNull: Redfish reads a password as null and Ironic
// keeps the null (compat_bios_test.go compares the two against one BMC);
// an empty string of another type stays "".
func TestBIOSPasswordValueNull(t *testing.T) {
	e := newEnv(t)
	id := e.createNode("b1", nil)["uuid"].(string)
	require.NoError(t, e.st.ReplaceBIOSSettings(context.Background(), id, []store.BIOSSetting{
		{Name: "SetupPassword", Value: "", AttributeType: "Password"},
		{Name: "AssetTag", Value: "", AttributeType: "String"},
	}))
	for _, v := range []string{"1.40", latest} {
		r := e.do("GET", "/v1/nodes/b1/bios", v, nil)
		require.Equal(t, http.StatusOK, r.status, string(r.body))
		var body struct {
			BIOS []map[string]any `json:"bios"`
		}
		require.NoError(t, json.Unmarshal(r.body, &body))
		require.Len(t, body.BIOS, 2)
		assert.Equal(t, "AssetTag", body.BIOS[0]["name"])
		assert.Equal(t, "", body.BIOS[0]["value"], v)
		assert.Contains(t, body.BIOS[1], "value")
		assert.Nil(t, body.BIOS[1]["value"], v)
	}
}
