package simagent

import (
	"encoding/json"
	"os"
	"testing"

	"github.com/anvil-metal/anvil/protocol"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The simulated agent offers the real agent's steps with the same
// priorities and arguments (descriptions aside): the controller validates
// manual cleaning and deploy steps against them, so a simulated fleet
// must accept and refuse what a real one does. The real catalogue is
// kept in testdata by hardware/generic's TestCatalogueMatchesTestdata.
func TestCatalogueIsTheRealAgents(t *testing.T) {
	b, err := os.ReadFile("../../testdata/protocol/generic-catalogue.json")
	require.NoError(t, err)
	var real struct{ Clean, Deploy []protocol.Step }
	require.NoError(t, json.Unmarshal(b, &real))
	sim := New("http://127.0.0.1:1")
	assert.Equal(t, shape(real.Clean), shape(sim.Clean), "clean steps")
	assert.Equal(t, shape(real.Deploy), shape(sim.Deploy), "deploy steps")
}

// shape is a step list without argument descriptions.
func shape(steps []protocol.Step) []protocol.Step {
	out := make([]protocol.Step, len(steps))
	for i, s := range steps {
		s.ArgsInfo = nil
		for name, a := range steps[i].ArgsInfo {
			if s.ArgsInfo == nil {
				s.ArgsInfo = map[string]protocol.ArgInfo{}
			}
			s.ArgsInfo[name] = protocol.ArgInfo{Required: a.Required}
		}
		out[i] = s
	}
	return out
}
