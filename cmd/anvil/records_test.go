package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	pdfapi "github.com/pdfcpu/pdfcpu/pkg/api"
	"github.com/pdfcpu/pdfcpu/pkg/pdfcpu/model"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/api"
	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/erasure"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/protocol"
)

// TestEraseRecordsCLI: export a node's records through the real API,
// verify the file offline with and without the key, see a changed byte
// fail, and print the text document and the public key.
func TestEraseRecordsCLI(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, ":memory:")
	require.NoError(t, err)
	defer st.Close()
	key, err := erasure.LoadOrCreateKey(t.TempDir())
	require.NoError(t, err)
	signer := erasure.NewSigner(key)
	cond := conductor.New(st, conductor.Config{Host: "cli", CheckInterval: time.Hour}, conductor.FakeDriver{})
	srv := httptest.NewServer(api.New(api.Config{Store: st, Conductor: cond, RecordsKey: signer.PublicKey()}))
	defer srv.Close()

	name := "old-box"
	reason := "end of life"
	n := &store.Node{UUID: "3f0c1d2e-0000-4000-8000-000000000001", Name: &name, Driver: "fake-hardware", ProvisionState: "manageable",
		CreatedAt: time.Now(), Retired: true, RetiredReason: &reason}
	require.NoError(t, st.CreateNode(ctx, n))
	require.NoError(t, st.PutInventory(ctx, n.UUID, []byte(`{"disks":[{"name":"/dev/vda","serial":"VD-A"},{"name":"/dev/vdb","serial":"VD-B"},
		{"name":"/dev/vdc","serial":"VD-C"},{"name":"/dev/sr0","optical":true}]}`)))
	res := &store.StepResult{UUID: "run-1", NodeUUID: n.UUID, Step: "deploy.erase_devices", AgentVersion: "0.1.0", StartedAt: time.Now(), FinishedAt: time.Now(),
		Result: json.RawMessage(`{"devices":[{"plan":{"device":"/dev/vda","size":67108864,"serial":"VD-A"},"status":"erased","method":"overwrite",
			"attempts":[{"method":"overwrite","passes":2,"verification":{"pattern":"zeros","samples":10,"bytes_checked":655360}}]},
			{"plan":{"device":"/dev/vdb","size":33554432,"serial":"VD-B"},"status":"erased","method":"blkzeroout"}]}`)}
	recs, err := erasure.Build(erasure.Input{Node: n, Controller: "cli", Result: res, Now: time.Now()})
	require.NoError(t, err)
	for _, r := range recs {
		s, err := signer.Sign(r)
		require.NoError(t, err)
		require.NoError(t, st.PutEraseRecords(ctx, []*store.EraseRecord{s}))
	}

	env := func(k string) string {
		if k == "ANVIL_URL" {
			return srv.URL
		}
		return ""
	}
	cli := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, args, strings.NewReader(""), &out, env)
		return out.String(), err
	}
	out, err := cli("erase-records", "old-box")
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(out, `{"format":"anvil-erase-records/1","node":"`+n.UUID+`","records":[`), "the file names the node by UUID:\n%s", out)
	file := filepath.Join(t.TempDir(), "records.json")
	require.NoError(t, os.WriteFile(file, []byte(out), 0o600))
	byUUID, err := cli("erase-records", n.UUID)
	require.NoError(t, err)
	assert.Equal(t, out, byUUID, "by name or UUID, the same file")

	pk, err := cli("erase-records", "public-key")
	require.NoError(t, err)
	pubText := strings.SplitN(pk, "\n", 2)[0]
	assert.Equal(t, erasure.EncodePublicKey(signer.PublicKey()), pubText)
	assert.Contains(t, pk, "fingerprint "+erasure.Fingerprint(signer.PublicKey()))

	v, err := cli("erase-records", "verify", file, "--key", pubText)
	require.NoError(t, err, v)
	assert.Equal(t, 2, strings.Count(v, "OK "), v)
	assert.Contains(t, v, "serial VD-A (clear, overwrite)")
	v, err = cli("erase-records", "verify", file)
	require.NoError(t, err, v)
	assert.Contains(t, v, "compare the fingerprints")

	// one changed byte in a record: that record fails, and so does the command
	tampered := strings.Replace(out, `"size_bytes":67108864`, `"size_bytes":67108865`, 1)
	require.NotEqual(t, out, tampered)
	require.NoError(t, os.WriteFile(file, []byte(tampered), 0o600))
	v, err = cli("erase-records", "verify", file, "--key", pubText)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "1 of 2 records failed verification")
	assert.Contains(t, v, "FAILED  ")
	assert.Contains(t, v, "signature does not match")

	v, err = cli("erase-records", "verify", file, "--key", otherKey(t))
	require.Error(t, err)
	assert.Contains(t, v, "not trusted")

	// Security issue #30: a forged serial before the signed one, which
	// people, grep and first-wins readers see, a record twice, and a file
	// that says it is another node's: the command fails and says why.
	other := "3f0c1d2e-0000-4000-8000-000000000002"
	for _, tc := range []struct{ name, file, err, says string }{
		{"a forged serial before the signed one", strings.Replace(out, `"serial":"VD-A"`, `"serial":"FORGED-0002","serial":"VD-A"`, 1),
			`records.json: duplicate key "serial" at records[`, ""},
		{"a case variant", strings.Replace(out, `"serial":"VD-A"`, `"Serial":"FORGED-0002","serial":"VD-A"`, 1),
			`a case-insensitive JSON reader (Go's encoding/json) takes it for "Serial"`, ""},
		{"a record twice", strings.Replace(out, "\n]}", ",\n"+strings.TrimSuffix(strings.SplitN(out, "\n", 3)[1], ",")+"\n]}", 1),
			"appears twice: records[0] and records[2]", ""},
		{"another node's file", strings.Replace(out, n.UUID, other, 1), "2 of 2 records failed verification",
			`is of node ` + n.UUID + ` ("old-box"), not of the file's node "` + other + `"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			require.NotEqual(t, out, tc.file)
			require.NoError(t, os.WriteFile(file, []byte(tc.file), 0o600))
			v, err := cli("erase-records", "verify", file, "--key", pubText)
			require.Error(t, err, v)
			assert.Contains(t, err.Error(), tc.err)
			assert.NotContains(t, v, "OK ")
			assert.Contains(t, v, tc.says)
		})
	}
	_, err = cli("erase-records", "nonesuch")
	assert.ErrorContains(t, err, "node nonesuch: HTTP 404")
	gone, err := cli("erase-records", "3f0c1d2e-0000-4000-8000-0000000000ff")
	require.NoError(t, err, "a deleted node's records are listed by its UUID")
	assert.Contains(t, gone, `"node":"3f0c1d2e-0000-4000-8000-0000000000ff","records":[`)

	text, err := cli("erase-records", "old-box", "--format", "text")
	require.NoError(t, err)
	assert.Contains(t, text, "CERTIFICATES OF SANITIZATION")
	assert.Contains(t, text, "Method type:               clear")
	assert.Contains(t, text, "Signature:                 valid")
	// PDF: the same certificates, a page per disk, read back with pdfcpu
	pdf, err := cli("erase-records", "old-box", "--format", "pdf")
	require.NoError(t, err)
	pdfapi.DisableConfigDir()
	conf := model.NewDefaultConfiguration()
	require.NoError(t, pdfapi.Validate(strings.NewReader(pdf), conf))
	pages, err := pdfapi.PageCount(strings.NewReader(pdf), conf)
	require.NoError(t, err)
	assert.Equal(t, 2, pages, "a page per record")
	var content strings.Builder
	require.NoError(t, pdfapi.ExtractContent(strings.NewReader(pdf), nil, func(r io.Reader, _ int) error {
		_, err := io.Copy(&content, r)
		return err
	}, conf))
	for _, want := range []string{"CERTIFICATES OF SANITIZATION", ", serial VD-A)", ", serial VD-B)", "(Method type:)", "(valid, Ed25519 key " + erasure.Fingerprint(signer.PublicKey()) + ")"} {
		assert.Contains(t, content.String(), want)
	}
	_, err = cli("erase-records", "old-box", "--format", "docx")
	assert.ErrorContains(t, err, "want json, text or pdf")

	// anvil node show: which disks of the retired node have a record
	show, err := cli("node", "show", "old-box")
	require.NoError(t, err)
	assert.Regexp(t, `RETIREMENT: /dev/vda serial VD-A sanitized after retirement: clear by overwrite, finished \S+; record `, show)
	assert.Contains(t, show, "RETIREMENT: /dev/vdb serial VD-B sanitized after retirement: clear by blkzeroout")
	assert.Contains(t, show, "RETIREMENT: /dev/vdc serial VD-C has NO sanitization record since retirement")
	assert.NotContains(t, show, "/dev/sr0")
}

func TestRetirementLines(t *testing.T) {
	assert.Nil(t, retirementLines(map[string]any{"retired": false}, nil, nil), "only for retired nodes")
	assert.Equal(t, []string{"RETIREMENT: no disk has a sanitization record since retirement"},
		retirementLines(map[string]any{"retired": true}, nil, nil))
	// a record made before the node was retired does not count
	before := json.RawMessage(`{"record":{"format":"anvil-sanitization-record/1","node":{"retired":false},"media":{"device":"/dev/vda","serial":"A"}},"signature":{}}`)
	lines := retirementLines(map[string]any{"retired": true}, []json.RawMessage{before}, []protocol.Disk{{Name: "/dev/vda", Serial: "A"}})
	assert.Equal(t, []string{"RETIREMENT: /dev/vda serial A has NO sanitization record since retirement"}, lines)
	// a RAID member certified through its array says what the record covers
	member := json.RawMessage(`{"record":{"format":"anvil-sanitization-record/1","uuid":"r1","node":{"retired":true},"media":{"device":"/dev/sdc","serial":"C"},
		"sanitization":{"category":"clear","method":"overwrite via /dev/md1","scope":"the data area of software RAID member /dev/sdc, written through /dev/md1"},
		"finished_at":"2026-11-25T10:00:00Z"},"signature":{}}`)
	lines = retirementLines(map[string]any{"retired": true}, []json.RawMessage{member}, []protocol.Disk{{Name: "/dev/sdc", Serial: "C"}})
	require.Len(t, lines, 1)
	assert.True(t, strings.HasPrefix(lines[0], "RETIREMENT: /dev/sdc serial C sanitized after retirement: clear by overwrite via /dev/md1, finished 2026-11-25T10:00:00Z; "+
		"covers only the data area of software RAID member /dev/sdc, written through /dev/md1; record r1"), lines[0])
}

// otherKey is the public key of another controller.
func otherKey(t *testing.T) string {
	t.Helper()
	k, err := erasure.LoadOrCreateKey(t.TempDir())
	require.NoError(t, err)
	return erasure.EncodePublicKey(erasure.NewSigner(k).PublicKey())
}
