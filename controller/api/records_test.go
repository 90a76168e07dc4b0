package api

import (
	"bytes"
	"crypto/ed25519"
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/crypto/bcrypt"

	"github.com/anvil-metal/anvil/controller/erasure"
	"github.com/anvil-metal/anvil/controller/simagent"
)

// twoDiskErase is an erase_devices result of the agent's shape: an NVMe
// namespace crypto-erased and a SATA disk overwritten, and a DVD skipped.
var twoDiskErase = map[string]any{"devices": []any{
	map[string]any{"plan": map[string]any{"device": "/dev/nvme0n1", "size": 960197124096, "controller": "nvme", "model": "PM9A3", "serial": "S64G"},
		"status": "erased", "method": "nvme_format_crypto_erase",
		"attempts": []any{map[string]any{"method": "nvme_format_crypto_erase", "verification": map[string]any{"pattern": "zeros", "samples": 66, "bytes_checked": 4325376}}}},
	map[string]any{"plan": map[string]any{"device": "/dev/sda", "size": 4000787030016, "rotational": true, "vendor": "ATA", "model": "ST4000", "serial": "ZC1"},
		"status": "erased", "method": "overwrite",
		"attempts": []any{map[string]any{"method": "overwrite", "passes": 2, "verification": map[string]any{"pattern": "zeros", "samples": 66, "bytes_checked": 4325376}}}},
	map[string]any{"plan": map[string]any{"device": "/dev/sr0", "action": "skip", "reason": "optical drive"}, "status": "skipped"},
}}

func recordsEnv(t *testing.T, db string) (*testEnv, ed25519.PublicKey) {
	t.Helper()
	key, err := erasure.LoadOrCreateKey(t.TempDir())
	require.NoError(t, err)
	signer := erasure.NewSigner(key)
	cc := agentConfig()
	cc.Records = signer
	cc.RamdiskSHA256 = func() string { return "5eed" }
	return newEnvWith(t, cc, db, func(c *Config) { c.RecordsKey = signer.PublicKey() }), signer.PublicKey()
}

func recordsOf(t *testing.T, e *testEnv, node string) []json.RawMessage {
	t.Helper()
	r := e.do("GET", "/v1/nodes/"+node+"/erase-records", latest, nil)
	require.Equal(t, http.StatusOK, r.status, string(r.body))
	var body struct {
		Records []json.RawMessage `json:"erase_records"`
	}
	require.NoError(t, json.Unmarshal(r.body, &body))
	return body.Records
}

// TestEraseRecordsAPI: a retired node cleaned for disposal gets one signed
// record per erased disk, listed in its history; the records verify with
// the served public key, survive a restart and outlive the node.
func TestEraseRecordsAPI(t *testing.T) {
	db := t.TempDir() + "/anvil.db"
	e, pub := recordsEnv(t, db)
	id := e.agentNode("disp1", map[string]any{"extra": map[string]any{"sanitization_destination": "recycling"}})
	require.Equal(t, 200, e.do("PATCH", "/v1/nodes/disp1", latest, []map[string]any{
		{"op": "replace", "path": "/retired", "value": true}, {"op": "add", "path": "/retired_reason", "value": "end of life"}}).status)
	a := simagent.New(e.srv.URL, mac1)
	a.Outcomes["deploy.erase_devices"] = simagent.Outcome{Summary: "2 disks erased", Result: twoDiskErase}
	// seed 004: a retired node is cleaned for disposal (manual cleaning;
	// undeploying a retired node cleans it the same way)
	require.Equal(t, 202, e.provision("disp1", "clean", map[string]any{
		"clean_steps": []map[string]any{{"interface": "deploy", "step": "erase_devices"}}}).status)
	e.waitState("disp1", "clean wait")
	e.drive(a, "disp1", "manageable", nil)

	key := e.do("GET", "/v1/erase-records/public-key", latest, nil).json(t)
	assert.Equal(t, erasure.EncodePublicKey(pub), key["public_key"])
	assert.Equal(t, erasure.Fingerprint(pub), key["fingerprint"])

	docs := recordsOf(t, e, "disp1")
	require.Len(t, docs, 2, "one per erased disk, none for the skipped DVD")
	bySerial := map[string]erasure.Record{}
	for _, d := range docs {
		v := erasure.Verify(d, pub)
		require.NoError(t, v.Err)
		bySerial[v.Record.Media.Serial] = v.Record
	}
	nv, hd := bySerial["S64G"], bySerial["ZC1"]
	assert.Equal(t, "purge", nv.Sanitization.Category)
	assert.Equal(t, "nvme_format_crypto_erase", nv.Sanitization.Method)
	assert.Equal(t, int64(960197124096), nv.Media.SizeBytes)
	assert.Equal(t, "clear", hd.Sanitization.Category)
	assert.Equal(t, 2, hd.Sanitization.Passes)
	for _, r := range []erasure.Record{nv, hd} {
		assert.Equal(t, id, r.Node.UUID)
		assert.True(t, r.Node.Retired)
		assert.Equal(t, "end of life", r.Node.RetiredReason)
		assert.Equal(t, "recycling", r.Destination)
		assert.Equal(t, "test-host", r.Controller)
		assert.Equal(t, a.Version, r.Tool.Version)
		assert.Equal(t, "5eed", r.Tool.ImageSHA256)
		assert.Contains(t, r.RequestedBy, "manual cleaning")
	}
	hist := historyText(e, "disp1")
	assert.Contains(t, hist, "retired node cleaned for disposal: sanitization records signed: ")
	assert.Contains(t, hist, "/dev/sda (serial ZC1, clear: overwrite) record "+hd.UUID)

	// restart: the same records; the node deleted: still listed by UUID
	e.stop()
	e2, _ := recordsEnv(t, db)
	assert.Equal(t, docs, recordsOf(t, e2, id))
	require.Equal(t, 204, e2.do("DELETE", "/v1/nodes/"+id, latest, nil).status)
	assert.Equal(t, docs, recordsOf(t, e2, id))
	assert.Equal(t, 404, e2.do("GET", "/v1/nodes/disp1/erase-records", latest, nil).status, "a name is gone with its node")
}

func TestNoRecordsWithoutAKey(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	assert.Equal(t, 404, e.do("GET", "/v1/erase-records/public-key", latest, nil).status)
}

// TestEraseRecordsNameTheRequester: requested_by names the policy and the
// user of the request that started the cleaning: the http_basic user of a
// provide (automated cleaning), kept in driver_internal_info while the
// cleaning runs; under noauth, the unverified identity header.
func TestEraseRecordsNameTheRequester(t *testing.T) {
	hash, err := bcrypt.GenerateFromPassword([]byte("s3cret"), bcrypt.MinCost)
	require.NoError(t, err)
	h, err := ParseHTPasswd(strings.NewReader("alice:" + string(hash) + "\n"))
	require.NoError(t, err)
	key, err := erasure.LoadOrCreateKey(t.TempDir())
	require.NoError(t, err)
	signer := erasure.NewSigner(key)
	cc := agentConfig()
	cc.Records = signer
	e := newEnvWith(t, cc, ":memory:", func(c *Config) { c.Auth, c.RecordsKey = h, signer.PublicKey() })
	e.user, e.pass = "alice", "s3cret"
	e.agentNode("req1", nil)
	a := simagent.New(e.srv.URL, mac1)
	a.Outcomes["deploy.erase_devices"] = simagent.Outcome{Summary: "2 disks erased", Result: twoDiskErase}
	require.Equal(t, 202, e.provision("req1", "provide", nil).status)
	want := `automated cleaning (controller policy) on provide requested by user "alice" (http_basic)`
	var during any
	e.drive(a, "req1", "available", func(n map[string]any) {
		if v, ok := n["driver_internal_info"].(map[string]any)["cleaning_requested_by"]; ok {
			during = v
		}
	})
	assert.Equal(t, want, during, "shown while the cleaning runs")
	assert.NotContains(t, e.do("GET", "/v1/nodes/req1", latest, nil).json(t)["driver_internal_info"], "cleaning_requested_by", "gone when it is done")
	docs := recordsOf(t, e, "req1")
	require.Len(t, docs, 2)
	for _, d := range docs {
		v := erasure.Verify(d, signer.PublicKey())
		require.NoError(t, v.Err)
		assert.Equal(t, want, v.Record.RequestedBy)
	}

	// noauth: a manual clean by whoever the identity headers claim
	e2, pub := recordsEnv(t, ":memory:")
	e2.agentNode("req2", nil)
	a2 := simagent.New(e2.srv.URL, mac1)
	a2.Outcomes["deploy.erase_devices"] = simagent.Outcome{Summary: "2 disks erased", Result: twoDiskErase}
	body, err := json.Marshal(map[string]any{"target": "clean", "clean_steps": []map[string]any{{"interface": "deploy", "step": "erase_devices"}}})
	require.NoError(t, err)
	req, err := http.NewRequest("PUT", e2.srv.URL+"/v1/nodes/req2/states/provision", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set(versionHeader, latest)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-User-Name", "bob")
	res, err := e2.srv.Client().Do(req)
	require.NoError(t, err)
	res.Body.Close()
	require.Equal(t, 202, res.StatusCode)
	e2.drive(a2, "req2", "manageable", nil)
	for _, d := range recordsOf(t, e2, "req2") {
		v := erasure.Verify(d, pub)
		require.NoError(t, v.Err)
		assert.Equal(t, `manual cleaning requested by noauth (unverified X-User-Name "bob")`, v.Record.RequestedBy)
	}
}

// TestEraseRecordsFromEveryEraseStep: a manual clean running every erase
// step. erase_devices with arguments certifies what it erased, the member
// disks of a software RAID through their array (not the array itself);
// erase_devices_express the NVMe namespaces it formatted; the metadata
// wipes certify nothing, and the history says why.
func TestEraseRecordsFromEveryEraseStep(t *testing.T) {
	e, pub := recordsEnv(t, ":memory:")
	e.agentNode("all", nil)
	a := simagent.New(e.srv.URL, mac1)
	a.Outcomes["deploy.erase_devices_metadata"] = simagent.Outcome{Summary: "/dev/sda metadata wiped",
		Result: map[string]any{"devices": []any{map[string]any{"device": "/dev/sda", "removed": []any{"gpt"}}}}}
	a.Outcomes["deploy.erase_devices_express"] = simagent.Outcome{Summary: "/dev/nvme0n1 formatted; /dev/sdd metadata wiped",
		Result: map[string]any{"nvme": map[string]any{"devices": []any{
			map[string]any{"plan": map[string]any{"device": "/dev/nvme0n1", "size": 64 << 30, "controller": "nvme", "serial": "SIM-0001"},
				"status": "erased", "method": "nvme_format_crypto_erase",
				"attempts": []any{map[string]any{"method": "nvme_format_crypto_erase", "verification": map[string]any{"pattern": "zeros", "samples": 66, "bytes_checked": 1}}}}}},
			"metadata": map[string]any{"devices": []any{map[string]any{"device": "/dev/sdd"}}}}}
	a.Outcomes["deploy.erase_devices"] = simagent.Outcome{Summary: "md1 erased", Result: json.RawMessage(`{"devices":[
		{"plan":{"device":"/dev/sdc","size":1000000000,"action":"skip","serial":"SC","controller":"sata","erased_through":["/dev/md1"],"md_members":["/dev/sdc"]},"status":"skipped"},
		{"plan":{"device":"/dev/sde","size":1000000000,"action":"skip","serial":"SE","controller":"sata","erased_through":["/dev/md1"],"md_members":["/dev/sde"]},"status":"skipped"},
		{"plan":{"device":"/dev/md1","size":990000000,"action":"erase","controller":"md"},"status":"erased","method":"overwrite",
		 "attempts":[{"method":"overwrite","passes":3,"verification":{"pattern":"zeros","samples":66,"bytes_checked":270336}}]}]}`)}
	require.Equal(t, 202, e.provision("all", "clean", map[string]any{"clean_steps": []map[string]any{
		{"interface": "deploy", "step": "erase_devices_metadata"},
		{"interface": "deploy", "step": "erase_devices_express"},
		{"interface": "deploy", "step": "erase_devices", "args": map[string]any{"iterations": 2, "enable_ata_secure_erase": false}}}}).status)
	e.drive(a, "all", "manageable", nil)
	assert.Equal(t, []string{"deploy.erase_devices_metadata", "deploy.erase_devices_express", "deploy.erase_devices"}, a.Steps())

	got := map[string]erasure.Record{}
	for _, d := range recordsOf(t, e, "all") {
		v := erasure.Verify(d, pub)
		require.NoError(t, v.Err)
		got[v.Record.Media.Device] = v.Record
	}
	require.Len(t, got, 3, "the NVMe namespace and both RAID members; no array, no metadata-wiped disk: %v", got)
	assert.Equal(t, "purge", got["/dev/nvme0n1"].Sanitization.Category)
	for _, dev := range []string{"/dev/sdc", "/dev/sde"} {
		r := got[dev]
		assert.Equal(t, "clear", r.Sanitization.Category, dev)
		assert.Equal(t, "overwrite via /dev/md1", r.Sanitization.Method, dev)
		assert.Equal(t, "through software RAID /dev/md1: overwrite, 3 pass(es), the last with zeros", r.Sanitization.Technique, dev)
		assert.Contains(t, r.Sanitization.Scope, "written through /dev/md1", dev)
		assert.Contains(t, r.RequestedBy, "manual cleaning requested by noauth", dev)
	}
	hist := historyText(e, "all")
	assert.Contains(t, hist, "no sanitization records for deploy.erase_devices_metadata: a metadata wipe removes partition tables and signatures, not the data")
	assert.Contains(t, hist, "sanitization records signed: /dev/nvme0n1 (serial SIM-0001, purge: nvme_format_crypto_erase) record ")
	assert.Contains(t, hist, "erase_devices_express only wiped the metadata of devices without NVMe Format, which is not a clear or purge")
	assert.Contains(t, hist, "/dev/sdc (serial SC, clear: overwrite via /dev/md1) record ")
}
