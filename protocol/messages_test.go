package protocol

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func golden(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "testdata", "protocol", name))
	require.NoError(t, err)
	return b
}

// roundTrip checks that decoding then encoding keeps the document's meaning.
func roundTrip(t *testing.T, raw []byte, v any) {
	t.Helper()
	out, err := json.Marshal(v)
	require.NoError(t, err)
	var want, got any
	require.NoError(t, json.Unmarshal(raw, &want))
	require.NoError(t, json.Unmarshal(out, &got))
	assert.Equal(t, want, got)
}

func TestGoldenHeartbeats(t *testing.T) {
	raw := golden(t, "heartbeat-running.json")
	hb, err := DecodeHeartbeat(bytes.NewReader(raw))
	require.NoError(t, err)
	assert.Equal(t, "5b0a8f0e-4a55-4f6b-9a53-0c8f8b3f2d11", hb.BootID)
	require.NotNil(t, hb.Steps)
	assert.Len(t, hb.Steps.Clean, 3)
	assert.True(t, hb.Steps.Deploy[0].ArgsInfo["image_url"].Required)
	assert.Equal(t, 42.5, hb.Command.Progress.Percent)
	assert.Len(t, hb.BootTimings, 4)
	roundTrip(t, raw, hb)

	raw = golden(t, "heartbeat-failed.json")
	hb, err = DecodeHeartbeat(bytes.NewReader(raw))
	require.NoError(t, err)
	assert.Equal(t, ErrTypeBlockDeviceErase, hb.Command.Error.Type)
	roundTrip(t, raw, hb)
}

func TestGoldenReplies(t *testing.T) {
	raw := golden(t, "heartbeat-response.json")
	r, err := DecodeHeartbeatResponse(bytes.NewReader(raw))
	require.NoError(t, err)
	assert.Equal(t, "erase_devices", r.Command.Step.Step)
	roundTrip(t, raw, r)

	raw = golden(t, "lookup-response.json")
	l, err := DecodeLookupResponse(bytes.NewReader(raw))
	require.NoError(t, err)
	require.NotNil(t, l.Config.Erase)
	require.NotNil(t, l.Config.Erase.Concurrency)
	assert.Equal(t, 4, *l.Config.Erase.Concurrency)
	require.NotNil(t, l.Config.Erase.ContinueOnSecureErr, "a false the controller sent is kept, not taken for absent")
	assert.False(t, *l.Config.Erase.ContinueOnSecureErr)
	roundTrip(t, raw, l)
}

func TestHeartbeatValidation(t *testing.T) {
	base := func() map[string]any {
		var m map[string]any
		require.NoError(t, json.Unmarshal(golden(t, "heartbeat-running.json"), &m))
		return m
	}
	tests := map[string]struct {
		edit func(m map[string]any)
		want string
	}{
		"unknown field":         {func(m map[string]any) { m["callback"] = "x" }, "unknown field"},
		"no token":              {func(m map[string]any) { delete(m, "agent_token") }, "agent_token is required"},
		"no boot id":            {func(m map[string]any) { m["boot_id"] = "" }, "boot_id is required"},
		"fingerprint mismatch":  {func(m map[string]any) { m["fingerprint"] = "other" }, "differs from fingerprint"},
		"bad interface":         {func(m map[string]any) { step(m, 0)["interface"] = "console" }, "unknown interface"},
		"duplicate step":        {func(m map[string]any) { step(m, 1)["step"] = "erase_devices_metadata" }, "listed twice"},
		"negative priority":     {func(m map[string]any) { step(m, 0)["priority"] = -1 }, "negative priority"},
		"bad state":             {func(m map[string]any) { cmd(m)["state"] = "DONE" }, "unknown state"},
		"unknown command":       {func(m map[string]any) { cmd(m)["name"] = "format_c" }, "known name"},
		"progress out of range": {func(m map[string]any) { cmd(m)["progress"].(map[string]any)["percent"] = 101 }, "out of range"},
		"failed without error":  {func(m map[string]any) { cmd(m)["state"] = "FAILED" }, "failed without an error"},
		"summary too long":      {func(m map[string]any) { cmd(m)["summary"] = strings.Repeat("x", MaxSummary+1) }, "at most 4096"},
		"negative boot timing":  {func(m map[string]any) { m["boot_timings"] = []any{map[string]any{"phase": "x", "seconds": -1}} }, "non-negative"},
	}
	for name, tc := range tests {
		t.Run(name, func(t *testing.T) {
			m := base()
			tc.edit(m)
			b, err := json.Marshal(m)
			require.NoError(t, err)
			_, err = DecodeHeartbeat(bytes.NewReader(b))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tc.want)
		})
	}
	_, err := DecodeHeartbeat(strings.NewReader(`{"agent_token":"t"} {}`))
	assert.ErrorContains(t, err, "trailing data")
	_, err = DecodeHeartbeat(strings.NewReader(`{"agent_token":"` + strings.Repeat("a", MaxMessageBytes) + `"}`))
	assert.Error(t, err)
}

func step(m map[string]any, i int) map[string]any {
	return m["steps"].(map[string]any)["clean"].([]any)[i].(map[string]any)
}

func cmd(m map[string]any) map[string]any { return m["command"].(map[string]any) }

func TestReplyValidation(t *testing.T) {
	tests := map[string]string{
		`{"heartbeat_interval": 0}`: "must be positive",
		`{"heartbeat_interval": 5, "command": {"id": "1", "name": "execute_clean_step"}}`:        "needs a step",
		`{"heartbeat_interval": 5, "command": {"id": "", "name": "inventory"}}`:                  "needs an id",
		`{"node": {}, "config": {"agent_token": "abc", "heartbeat_timeout": 300}}`:               "node.uuid",
		`{"node": {"uuid": "u"}, "config": {"agent_token": "******", "heartbeat_timeout": 300}}`: "no agent token",
	}
	for doc, want := range tests {
		var err error
		if strings.Contains(doc, `"node"`) {
			_, err = DecodeLookupResponse(strings.NewReader(doc))
		} else {
			_, err = DecodeHeartbeatResponse(strings.NewReader(doc))
		}
		require.Error(t, err, doc)
		assert.Contains(t, err.Error(), want, doc)
	}
}

// TestUnknownFields: a ramdisk must keep working when a newer controller
// adds fields to its replies, while the controller stays strict with what
// agents send.
func TestUnknownFields(t *testing.T) {
	withField := func(t *testing.T, name string, edit func(m map[string]any)) []byte {
		t.Helper()
		var m map[string]any
		require.NoError(t, json.Unmarshal(golden(t, name), &m))
		edit(m)
		b, err := json.Marshal(m)
		require.NoError(t, err)
		return b
	}
	replies := map[string]func(m map[string]any){
		"top level":       func(m map[string]any) { m["drain"] = true },
		"in the command":  func(m map[string]any) { cmd(m)["deadline"] = "2030-01-01T00:00:00Z" },
		"in the step":     func(m map[string]any) { cmd(m)["step"].(map[string]any)["requires_ramdisk"] = true },
		"object-valued":   func(m map[string]any) { m["policy"] = map[string]any{"x": []any{1, 2}} },
		"several at once": func(m map[string]any) { m["a"], m["b"] = 1, "2" },
	}
	for name, edit := range replies {
		t.Run("heartbeat reply, "+name, func(t *testing.T) {
			r, err := DecodeHeartbeatResponse(bytes.NewReader(withField(t, "heartbeat-response.json", edit)))
			require.NoError(t, err)
			assert.Equal(t, "erase_devices", r.Command.Step.Step)
			assert.Equal(t, 10.0, r.HeartbeatInterval)
		})
	}
	t.Run("lookup reply", func(t *testing.T) {
		l, err := DecodeLookupResponse(bytes.NewReader(withField(t, "lookup-response.json", func(m map[string]any) {
			m["config"].(map[string]any)["metrics"] = map[string]any{"backend": "noop"}
			m["config"].(map[string]any)["erase"].(map[string]any)["passes_v2"] = 3
		})))
		require.NoError(t, err)
		assert.Equal(t, "node-1", l.Node.Name)
	})

	agentMessages := map[string]func(m map[string]any){
		"top level":      func(m map[string]any) { m["callback_url"] = "http://x" },
		"in the command": func(m map[string]any) { cmd(m)["pid"] = 1 },
		"in a step":      func(m map[string]any) { step(m, 0)["hidden"] = true },
	}
	for name, edit := range agentMessages {
		t.Run("heartbeat, "+name, func(t *testing.T) {
			_, err := DecodeHeartbeat(bytes.NewReader(withField(t, "heartbeat-running.json", edit)))
			assert.ErrorContains(t, err, "unknown field")
		})
	}

	// Leniency is about fields only: a reply is still one bounded document.
	_, err := DecodeHeartbeatResponse(strings.NewReader(`{"heartbeat_interval": 5} {}`))
	assert.ErrorContains(t, err, "trailing data")
	_, err = DecodeHeartbeatResponse(strings.NewReader(`{"heartbeat_interval": 5, "pad": "` + strings.Repeat("a", MaxMessageBytes) + `"}`))
	assert.Error(t, err)
}

// TestErasePolicyAbsentFields: a knob the controller did not send stays nil
// (the agent keeps its default); one it sent, even false or 0, is kept.
func TestErasePolicyAbsentFields(t *testing.T) {
	tests := []struct {
		name, doc string
		check     func(t *testing.T, p ErasePolicy)
	}{
		{"empty object", `{}`, func(t *testing.T, p ErasePolicy) { assert.Equal(t, ErasePolicy{}, p) }},
		{"partial", `{"iterations": 2}`, func(t *testing.T, p ErasePolicy) {
			assert.Equal(t, ErasePolicy{Iterations: new(2)}, p)
		}},
		{"explicit false and zero", `{"enable_nvme_format": false, "zeroize": false, "iterations": 0}`, func(t *testing.T, p ErasePolicy) {
			assert.Equal(t, ErasePolicy{EnableNVMeFormat: new(false), Zeroize: new(false), Iterations: new(0)}, p)
		}},
		{"null is absent", `{"enable_ata_erase": null}`, func(t *testing.T, p ErasePolicy) { assert.Nil(t, p.EnableATAErase) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var p ErasePolicy
			require.NoError(t, json.Unmarshal([]byte(tt.doc), &p))
			tt.check(t, p)
		})
	}
	// Unset knobs are left out of the document, so an agent cannot mistake
	// them for an operator's false.
	b, err := json.Marshal(ErasePolicy{Concurrency: new(2), SkipReadOnly: new(false)})
	require.NoError(t, err)
	assert.JSONEq(t, `{"concurrency": 2, "skip_read_only": false}`, string(b))
}

func TestStepArgsAndOrder(t *testing.T) {
	s := Step{Interface: "bios", Step: "apply_configuration", ArgsInfo: map[string]ArgInfo{"settings": {Required: true}, "reset": {}}}
	assert.NoError(t, s.CheckArgs(map[string]any{"settings": []any{}}))
	assert.EqualError(t, s.CheckArgs(nil), "step bios.apply_configuration is missing required arguments: settings")
	assert.EqualError(t, s.CheckArgs(map[string]any{"settings": 1, "x": 2}), "step bios.apply_configuration has unexpected arguments: x")
	assert.EqualError(t, s.CheckArgs(map[string]any{"x": 2}), "step bios.apply_configuration is missing required arguments: settings, and has unexpected arguments: x")

	steps := []Step{{Interface: "raid", Step: "a", Priority: 10}, {Interface: "deploy", Step: "b", Priority: 99},
		{Interface: "power", Step: "c", Priority: 10}, {Interface: "deploy", Step: "d", Priority: 10}}
	SortSteps(steps)
	var keys []string
	for _, s := range steps {
		keys = append(keys, s.Key())
	}
	assert.Equal(t, []string{"deploy.b", "power.c", "deploy.d", "raid.a"}, keys)
}

func FuzzDecodeHeartbeat(f *testing.F) {
	for _, n := range []string{"heartbeat-running.json", "heartbeat-failed.json"} {
		b, err := os.ReadFile(filepath.Join("..", "testdata", "protocol", n))
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{}`))
	f.Add([]byte(`{"command":{"progress":{"percent":1e309}}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		hb, err := DecodeHeartbeat(bytes.NewReader(b))
		if err != nil {
			return
		}
		// whatever decodes and validates must survive a round trip
		out, err := json.Marshal(hb)
		if err != nil {
			t.Fatalf("valid heartbeat does not encode: %v", err)
		}
		if _, err := DecodeHeartbeat(bytes.NewReader(out)); err != nil {
			t.Fatalf("re-encoded heartbeat no longer decodes: %v\n%s", err, out)
		}
	})
}

func FuzzDecodeHeartbeatResponse(f *testing.F) {
	b, err := os.ReadFile(filepath.Join("..", "testdata", "protocol", "heartbeat-response.json"))
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b)
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeHeartbeatResponse(bytes.NewReader(b))
		if err == nil && r.HeartbeatInterval <= 0 {
			t.Fatal("accepted a non-positive interval")
		}
	})
}

func TestNodeStepKey(t *testing.T) {
	clean := map[string]any{"interface": "deploy", "step": "erase_devices"}
	deploy := map[string]any{"interface": "deploy", "step": "write_image"}
	assert.Equal(t, "deploy.erase_devices", NodeStepKey(clean, deploy), "the clean step first")
	assert.Equal(t, "deploy.write_image", NodeStepKey(map[string]any{}, deploy))
	assert.Empty(t, NodeStepKey(nil, nil))
}
