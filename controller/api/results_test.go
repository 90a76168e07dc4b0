package api

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/simagent"
)

func resultsOf(t *testing.T, e *testEnv, path string) ([]map[string]any, string) {
	t.Helper()
	r := e.do("GET", path, latest, nil)
	require.Equal(t, http.StatusOK, r.status, r.body)
	body := r.json(t)
	var out []map[string]any
	for _, v := range body["results"].([]any) {
		out = append(out, v.(map[string]any))
	}
	next, _ := body["next"].(string)
	return out, next
}

// TestStepResultsAPI: an agent cleaning keeps each step's full result
// (the agent's per-device document, summary, times, agent version),
// newest first, paged with limit and marker.
func TestStepResultsAPI(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	id := e.agentNode("res1", nil)
	a := simagent.New(e.srv.URL, mac1)
	a.Outcomes["deploy.erase_devices"] = simagent.Outcome{Summary: "/dev/sda erased by overwrite, verified",
		Result: map[string]any{"devices": []any{map[string]any{"plan": map[string]any{"device": "/dev/sda", "size": 1 << 20},
			"status": "erased", "method": "overwrite", "bytes": 1 << 20}}}}
	require.Equal(t, 202, e.provision("res1", "provide", nil).status)
	e.drive(a, "res1", "available", nil)

	all, next := resultsOf(t, e, "/v1/nodes/res1/steps/results")
	assert.Empty(t, next, "one page")
	require.Len(t, all, 2)
	erase, meta := all[0], all[1]
	assert.Equal(t, "deploy.erase_devices", erase["step"])
	assert.Equal(t, "deploy.erase_devices_metadata", meta["step"])
	assert.Equal(t, "succeeded", erase["outcome"])
	assert.Equal(t, "clean", erase["kind"])
	assert.Equal(t, id, erase["node_uuid"])
	assert.Equal(t, a.Version, erase["agent_version"])
	assert.Equal(t, "/dev/sda erased by overwrite, verified", erase["summary"])
	dev := erase["result"].(map[string]any)["devices"].([]any)[0].(map[string]any)
	assert.Equal(t, "overwrite", dev["method"])
	assert.EqualValues(t, 1<<20, dev["bytes"])
	assert.NotEmpty(t, erase["started_at"])
	assert.GreaterOrEqual(t, erase["finished_at"], erase["started_at"])
	assert.GreaterOrEqual(t, erase["started_at"], meta["finished_at"])

	page, next := resultsOf(t, e, "/v1/nodes/"+id+"/steps/results?limit=1")
	require.Len(t, page, 1)
	assert.Equal(t, erase["uuid"], page[0]["uuid"])
	require.NotEmpty(t, next)
	u, err := url.Parse(next)
	require.NoError(t, err)
	page, _ = resultsOf(t, e, u.Path+"?"+u.RawQuery)
	require.Len(t, page, 1)
	assert.Equal(t, meta["uuid"], page[0]["uuid"])

	for q, want := range map[string]int{"?marker=nope": 400, "?limit=0": 400, "?limit=x": 400, "?bogus=1": 400,
		"?marker=" + uuid.NewString(): 404} {
		r := e.do("GET", "/v1/nodes/res1/steps/results"+q, latest, nil)
		assert.Equal(t, want, r.status, "%s: %s", q, r.body)
		assert.Contains(t, string(r.body), "error_message", q)
	}
	assert.Equal(t, 404, e.do("GET", "/v1/nodes/nosuch/steps/results", latest, nil).status)
}

// TestRebootRequestedStepHasAResult: a step that asks for a reboot ends
// with its result and its summary in the "finished" event, like any other.
func TestRebootRequestedStepHasAResult(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	e.agentNode("rb2", nil)
	a := simagent.New(e.srv.URL, mac1)
	a.Clean[0].RebootRequested = true
	a.Outcomes[a.Clean[0].Key()] = simagent.Outcome{Summary: "firmware staged", Result: map[string]any{"staged": true}}
	require.Equal(t, 202, e.provision("rb2", "provide", nil).status)
	rebooted := false
	e.drive(a, "rb2", "available", func(n map[string]any) {
		aw, _ := n["driver_internal_info"].(map[string]any)["agent_await"].(map[string]any)
		if aw["reason"] == "reboot" && !rebooted {
			a.Boot()
			rebooted = true
		}
	})
	require.True(t, rebooted)
	all, _ := resultsOf(t, e, "/v1/nodes/rb2/steps/results")
	var found map[string]any
	for _, r := range all {
		if r["step"] == a.Clean[0].Key() {
			require.Nil(t, found, "one result for the step")
			found = r
		}
	}
	require.NotNil(t, found)
	assert.Equal(t, true, found["reboot_requested"])
	assert.Equal(t, "succeeded", found["outcome"])
	assert.Equal(t, map[string]any{"staged": true}, found["result"])
	assert.Contains(t, historyText(e, "rb2"), "clean step "+a.Clean[0].Key()+" finished: firmware staged")
	assert.False(t, strings.Contains(historyText(e, "rb2"), "finished: \n"))
}
