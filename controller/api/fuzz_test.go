package api

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"net/http/httptest"
	"net/url"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// FuzzPatch feeds arbitrary JSON patch documents to the decoder and applier:
// they must either be refused with a client error or apply cleanly, never
// panic, and the document must stay JSON-encodable.
func FuzzPatch(f *testing.F) {
	for _, seed := range []string{
		`[{"op":"add","path":"/properties/cpus","value":8}]`,
		`[{"op":"remove","path":"/driver_info/x"}]`,
		`[{"op":"replace","path":"/extra/a/b/c","value":{"d":[1,2]}}]`,
		`[{"op":"move","from":"/a","path":"/b"}]`,
		`[{"op":"add","path":"/properties/0","value":null}]`,
		`[{"op":"add","path":"/properties/list/-","value":2}]`,
		`[{"op":"add","path":"/properties/list/1","value":2},{"op":"remove","path":"/properties/list/0"}]`,
		`[{"op":"replace","path":"/properties/list/0/x","value":2}]`,
		`{}`, `[]`, `[1]`, `[{"op":1}]`, `null`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		ops, err := decodePatch(body)
		if err != nil {
			assertClientError(t, err)
			return
		}
		doc := map[string]any{"properties": map[string]any{"cpus": 4.0, "list": []any{1.0}}, "extra": map[string]any{},
			"driver_info": nil, "name": "n"}
		if err := applyPatch(doc, ops); err != nil {
			assertClientError(t, err)
			return
		}
		if _, err := json.Marshal(doc); err != nil {
			t.Fatalf("patched document no longer encodes: %v", err)
		}
	})
}

// FuzzDeployTemplateBody feeds arbitrary bodies to the deploy template
// parser: a client error or a template whose every step is valid.
func FuzzDeployTemplateBody(f *testing.F) {
	for _, seed := range []string{
		`{"name":"CUSTOM_A","steps":[{"interface":"bios","step":"apply_configuration","args":{"settings":[]},"priority":150}]}`,
		`{"name":"CUSTOM_A","steps":[{"interface":"deploy","step":"x","args":{},"priority":"7"}],"uuid":null,"extra":null,"description":"d"}`,
		`{"name":"x","steps":[]}`, `{"name":5}`, `{"steps":[1]}`, `[]`, `null`, `{"name":"CUSTOM_A","steps":[{}]}`,
	} {
		f.Add([]byte(seed))
	}
	s := &Server{traitNames: newTraitNames()}
	f.Fuzz(func(t *testing.T, body []byte) {
		doc, err := decodeObject(body)
		if err != nil {
			assertClientError(t, err)
			return
		}
		var tpl store.DeployTemplate
		if err := s.parseTemplate(doc, &tpl); err != nil {
			assertClientError(t, err)
			return
		}
		require.NotEmpty(t, tpl.Steps)
		for _, st := range tpl.Steps {
			require.GreaterOrEqual(t, st.Priority, 0)
			require.NoError(t, protocol.Step{Interface: st.Interface, Step: st.Step, Priority: st.Priority}.Validate())
		}
	})
}

// FuzzRunbookBody feeds arbitrary bodies to the runbook parser: a client
// error or a runbook whose every step is valid; and arbitrary patches to
// a runbook: a client error or a runbook that is still valid.
func FuzzRunbookBody(f *testing.F) {
	for _, seed := range []string{
		`{"name":"CUSTOM_A","steps":[{"interface":"bios","step":"apply_configuration","args":{"settings":[]},"order":1}]}`,
		`{"name":"CUSTOM_A","steps":[{"interface":"deploy","step":"x","order":"7"}],"uuid":null,"extra":null,"public":true,"disable_ramdisk":false}`,
		`{"name":"x","steps":[]}`, `{"name":5}`, `{"steps":[1]}`, `[]`, `null`, `{"name":"CUSTOM_A","steps":[{}]}`,
		`{"name":"CUSTOM_A","steps":[{"interface":"raid","step":"s","order":-1},{"interface":"raid","step":"s","order":1.5}],"owner":"p"}`,
	} {
		f.Add([]byte(seed), []byte(`[{"op":"replace","path":"/steps/0/order","value":3}]`))
	}
	f.Add([]byte(`{}`), []byte(`[{"op":"add","path":"/owner","value":"p"},{"op":"remove","path":"/name"}]`))
	f.Add([]byte(`{}`), []byte(`[{"op":"add","path":"/steps/-","value":{"interface":"bios","step":"x","order":0,"y":1}}]`))
	f.Add([]byte(`{}`), []byte(`[{"op":"replace","path":"/steps","value":[5]},{"op":"replace","path":"/public","value":true}]`))
	s := &Server{traitNames: newTraitNames()}
	r := httptest.NewRequest("POST", "/v1/runbooks", nil)
	valid := func(t *testing.T, rb *store.Runbook) {
		require.NotEmpty(t, rb.Steps)
		require.NotEmpty(t, rb.Name)
		for _, st := range rb.Steps {
			require.GreaterOrEqual(t, st.Order, 0)
			require.Contains(t, runbookStepInterfaces, st.Interface)
			require.NotEmpty(t, st.Step)
		}
		require.False(t, rb.Public && rb.Owner != nil, "a public runbook has no owner")
	}
	base := &store.Runbook{UUID: "5f1e5c2e-2f0e-4c55-9e33-1df0d1a1c001", Name: "CUSTOM_BASE",
		Steps: []store.RunbookStep{{Interface: "bios", Step: "factory_reset", Order: 1}}}
	f.Fuzz(func(t *testing.T, body, patch []byte) {
		if doc, err := decodeObject(body); err != nil {
			assertClientError(t, err)
		} else if rb, err := s.createRunbook(r, doc); err != nil {
			assertClientError(t, err)
		} else {
			valid(t, rb)
		}
		ops, err := decodePatch(patch)
		if err != nil {
			assertClientError(t, err)
			return
		}
		if err := checkPatchable(ops, runbooks.patchable); err != nil {
			assertClientError(t, err)
			return
		}
		next, err := s.patchRunbook(ops, base)
		if err != nil {
			assertClientError(t, err)
			return
		}
		valid(t, next)
		require.Equal(t, "CUSTOM_BASE", base.Name, "the runbook read is not changed")
	})
}

// FuzzNodeListQuery drives the list parser with arbitrary query strings.
func FuzzNodeListQuery(f *testing.F) {
	for _, seed := range []string{"limit=2&marker=x", "maintenance=True&retired=0", "fields=uuid,name",
		"sort_key=name&sort_dir=desc", "limit=-1", "provision_state=clean%20wait", "detail=maybe", "%zz",
		"include_children=True", "include_children=maybe&parent_node=x", "parent_node=&include_children=0", "parent_node=%00"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		r := httptest.NewRequest("GET", "/v1/nodes", nil)
		r.URL.RawQuery = raw
		r = r.WithContext(context.WithValue(r.Context(), ctxVersion, parentNodeVersion+len(raw)%2-1))
		q, err := parseQuery(r, nodeListParams...)
		if err != nil {
			assertClientError(t, err)
			return
		}
		if _, err := q.page([]string{"id", "name"}); err != nil {
			assertClientError(t, err)
		}
		for _, k := range []string{"maintenance", "retired", "associated", "detail"} {
			if _, err := q.boolean(k); err != nil {
				assertClientError(t, err)
			}
		}
		_ = fieldsArg(q)
		if err := childParams(r.Context(), q); err != nil {
			assertClientError(t, err)
		}
		var nf store.NodeFilter
		if err := childFilter(q, &nf); err != nil {
			assertClientError(t, err)
		} else if nf.ParentNode != nil && nf.IsChild != nil {
			t.Fatalf("both parent_node and no-parent filters set: %q", raw)
		}
	})
}

func assertClientError(t *testing.T, err error) {
	t.Helper()
	ae, ok := err.(*apiError)
	if !ok || ae.status < 400 || ae.status >= 500 {
		t.Fatalf("want a 4xx apiError, got %T %v", err, err)
	}
}

// FuzzWebobQuery: any query string is either refused with a client error
// or parsed into valid UTF-8 names and values whose re-encoding parses
// back, by Go and by us, to the same parameters.
func FuzzWebobQuery(f *testing.F) {
	for _, seed := range []string{"limit=-5;", "a=1;b=2&c", ";;&", "x=%zz&y=%2B+z", "k=%ff", "=v", "a=b=c", "%"} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, raw string) {
		v, err := webobQuery(raw)
		if err != nil {
			assertClientError(t, err)
			return
		}
		enc := v.Encode()
		back, err := url.ParseQuery(enc)
		if err != nil {
			t.Fatalf("re-encoded %q does not parse: %v", enc, err)
		}
		again, err := webobQuery(enc)
		if err != nil {
			t.Fatalf("re-encoded %q refused: %v", enc, err)
		}
		for k, vals := range v {
			if !reflect.DeepEqual(back[k], vals) || !reflect.DeepEqual(again[k], vals) {
				t.Fatalf("%q: %q became %q / %q", raw, vals, back[k], again[k])
			}
		}
	})
}

// agentFuzzEnv is a controller with one node in clean wait whose agent has
// looked up (so heartbeats reach the token check), for the agent endpoint
// fuzzers; it returns the env and the node's UUID.
func agentFuzzEnv(f *testing.F) (*testEnv, string) {
	e := newEnvWith(f, agentConfig(), ":memory:")
	id := e.agentNode("fz", nil)
	require.Equal(f, 202, e.provision("fz", "provide", nil).status)
	e.waitState("fz", "clean wait")
	return e, id
}

// FuzzLookupQuery sends arbitrary lookup queries from a stranger: every
// answer is a client error or a refusal (the agent's token was issued or
// the nonce is missing), never a 5xx and never a token.
func FuzzLookupQuery(f *testing.F) {
	for _, seed := range []string{"addresses=" + mac1 + "&boot_id=b", "node_uuid=x", "addresses=,,,", "addresses=zz:zz",
		"boot_id=&nonce=", "addresses=" + mac1 + "&nonce=%00", "%zz", "addresses=" + strings.Repeat(mac1+",", 50)} {
		f.Add(seed)
	}
	e, _ := agentFuzzEnv(f)
	first := e.do("GET", "/v1/lookup?addresses="+mac1+"&boot_id=owner", latest, nil)
	require.Equal(f, 200, first.status, string(first.body))
	f.Fuzz(func(t *testing.T, raw string) {
		r := strangerRequest(e, "GET", "/v1/lookup", raw, nil)
		if r.status >= 500 || r.status < 400 {
			t.Fatalf("lookup?%s: HTTP %d: %s", raw, r.status, r.body)
		}
		if strings.Contains(string(r.body), "agent_token") {
			t.Fatalf("lookup?%s answered a token: %s", raw, r.body)
		}
	})
}

// FuzzHeartbeatBody posts arbitrary heartbeat bodies: a client error or a
// refusal, never a 5xx, never a command for an unauthenticated caller.
func FuzzHeartbeatBody(f *testing.F) {
	for _, seed := range []string{
		`{"agent_token":"x","agent_version":"1","boot_id":"b","fingerprint":"f"}`,
		`{"agent_token":"x","command":{"id":"c","state":"SUCCEEDED","result":{"a":1}}}`,
		`{"agent_token":"x","steps":{"fingerprint":"f","clean":[{"interface":"deploy","step":"s","priority":1e308}]}}`,
		`{"agent_token":"x","boot_timings":[{"phase":"kernel","seconds":-1}]}`,
		`{"callback_url":"http://x:9999"}`, `{"agent_token":`, `[]`, `null`, ``, "\x00",
	} {
		f.Add([]byte(seed))
	}
	e, id := agentFuzzEnv(f)
	require.Equal(f, 200, e.do("GET", "/v1/lookup?addresses="+mac1+"&boot_id=owner", latest, nil).status)
	f.Fuzz(func(t *testing.T, body []byte) {
		r := strangerRequest(e, "POST", "/v1/heartbeat/"+id, "", body)
		if r.status >= 500 || r.status < 400 {
			t.Fatalf("heartbeat %q: HTTP %d: %s", body, r.status, r.body)
		}
	})
}

// strangerRequest serves one request from another machine straight
// through the handler (any query bytes, which an HTTP client would refuse
// to send, reach the parsers).
func strangerRequest(e *testEnv, method, path, rawQuery string, body []byte) resp {
	req := httptest.NewRequest(method, path, bytes.NewReader(body))
	req.URL.RawQuery = rawQuery
	req.RemoteAddr = "192.0.2.66:40000"
	req.Header.Set(versionHeader, latest)
	rec := httptest.NewRecorder()
	e.srv.Config.Handler.ServeHTTP(rec, req)
	return resp{status: rec.Code, header: rec.Header(), body: rec.Body.Bytes()}
}

// FuzzDiscoveryReport feeds arbitrary bodies to the discovery report
// parser (unauthenticated input): a client error or a report with at least
// one valid, unique unicast MAC, never a panic.
func FuzzDiscoveryReport(f *testing.F) {
	for _, seed := range []string{
		`{"boot_id":"b","inventory":{"interfaces":[{"name":"eth0","mac_address":"52:54:00:aa:00:01"}],"system_vendor":{"serial_number":"S"}}}`,
		`{"inventory":{"interfaces":[{"mac_address":"01:00:5e:00:00:01"},{"mac_address":"52-54-00-AA-00-01"}]}}`,
		`{"inventory":{"interfaces":[{"mac_address":"00:00:00:00:00:00"}]}}`,
		`{"inventory":{"interfaces":[{"mac_address":"52:54:00:aa:00:01:02:03"}]}}`,
		`{"inventory":{"interfaces":null,"cpu":{"count":-1}}}`, `{}`, `[]`, `null`, `{"inventory":1}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		_, macs, err := parseDiscovery(body)
		if err != nil {
			assertClientError(t, err)
			return
		}
		require.NotEmpty(t, macs)
		seen := map[string]bool{}
		for _, m := range macs {
			hw, err := net.ParseMAC(m)
			require.NoError(t, err)
			require.Len(t, hw, 6)
			require.Zero(t, hw[0]&1, "multicast MAC %s accepted", m)
			require.False(t, seen[m], "MAC %s twice", m)
			seen[m] = true
		}
	})
}

// FuzzVIFBody feeds arbitrary bodies to the VIF attach parser: a client
// error or a VIF id that is a UUID or a logical name, never a panic.
func FuzzVIFBody(f *testing.F) {
	for _, seed := range []string{`{"id":"vif-1"}`, `{"id":"5e7f1c2a-9a8b-4c3d-8e2f-0a1b2c3d4e5f","port_uuid":"x"}`,
		`{"id":5}`, `{"id":null}`, `{"port_uuid":"a","portgroup_uuid":"b","id":"c"}`, `[]`, `null`, ``, `{"id":"a b"}`} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		id, _, err := decodeVIF(body)
		if err != nil {
			assertClientError(t, err)
			return
		}
		if uuidOrName("id", id) != nil {
			t.Fatalf("accepted VIF id %q", id)
		}
	})
}

// FuzzAllocationBody posts arbitrary allocation bodies: each is created
// (201) or refused with a client error, never a server error.
func FuzzAllocationBody(f *testing.F) {
	for _, seed := range []string{`{"resource_class":"gold"}`, `{"resource_class":"gold","traits":["CUSTOM_A"],"name":"a1"}`,
		`{"node":"x"}`, `{"resource_class":"gold","candidate_nodes":["n1",""]}`, `{"uuid":"x","resource_class":"r"}`,
		`{"resource_class":null,"extra":{"a":[1]}}`, `{"owner":"p","resource_class":"r"}`, `[]`, `null`, `{`} {
		f.Add([]byte(seed))
	}
	e := newEnv(f)
	f.Fuzz(func(t *testing.T, body []byte) {
		r := strangerRequest(e, "POST", "/v1/allocations", "", body)
		if r.status != 201 && (r.status < 400 || r.status >= 500) {
			t.Fatalf("allocation %q: HTTP %d: %s", body, r.status, r.body)
		}
	})
}

// FuzzResourceBody feeds arbitrary JSON bodies to the resource schemas
// (ports, port groups, chassis, volume connectors and targets): a body is
// either accepted or refused with a client error, never a panic.
func FuzzResourceBody(f *testing.F) {
	for _, seed := range []string{
		`{"address":"52:54:00:00:00:01","node_uuid":"7c1d0a6b-0000-4000-8000-000000000000"}`,
		`{"address":1,"node_uuid":null,"zz":[1,{"a":"b"}]}`, `{"pxe_enabled":"maybe","physical_network":"` + strings.Repeat("x", 70) + `"}`,
		`{"description":"d","extra":{"a":1}}`, `{"type":"iqn","connector_id":"iqn.x","node_uuid":"x"}`,
		`{"boot_index":1.5,"volume_type":"iscsi","volume_id":"v","node_uuid":"x","properties":[]}`,
		`{}`, `[]`, `null`, `"x"`,
	} {
		f.Add([]byte(seed))
	}
	schemas := map[string]schema{"port": portWrites.schema, "portgroup": portgroupWrites.schema, "chassis": chassisWrites.schema,
		"connector": connectorWrites.schema, "target": targetWrites.schema}
	f.Fuzz(func(t *testing.T, body []byte) {
		doc, err := decodeObject(body)
		if err != nil {
			assertClientError(t, err)
			return
		}
		for name, sc := range schemas {
			if err := sc.validate(name, doc); err != nil {
				assertClientError(t, err)
			}
		}
	})
}
