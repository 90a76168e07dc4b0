package ipa

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// FuzzParseCommandRequest feeds what Ironic (or anyone who reaches port
// 9999) may POST to /v1/commands/ through the parser and then through the
// whole API holding the token, so every command's validation and argument
// mapping sees it too. Seeds: testdata/fuzz/FuzzParseCommandRequest,
// real Ironic 21.4 bodies and broken ones; `go test` runs them.
func FuzzParseCommandRequest(f *testing.F) {
	r := newRig(f)
	ctx, cancel := context.WithCancel(context.Background())
	f.Cleanup(cancel)
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := ParseCommandRequest(body)
		if err != nil {
			var fl *fault
			require.ErrorAs(t, err, &fl)
			assert.Equal(t, 400, fl.status)
			assert.True(t, strings.HasPrefix(fl.msg, "400 Bad Request: "), fl.msg)
		} else {
			require.NotNil(t, req.Params, "a parsed request always has params")
			// What was parsed is what a second parse of its encoding
			// gives: nothing is lost or invented.
			again, err := json.Marshal(req)
			require.NoError(t, err)
			back, err := ParseCommandRequest(again)
			require.NoError(t, err)
			assert.Equal(t, req.Name, back.Name)
		}

		// A fresh agent per input: a lockdown or a failure must not leak
		// into the next one.
		srv := r.fresh(ctx)
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/v1/commands/?wait=true&agent_token="+testToken, strings.NewReader(string(body))))
		var out map[string]any
		require.NoError(t, json.Unmarshal(w.Body.Bytes(), &out), "every answer is a JSON object: %s", w.Body.Bytes())
		switch w.Code {
		case 200:
			assert.Contains(t, []any{"SUCCEEDED", "FAILED", "CLEAN_VERSION_MISMATCH"}, out["command_status"], "wait=true answers a finished command")
			assert.NotEmpty(t, out["id"])
		case 400, 404:
			assert.Equal(t, "Client", out["faultcode"])
			assert.NotEmpty(t, out["faultstring"])
		default:
			t.Fatalf("status %d: %s", w.Code, w.Body.Bytes())
		}
		if err != nil {
			assert.Equal(t, 400, w.Code, "a body the parser refuses is a 400")
		}
	})
}

// FuzzIronicAnswers feeds what the agent reads back from Ironic: lookup
// answers, error bodies (lookup and heartbeat) and GET /'s version
// document. Seeds: testdata/fuzz/FuzzIronicAnswers.
func FuzzIronicAnswers(f *testing.F) {
	f.Fuzz(func(t *testing.T, body []byte) {
		if lr, err := ParseLookup(body); err == nil {
			assert.NotEmpty(t, lr.UUID())
			assert.Greater(t, lr.Config.HeartbeatTimeout, 0.0)
			assert.True(t, lr.Config.AgentToken == "" || len(lr.Config.AgentToken) >= minTokenLen, "a short token is never kept")
			assert.GreaterOrEqual(t, heartbeatInterval(lr.Config.HeartbeatTimeout, 0.99), heartbeatInterval(lr.Config.HeartbeatTimeout, 0))
		}
		_ = errorText(body)
		if v, ok := parseRootVersion(body); ok {
			assert.True(t, v.major >= 0 && v.minor >= 0)
		}
	})
}
