package ipa

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestServerRootVersionAndStatus(t *testing.T) {
	r := newRig(t)
	u := r.http.URL
	version := map[string]any{"id": "v1", "links": []any{
		map[string]any{"href": u + "/v1", "rel": "self"},
		map[string]any{"href": "https://docs.openstack.org/ironic-python-agent/", "rel": "describedby", "type": "text/html"},
	}}

	code, body := r.do(http.MethodGet, "/", nil)
	assert.Equal(t, 200, code)
	assert.Equal(t, map[string]any{
		"name":            "OpenStack Ironic Python Agent API",
		"description":     "Ironic Python Agent is a provisioning agent for OpenStack Ironic",
		"versions":        []any{version},
		"default_version": version,
	}, body)

	code, body = r.do(http.MethodGet, "/v1/", nil)
	assert.Equal(t, 200, code)
	assert.Equal(t, []any{map[string]any{"href": u + "/v1/commands", "rel": "self"}, map[string]any{"href": u + "/commands", "rel": "bookmark"}}, body["commands"])
	assert.Equal(t, []any{map[string]any{"href": u + "/v1/status", "rel": "self"}, map[string]any{"href": u + "/status", "rel": "bookmark"}}, body["status"])
	assert.Equal(t, []any{map[string]any{"base": "application/json", "type": "application/vnd.openstack.ironic-python-agent.v1+json"}}, body["media_types"])
	assert.Equal(t, "v1", body["id"])

	// Status with and without the version prefix, as IPA routes it.
	for _, p := range []string{"/v1/status", "/status"} {
		code, body = r.do(http.MethodGet, p, nil)
		assert.Equal(t, 200, code, p)
		assert.Equal(t, map[string]any{"started_at": 1700000000.5, "version": "9.4.0-anvil"}, body, p)
	}
	code, _ = r.do(http.MethodHead, "/v1/status", nil)
	assert.Equal(t, 200, code)
}

func TestServerRoutingErrors(t *testing.T) {
	r := newRig(t)
	notFound := faultBody("Client", "404 Not Found: The requested URL was not found on the server. If you entered the URL manually please check your spelling and try again.")
	notAllowed := faultBody("Client", "405 Method Not Allowed: The method is not allowed for the requested URL.")
	for _, tc := range []struct {
		method, path string
		code         int
		want         map[string]any
	}{
		{"GET", "/v2/", 404, notFound},
		{"GET", "/v1/nodes", 404, notFound},
		{"GET", "/v1/commandsx", 404, notFound},
		{"POST", "/", 405, notAllowed},
		{"DELETE", "/v1/", 405, notAllowed},
		{"PUT", "/v1/status", 405, notAllowed},
		{"DELETE", "/v1/commands/", 405, notAllowed},
		{"POST", "/v1/commands/abc", 405, notAllowed},
	} {
		code, body := r.do(tc.method, tc.path, nil)
		assert.Equal(t, tc.code, code, "%s %s", tc.method, tc.path)
		assert.Equal(t, tc.want, body, "%s %s", tc.method, tc.path)
	}
}

func TestServerRefusesBadBodiesBeforeTheToken(t *testing.T) {
	r := newRig(t)
	bad := faultBody("Client", "400 Bad Request: Missing or invalid name or params")
	for _, tc := range []struct {
		name, body string
		want       map[string]any // nil: a JSON decoding fault
	}{
		{"empty", "", nil},
		{"not JSON", "name=clean.get_clean_steps", nil},
		{"truncated", `{"name": "clean.get_clean_steps", "params": {`, nil},
		{"array", `[]`, nil},
		{"null", `null`, bad},
		{"no name", `{"params": {}}`, bad},
		{"no params", `{"name": "standby.sync"}`, bad},
		{"params null", `{"name": "standby.sync", "params": null}`, bad},
		{"params a list", `{"name": "standby.sync", "params": []}`, bad},
		{"params a string", `{"name": "standby.sync", "params": "x"}`, bad},
		{"name a number", `{"name": 7, "params": {}}`, bad},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// No token at all: IPA looks at the body first, so these are
			// 400s, never 401s.
			code, body := r.do(http.MethodPost, "/v1/commands/", tc.body)
			assert.Equal(t, 400, code)
			if tc.want != nil {
				assert.Equal(t, tc.want, body)
			} else {
				assert.Equal(t, "Client", body["faultcode"])
				assert.True(t, strings.HasPrefix(body["faultstring"].(string), "400 Bad Request: Failed to decode JSON object: "), "%v", body)
			}
		})
	}
	assert.Empty(t, r.srv.Commands.List(), "a refused body must not be recorded")
}

func TestServerAgentToken(t *testing.T) {
	r := newRig(t)
	invalid := faultBody("Client", "401 Unauthorized: Token invalid.")
	body := map[string]any{"name": "standby.sync", "params": map[string]any{}}
	for _, q := range []string{"", "?agent_token=", "?agent_token=wrong", "?agent_token=" + testToken[:42], "?agent_token=" + testToken + "x"} {
		code, got := r.do(http.MethodPost, "/v1/commands/"+q, body)
		assert.Equal(t, 401, code, q)
		assert.Equal(t, invalid, got, q)
	}
	assert.Empty(t, r.srv.Commands.List(), "a command without the token must not run")

	code, got := r.do(http.MethodPost, "/commands/?agent_token="+testToken, body)
	assert.Equal(t, 200, code)
	assert.Equal(t, "SUCCEEDED", got["command_status"])

	// Reading: a wrong token is refused, none shows results without the
	// parameters (Ironic 21.4 polls without one).
	code, got = r.do(http.MethodGet, "/v1/commands/?agent_token=wrong", nil)
	assert.Equal(t, 401, code)
	assert.Equal(t, invalid, got)
	code, got = r.do(http.MethodGet, "/v1/commands/?agent_token="+testToken+"&agent_token="+testToken, nil)
	assert.Equal(t, 401, code, "a repeated token is refused")
	assert.Equal(t, invalid, got)

	// An agent that got no usable token from Ironic refuses everything,
	// including an empty token.
	r.srv.SetToken("")
	for _, q := range []string{"", "?agent_token=", "?agent_token=" + testToken} {
		code, _ := r.do(http.MethodPost, "/v1/commands/"+q, body)
		assert.Equal(t, 401, code, q)
	}
}

func TestServerUnknownCommands(t *testing.T) {
	r := newRig(t)
	for _, tc := range []struct {
		name string
		code int
		want string
	}{
		{"clean.erase_everything", 400, "Invalid command: Unknown command: erase_everything"},
		{"rescue.finalize_rescue", 400, "Invalid command: Unknown command: finalize_rescue"},
		{"flow.start_flow", 400, "Invalid command: Unknown command: start_flow"},
		{"standby", 400, "Invalid command: Command name must be of the form <extension>.<name>"},
		{"standby.", 400, "Invalid command: Command name must be of the form <extension>.<name>"},
		{".sync", 400, "Invalid command: Command name must be of the form <extension>.<name>"},
		{"bogus.sync", 404, "Not found: Extension with id bogus not found."},
	} {
		code, body := r.command(tc.name, map[string]any{}, false)
		assert.Equal(t, tc.code, code, tc.name)
		assert.Equal(t, faultBody("Client", tc.want), body, tc.name)
	}
	assert.Equal(t, []string{"clean.erase_everything", "rescue.finalize_rescue", "flow.start_flow", "bogus.sync"}, r.srv.Commands.Unknown())
	assert.Empty(t, r.srv.Commands.List())
}

// cleanStep is what Ironic 21.4 sends for one automated clean step.
func cleanStep(step string, args map[string]any) map[string]any {
	p := map[string]any{
		"step":          map[string]any{"interface": "deploy", "step": step, "priority": 99, "reboot_requested": false, "abortable": true, "args": args},
		"node":          map[string]any{"uuid": "1be26c0b-03f2-4d2e-ae87-c02d7f33c123", "properties": map[string]any{}},
		"ports":         []any{map[string]any{"address": "52:54:00:12:34:56"}},
		"clean_version": map[string]any{"fake_manager": "7", "generic_hardware_manager": "1.2"},
	}
	return p
}

func TestServerBusyWaitAndResults(t *testing.T) {
	r := newRig(t)
	release := r.hold()
	defer release()

	code, first := r.command("clean.execute_clean_step", cleanStep("erase_devices_metadata", nil), false)
	require.Equal(t, 200, code, "%v", first)
	assert.Equal(t, "RUNNING", first["command_status"])
	assert.Equal(t, "execute_clean_step", first["command_name"], "IPA records the method alone")
	assert.Nil(t, first["command_error"])
	assert.Nil(t, first["command_result"])
	id, _ := first["id"].(string)
	assert.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, id)

	// Busy: IPA's 409, whose text Ironic matches ("agent is busy").
	code, body := r.command("clean.get_clean_steps", map[string]any{"node": map[string]any{}, "ports": []any{}}, false)
	assert.Equal(t, 409, code)
	assert.Equal(t, faultBody("Client", "Agent is busy: executing command execute_clean_step"), body)

	// The list without a token has no parameters; with it, it does.
	code, body = r.do(http.MethodGet, "/v1/commands/", nil)
	require.Equal(t, 200, code)
	list := body["commands"].([]any)
	require.Len(t, list, 1)
	assert.NotContains(t, list[0], "command_params")
	assert.Equal(t, "RUNNING", list[0].(map[string]any)["command_status"])
	_, body = r.do(http.MethodGet, "/v1/commands?agent_token="+testToken, nil)
	assert.Contains(t, body["commands"].([]any)[0], "command_params")

	code, body = r.do(http.MethodGet, "/v1/commands/"+id, nil)
	assert.Equal(t, 200, code)
	assert.Equal(t, "RUNNING", body["command_status"])

	// wait=true blocks until the command is done.
	var wg sync.WaitGroup
	var waited map[string]any
	var waitCode int
	start := time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		waitCode, waited = r.do(http.MethodGet, "/v1/commands/"+id+"?wait=TRUE", nil)
	}()
	time.Sleep(150 * time.Millisecond)
	release()
	wg.Wait()
	assert.GreaterOrEqual(t, time.Since(start), 150*time.Millisecond, "wait=true returned before the command finished")
	assert.Equal(t, 200, waitCode)
	assert.Equal(t, "SUCCEEDED", waited["command_status"])
	assert.Equal(t, map[string]any{
		"clean_result": map[string]any{"ran": "clean:erase_devices_metadata"},
		"clean_step":   roundTrip(t, cleanStep("erase_devices_metadata", nil)["step"]),
	}, waited["command_result"])
	assert.NotContains(t, waited, "command_params")

	// The agent takes commands again; POST with wait=true answers done.
	r.failSteps("disk on fire")
	code, body = r.command("clean.execute_clean_step", cleanStep("erase_devices", nil), true)
	require.Equal(t, 200, code)
	assert.Equal(t, "FAILED", body["command_status"])
	assert.Equal(t, map[string]any{"type": "DiskError", "code": 500.0, "message": "Command execution failed", "details": "disk on fire (seen by the fake)"},
		body["command_error"])

	code, body = r.do(http.MethodGet, "/v1/commands/0d1c8a6e-0000-4000-8000-000000000000", nil)
	assert.Equal(t, 404, code)
	assert.Equal(t, faultBody("Client", "Not found: Command Result with id 0d1c8a6e-0000-4000-8000-000000000000 not found."), body)

	_, body = r.do(http.MethodGet, "/v1/commands/", nil)
	assert.Len(t, body["commands"], 2, "results are kept, oldest first")
	assert.Equal(t, id, body["commands"].([]any)[0].(map[string]any)["id"])
}

func TestServerWaitEndsWithTheCaller(t *testing.T) {
	r := newRig(t)
	release := r.hold()
	defer release()
	_, res := r.command("clean.execute_clean_step", cleanStep("erase_devices", nil), false)
	client := &http.Client{Timeout: 200 * time.Millisecond}
	start := time.Now()
	_, err := client.Get(r.http.URL + "/v1/commands/" + res["id"].(string) + "?wait=true")
	require.Error(t, err, "the command is still running")
	assert.Less(t, time.Since(start), 5*time.Second)
}

func TestServerLockdown(t *testing.T) {
	r := newRig(t)
	code, body := r.command("system.lockdown", map[string]any{}, false)
	assert.Equal(t, 200, code, "the lockdown command itself is answered")
	assert.Equal(t, "SUCCEEDED", body["command_status"])
	assert.Equal(t, "lockdown", body["command_name"])

	locked := faultBody("Server", "503 Service Unavailable: the agent is locked down")
	for _, req := range []struct{ method, path string }{
		{"GET", "/"}, {"GET", "/v1/status"}, {"GET", "/v1/commands/"}, {"GET", "/v1/commands/" + body["id"].(string)},
	} {
		code, got := r.do(req.method, req.path, nil)
		assert.Equal(t, 503, code, req.path)
		assert.Equal(t, locked, got, req.path)
	}
	code, got := r.command("standby.power_off", map[string]any{}, false)
	assert.Equal(t, 503, code)
	assert.Equal(t, locked, got)
	assert.Len(t, r.srv.Commands.List(), 1, "nothing ran after the lockdown")
	select {
	case a := <-r.power.done:
		t.Fatalf("power action %s after lockdown", a)
	case <-time.After(50 * time.Millisecond):
	}
	assert.False(t, r.srv.Lockdown(), "a second lockdown does not lock again")
}
