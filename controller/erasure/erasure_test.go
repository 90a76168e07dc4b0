package erasure

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

const eraseResult = `{"policy":{"iterations":1},"devices":[
 {"plan":{"device":"/dev/nvme0n1","size":960197124096,"action":"erase","reason":"","rotational":false,"controller":"nvme",
   "nvme":{"model":"Samsung PM9A3","serial":"S64GNE0R123456"}},
  "status":"erased","method":"nvme_format_crypto_erase","bytes":960197124096,"seconds":3.1,
  "attempts":[{"method":"nvme_format_crypto_erase","seconds":3.1,"verification":{"pattern":"zeros","samples":66,"bytes_checked":4325376,"direct_io":true,"seconds":0.2}}],
  "started_at":"2026-11-25T09:00:01Z","finished_at":"2026-11-25T09:00:04Z"},
 {"plan":{"device":"/dev/sda","size":4000787030016,"action":"erase","rotational":true,"vendor":"ATA","model":"ST4000NM","serial":"ZC1ABC","wwn":"0x5000c500a1b2c3d4","controller":"sata"},
  "status":"erased","method":"overwrite","bytes":4000787030016,"seconds":20000,
  "attempts":[{"method":"ata_security_erase","error":"frozen","seconds":0.1},{"method":"overwrite","passes":2,"seconds":19999,"verification":{"pattern":"zeros","samples":66,"bytes_checked":4325376,"direct_io":true,"seconds":1}}]},
 {"plan":{"device":"/dev/sr0","size":0,"action":"skip","reason":"optical drive"},"status":"skipped","seconds":0},
 {"plan":{"device":"/dev/sdb","size":1000,"action":"erase"},"status":"failed","error":"write error","seconds":1}]}`

func testInput(t testing.TB) Input {
	t.Helper()
	name, reason := "rack1-07", "end of life"
	n := &store.Node{UUID: "6f3a1c2e-0000-4000-8000-000000000007", Name: &name, Driver: "redfish", Retired: true, RetiredReason: &reason,
		DriverInfo: map[string]any{"redfish_address": "https://10.0.0.7", "redfish_password": "secret"},
		Extra:      map[string]any{"sanitization_destination": "recycling"}}
	at := time.Date(2026, 11, 25, 9, 0, 0, 0, time.UTC)
	res := &store.StepResult{UUID: "cmd-1", NodeUUID: n.UUID, Step: "deploy.erase_devices", StartedAt: at, FinishedAt: at.Add(time.Hour),
		AgentVersion: "0.1.0", Result: json.RawMessage(eraseResult)}
	return Input{Node: n, Controller: "ctl-1", Result: res, Now: at.Add(2 * time.Hour)}
}

func TestBuildRecords(t *testing.T) {
	recs, err := Build(testInput(t))
	require.NoError(t, err)
	require.Len(t, recs, 2, "only erased devices get a record")
	nv, hd := recs[0], recs[1]
	assert.Equal(t, Media{Model: "Samsung PM9A3", Serial: "S64GNE0R123456", Type: "flash memory (NVMe SSD)", Interface: "nvme",
		SizeBytes: 960197124096, Device: "/dev/nvme0n1"}, nv.Media)
	assert.Equal(t, "purge", nv.Sanitization.Category)
	assert.Contains(t, nv.Sanitization.Technique, "cryptographic erase")
	assert.Equal(t, "2026-11-25T09:00:01Z", nv.StartedAt)
	assert.Equal(t, "2026-11-25T09:00:04Z", nv.FinishedAt)
	assert.Equal(t, Verification{Method: "sampled read-back of 66 regions spread over the device, first and last always", Samples: 66,
		BytesChecked: 4325376, ExpectedPattern: "zeros", Result: "passed: every byte read matched"}, nv.Verification)

	assert.Equal(t, "ATA", hd.Media.Manufacturer)
	assert.Equal(t, "ZC1ABC", hd.Media.Serial)
	assert.Equal(t, "magnetic (hard disk drive)", hd.Media.Type)
	assert.Equal(t, "clear", hd.Sanitization.Category)
	assert.Equal(t, 2, hd.Sanitization.Passes)
	assert.Equal(t, "overwrite, 2 pass(es), the last with zeros", hd.Sanitization.Technique)
	assert.Equal(t, "2026-11-25T09:00:00Z", hd.StartedAt, "no device times: the run's")

	for _, r := range recs {
		assert.Equal(t, NodeRef{UUID: "6f3a1c2e-0000-4000-8000-000000000007", Name: "rack1-07", Driver: "redfish",
			BMCAddress: "https://10.0.0.7", Retired: true, RetiredReason: "end of life"}, r.Node)
		assert.Equal(t, "recycling", r.Destination)
		assert.Equal(t, Tool{Name: "anvil-agent", Version: "0.1.0"}, r.Tool)
		assert.Equal(t, "ctl-1", r.Controller)
		assert.Equal(t, "cmd-1", r.StepResult)
		assert.Contains(t, r.RequestedBy, "automated cleaning")
	}
	again, err := Build(testInput(t))
	require.NoError(t, err)
	assert.Equal(t, recs[0].UUID, again[0].UUID, "the same run and device: the same record id")
	assert.NotEqual(t, recs[0].UUID, recs[1].UUID)
}

func TestATANormalEraseOfAnSSDIsAClear(t *testing.T) {
	in := testInput(t)
	in.Result.Result = json.RawMessage(`{"devices":[{"plan":{"device":"/dev/sdc","size":1,"rotational":false},"status":"erased","method":"ata_security_erase",
		"attempts":[{"method":"ata_security_erase"}]},{"plan":{"device":"/dev/sdd","size":1,"rotational":true},"status":"erased","method":"ata_security_erase"}]}`)
	recs, err := Build(in)
	require.NoError(t, err)
	require.Len(t, recs, 2)
	assert.Equal(t, "clear", recs[0].Sanitization.Category)
	assert.Equal(t, "purge", recs[1].Sanitization.Category)
	assert.Equal(t, "not verified", recs[1].Verification.Result)
}

func signedRecords(t *testing.T, key ed25519.PrivateKey) [][]byte {
	t.Helper()
	recs, err := Build(testInput(t))
	require.NoError(t, err)
	var out [][]byte
	for _, r := range recs {
		s, err := NewSigner(key).Sign(r)
		require.NoError(t, err)
		out = append(out, s.Data)
	}
	return out
}

func TestSignAndVerify(t *testing.T) {
	_, key, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	pub := key.Public().(ed25519.PublicKey)
	docs := signedRecords(t, key)
	v := Verify(docs[0], pub)
	require.NoError(t, v.Err)
	assert.Equal(t, "S64GNE0R123456", v.Record.Media.Serial)
	assert.True(t, pub.Equal(v.Key))

	// Layout is not content: indented, the record still verifies.
	var pretty bytes.Buffer
	require.NoError(t, json.Indent(&pretty, docs[0], "", "  "))
	assert.NoError(t, Verify(pretty.Bytes(), pub).Err)

	// Any changed value, key or element breaks it.
	for _, change := range [][2]string{{"S64GNE0R123456", "S64GNE0R123457"}, {`"purge"`, `"clear"`},
		{`"size_bytes":960197124096`, `"size_bytes":960197124097`}, {`"retired":true`, `"retired":false`},
		{`"serial"`, `"serial_"`}} {
		bad := bytes.Replace(docs[0], []byte(change[0]), []byte(change[1]), 1)
		require.NotEqual(t, docs[0], bad, change)
		assert.Error(t, Verify(bad, pub).Err, "%s -> %s", change[0], change[1])
	}
	// Flipping any single byte of the document fails (or no longer parses).
	for i := range docs[0] {
		bad := bytes.Clone(docs[0])
		bad[i] ^= 0x01
		assert.Error(t, Verify(bad, pub).Err, "byte %d (%q) changed", i, docs[0][i])
	}

	_, other, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	v = Verify(docs[0], other.Public().(ed25519.PublicKey))
	assert.ErrorIs(t, v.Err, ErrUntrusted)
	assert.NoError(t, Verify(docs[0]).Err, "no trusted key: the record's own")
	forged := signedRecords(t, other)[0]
	assert.ErrorIs(t, Verify(forged, pub).Err, ErrUntrusted, "a record signed by someone else's key")
}

func TestVerifyFile(t *testing.T) {
	_, key, err := ed25519.GenerateKey(nil)
	require.NoError(t, err)
	docs := signedRecords(t, key)
	f := File{Format: FileFormat, Node: "rack1-07"}
	for _, d := range docs {
		f.Records = append(f.Records, d)
	}
	data, err := json.MarshalIndent(f, "", " ")
	require.NoError(t, err)
	vs, err := VerifyFile(data, key.Public().(ed25519.PublicKey))
	require.NoError(t, err)
	require.Len(t, vs, 2)
	for _, v := range vs {
		assert.NoError(t, v.Err)
	}
	list, _ := json.Marshal(f.Records)
	vs, err = VerifyFile(list)
	require.NoError(t, err)
	assert.Len(t, vs, 2)
	vs, err = VerifyFile(docs[1])
	require.NoError(t, err)
	assert.Len(t, vs, 1)
	_, err = VerifyFile([]byte(`{"format":"x","node":"n","records":[]}`))
	assert.Error(t, err)
	_, err = VerifyFile([]byte(`nonsense`))
	assert.Error(t, err)

	var text bytes.Buffer
	require.NoError(t, WriteText(&text, "node rack1-07", vs))
	assert.Contains(t, text.String(), "Signature:                 valid, Ed25519 key SHA256:")
	assert.Contains(t, text.String(), "Destination:               recycling")
}

func TestKeyIsCreatedOnceAndPrivate(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	k1, err := LoadOrCreateKey(dir)
	require.NoError(t, err)
	st, err := os.Stat(filepath.Join(dir, KeyFile))
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o600), st.Mode().Perm())
	k2, err := LoadOrCreateKey(dir)
	require.NoError(t, err)
	assert.True(t, k1.Equal(k2), "the same key after a restart")

	require.NoError(t, os.Chmod(filepath.Join(dir, KeyFile), 0o644))
	_, err = LoadOrCreateKey(dir)
	assert.ErrorContains(t, err, "readable by others")
	require.NoError(t, os.Chmod(filepath.Join(dir, KeyFile), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, KeyFile), []byte("junk"), 0o600))
	_, err = LoadOrCreateKey(dir)
	assert.ErrorContains(t, err, "not a PEM")
	assert.True(t, strings.HasPrefix(Fingerprint(k1.Public().(ed25519.PublicKey)), "SHA256:"))
}
