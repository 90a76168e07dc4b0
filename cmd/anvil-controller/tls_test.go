package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestPrintFingerprint(t *testing.T) {
	dir := t.TempDir()
	noenv := func(string) string { return "" }
	var out bytes.Buffer
	args := []string{"--database", "sqlite://" + filepath.Join(dir, "anvil.db"), "--tls-self-signed", "--print-fingerprint"}
	require.NoError(t, runTo(t.Context(), args, noenv, &out))
	fp := strings.TrimSpace(out.String())
	assert.Regexp(t, `^sha256:[0-9a-f]{64}$`, fp)
	saved, err := os.ReadFile(filepath.Join(dir, "anvil-tls.fingerprint"))
	require.NoError(t, err, "created beside the database")
	assert.Equal(t, fp+"\n", string(saved))

	// The same certificate on the next call, and from the environment.
	out.Reset()
	env := map[string]string{"ANVIL_TLS_SELF_SIGNED": "true", "ANVIL_TLS_DIR": dir}
	require.NoError(t, runTo(t.Context(), []string{"--print-fingerprint"}, func(k string) string { return env[k] }, &out))
	assert.Equal(t, fp, strings.TrimSpace(out.String()))

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--print-fingerprint"}, "serves plain HTTP"},
		{[]string{"--tls-cert", filepath.Join(dir, "anvil-tls.crt"), "--print-fingerprint"}, "go together"},
		{[]string{"--tls-cert", "a", "--tls-key", "b", "--tls-self-signed", "--print-fingerprint"}, "exclude each other"},
		{[]string{"--tls-cert", filepath.Join(dir, "anvil-tls.crt"), "--tls-key", filepath.Join(dir, "nope"), "--listen", "127.0.0.1:0"}, "--tls-key"},
	} {
		err := runTo(t.Context(), tc.args, noenv, &out)
		require.Error(t, err, tc.args)
		assert.Contains(t, err.Error(), tc.want, tc.args)
	}
	out.Reset()
	require.NoError(t, runTo(t.Context(), []string{"--tls-cert", filepath.Join(dir, "anvil-tls.crt"), "--tls-key", filepath.Join(dir, "anvil-tls.key"),
		"--print-fingerprint"}, noenv, &out))
	assert.Equal(t, fp, strings.TrimSpace(out.String()), "the same certificate given as files")
}
