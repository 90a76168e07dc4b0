package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/api"
	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
)

// TestRuleCommands runs anvil rule against a real API and store: create,
// list, show (masked when sensitive), export (sensitive rules left out),
// delete, and import of the export.
func TestRuleCommands(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := sqlite.Open(ctx, ":memory:")
	require.NoError(t, err)
	defer st.Close()
	cond := conductor.New(st, conductor.Config{Host: "cli", CheckInterval: time.Hour}, conductor.FakeDriver{})
	srv := httptest.NewServer(api.New(api.Config{Store: st, Conductor: cond}))
	defer srv.Close()
	env := func(k string) string {
		if k == "ANVIL_URL" {
			return srv.URL
		}
		return ""
	}
	anvil := func(stdin string, args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, args, strings.NewReader(stdin), &out, env)
		return out.String(), err
	}

	plain := `{"description": "rack 7", "priority": 30, "actions": [{"op": "add-trait", "args": {"name": "CUSTOM_RACK7"}}, {"op": "anvil-manage", "args": {}}]}`
	out, err := anvil("", "rule", "create", plain)
	require.NoError(t, err, out)
	plainID := strings.TrimSpace(out)
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "secret.json")
	require.NoError(t, os.WriteFile(secretFile, []byte(`{"description": "credentials", "sensitive": true, "priority": 40,
		"actions": [{"op": "set-attribute", "args": {"path": "driver_info/ipmi_password", "value": "rack-secret"}}]}`), 0o600))
	out, err = anvil("", "rule", "create", secretFile)
	require.NoError(t, err, out)
	secretID := strings.TrimSpace(out)

	out, err = anvil("", "rule", "list")
	require.NoError(t, err)
	assert.Regexp(t, secretID+`\s+40\s+main\s+true\s+\(hidden\)\s+credentials`, out)
	assert.Regexp(t, plainID+`\s+30\s+main\s+false\s+add-trait,anvil-manage\s+rack 7`, out)
	assert.Less(t, strings.Index(out, secretID), strings.Index(out, plainID), "highest priority first")

	out, err = anvil("", "rule", "show", secretID)
	require.NoError(t, err)
	assert.NotContains(t, out, "rack-secret")

	export, err := anvil("", "rule", "export")
	require.NoError(t, err)
	assert.NotContains(t, export, "rack-secret")
	var doc map[string]any
	require.NoError(t, json.Unmarshal([]byte(export), &doc))
	assert.Equal(t, []any{secretID}, doc["skipped_sensitive"])
	assert.Len(t, doc["inspection_rules"], 1)

	out, err = anvil("", "rule", "delete", plainID, secretID)
	require.NoError(t, err)
	assert.Contains(t, out, plainID+": deleted")
	out, err = anvil(export, "rule", "import", "-")
	require.NoError(t, err, out)
	assert.Contains(t, out, plainID+": created", "the export keeps the rules' UUIDs")
	out, err = anvil("", "rule", "list", "--json")
	require.NoError(t, err)
	assert.Contains(t, out, "CUSTOM_RACK7")

	_, err = anvil("", "rule", "show", "no-such-rule")
	assert.Error(t, err)
	_, err = anvil("", "rule", "import", `{"nope": 1}`)
	assert.ErrorContains(t, err, "expected an export")
	_, err = anvil("", "rule", "frobnicate")
	assert.ErrorContains(t, err, "unknown command")
}
