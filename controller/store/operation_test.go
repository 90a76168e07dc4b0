package store

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/diskcheck"
	"github.com/anvil-metal/anvil/protocol"
)

// An operation shown under Ironic's keys (the API, an export) and split
// back (an import, the migration) is the same operation, and the keys it
// does not own stay where they are.
func TestInternalInfoRoundTrip(t *testing.T) {
	at := time.Date(2026, 5, 6, 7, 8, 9, 123456789, time.UTC)
	version := "1.0"
	steps := []protocol.Step{{Interface: "deploy", Step: "erase_devices", Priority: 10, Args: map[string]any{"iterations": 2.0}}}
	op := Operation{Clean: &StepPlan{Steps: steps, Index: 0}, Deploy: &StepPlan{Steps: steps, Index: 1},
		ManualClean: true, CleaningRequestedBy: `manual cleaning requested by user "alice" (http_basic)`, UserCleanSteps: steps, UserDeploySteps: steps,
		Agent: AgentSession{Token: "t", BootID: "b", Version: &version, LastHeartbeat: at,
			BootTimings: []protocol.BootPhase{{Phase: "kernel", Seconds: 1}}, Steps: &StepCache{Fingerprint: "fp", RefreshedAt: at},
			Command:       &AgentCommand{Command: protocol.Command{ID: "c", Name: "n"}, IssuedAt: at},
			CommandStatus: &protocol.CommandStatus{ID: "c", State: "RUNNING", StartedAt: at},
			Await:         &Await{Reason: "boot", Since: at}, Booted: true, BootNonce: "nonce", Address: "10.0.0.5",
			Claims: []Claim{{At: at, Via: "lookup", Address: "10.0.0.6", BootID: "x", HolderAddress: "10.0.0.5", HolderBootID: "b"}}},
		Disks: DiskRecords{Check: &DiskCheck{Step: "deploy.erase_devices", At: "2026-05-06T07:08:09Z", OK: true,
			Result: diskcheck.Result{Seen: []diskcheck.Disk{{Name: "/dev/sda", Serial: "S1", Size: 1 << 30}}}},
			AtDeploy: []protocol.Disk{{Name: "/dev/sda", Serial: "S1", Size: 1 << 30}}}}
	n := &Node{DriverInternalInfo: map[string]any{"agent_url": "http://10.0.0.5:9999"}, Operation: op}
	view := n.InternalInfo()
	// through JSON, as an export is
	b, err := json.Marshal(view)
	require.NoError(t, err)
	var doc map[string]any
	require.NoError(t, json.Unmarshal(b, &doc))
	back := &Node{DriverInternalInfo: doc}
	require.True(t, back.AdoptLegacyOperation())
	assert.Equal(t, map[string]any{"agent_url": "http://10.0.0.5:9999"}, back.DriverInternalInfo)
	assert.Equal(t, op, back.Operation)
}

// A value this release would not show back exactly (a hand-written partial
// step) is not taken: the document keeps it, nothing is lost.
func TestSplitKeepsWhatItCannotShowBack(t *testing.T) {
	dii := map[string]any{"clean_steps": []any{map[string]any{"interface": "deploy", "step": "erase_devices"}},
		"agent_last_heartbeat": "yesterday", "agent_booted": "yes", "agent_secret_token": "t", "agent_boot_id": ""}
	op, rest := SplitInternalInfo(dii)
	assert.Nil(t, op.Clean)
	assert.False(t, op.Agent.Booted)
	assert.True(t, op.Agent.LastHeartbeat.IsZero())
	assert.Equal(t, "t", op.Agent.Token)
	assert.Equal(t, map[string]any{"clean_steps": dii["clean_steps"], "agent_last_heartbeat": "yesterday", "agent_booted": "yes"}, rest)
}
