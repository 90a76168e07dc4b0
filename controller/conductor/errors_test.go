package conductor

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
)

func TestErrorWrapKeepsItsCause(t *testing.T) {
	err := Wrap(CodeConflict, store.ErrDuplicateName, "A node with name %s already exists.", "n1")
	assert.EqualError(t, err, "A node with name n1 already exists.")
	assert.ErrorIs(t, err, store.ErrDuplicateName)
	var ce *Error
	require.ErrorAs(t, err, &ce)
	assert.Equal(t, CodeConflict, ce.Code)
}

func TestRefusalsOfNodeChanges(t *testing.T) {
	host, inst := "c1", "inst-1"
	target := string(state.Available)
	for _, tc := range []struct {
		name              string
		node              store.Node
		update, deleteErr Code // 0: allowed
	}{
		{"resting", store.Node{ProvisionState: "manageable"}, 0, 0},
		{"locked", store.Node{ProvisionState: "manageable", Reservation: &host}, CodeLocked, CodeLocked},
		{"in transition", store.Node{ProvisionState: "cleaning", TargetProvisionState: &target}, CodeConflict, CodeConflict},
		{"protected", store.Node{ProvisionState: "active", Protected: true}, 0, CodeForbidden},
		{"protected in maintenance", store.Node{ProvisionState: "active", Protected: true, Maintenance: true}, 0, CodeForbidden},
		{"deployed", store.Node{ProvisionState: "active"}, 0, CodeConflict},
		{"deployed in maintenance", store.Node{ProvisionState: "active", Maintenance: true}, 0, 0},
		{"associated", store.Node{ProvisionState: "available", InstanceUUID: &inst}, 0, CodeConflict},
	} {
		n := tc.node
		n.UUID = "node-1"
		for _, check := range []struct {
			what string
			err  error
			want Code
		}{{"update", CheckUpdatable(&n), tc.update}, {"delete", CheckDeletable(&n), tc.deleteErr}} {
			if check.want == 0 {
				assert.NoError(t, check.err, "%s: %s", tc.name, check.what)
				continue
			}
			var ce *Error
			require.True(t, errors.As(check.err, &ce), "%s: %s: %v", tc.name, check.what, check.err)
			assert.Equal(t, check.want, ce.Code, "%s: %s: %s", tc.name, check.what, ce.Msg)
		}
	}
}

// Unset settings get their defaults; a zero timeout stays zero (disabled),
// and no default is written anywhere but DefaultConfig.
func TestConfigDefaults(t *testing.T) {
	got := Config{Workers: 3, Agent: AgentConfig{SilenceTimeout: time.Second}}.WithDefaults()
	d := DefaultConfig()
	assert.Equal(t, 3, got.Workers, "a set value stays")
	assert.Equal(t, time.Second, got.Agent.SilenceTimeout)
	assert.Equal(t, d.Agent.HeartbeatInterval, got.Agent.HeartbeatInterval)
	assert.Equal(t, d.LeaseTTL, got.LeaseTTL)
	assert.Equal(t, d.PowerSync.Ticks, got.PowerSync.Ticks)
	assert.Zero(t, got.CleanWaitTimeout, "zero disables a timeout")
	assert.Zero(t, got.PowerSync.Interval, "zero disables power sync")
	assert.Equal(t, d, d.WithDefaults().withoutFuncs(), "the defaults are complete")
}

// withoutFuncs clears what DefaultConfig leaves to New (logger, clock).
func (cfg Config) withoutFuncs() Config {
	cfg.Logger, cfg.Now = nil, nil
	return cfg
}
