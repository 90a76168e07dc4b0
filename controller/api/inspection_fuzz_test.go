package api

import (
	"encoding/json"
	"net"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/protocol"
)

// FuzzInspectionReport feeds arbitrary bodies to the continue_inspection
// parser (an unauthenticated endpoint, as in fuzz_test.go): a client
// error, or a report whose MACs are valid and unique, whose inventory is
// an object the store can keep within its bound, never a panic.
func FuzzInspectionReport(f *testing.F) {
	for _, seed := range []string{
		`{"inventory":{"interfaces":[{"name":"eth0","mac_address":"52:54:00:aa:00:01"}],"bmc_address":"192.0.2.1"},"logs":"H4sI"}`,
		`{"inventory":{"interfaces":[{"mac_address":"52-54-00-AA-00-01"},{"mac_address":"52:54:00:aa:00:01"}],"bmc_v6address":"::/0"}}`,
		`{"inventory":{"interfaces":[{"mac_address":"nope"}],"bmc_address":null}}`,
		`{"inventory":{"interfaces":[{"mac_address":1}]}}`, `{"inventory":{"interfaces":[]}}`,
		`{"inventory":{"interfaces":null}}`, `{"inventory":[]}`, `{"inventory":"\u0000"}`, `{}`, `[]`, `null`, `{"inventory":{"interfaces":[{"mac_address":"aa:bb:cc:dd:ee:ff:00:11"}]}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		rep, err := parseInspection(body)
		if err != nil {
			assertClientError(t, err)
			return
		}
		require.LessOrEqual(t, len(rep.inventory), maxInspectionInventory)
		require.NoError(t, protocol.CheckStoredJSON(rep.inventory))
		var inv map[string]any
		require.NoError(t, json.Unmarshal(rep.inventory, &inv), "the inventory is an object")
		require.NotNil(t, inv)
		seen := map[string]bool{}
		for _, m := range rep.macs {
			hw, err := net.ParseMAC(m)
			require.NoError(t, err)
			require.Len(t, hw, 6)
			require.Equal(t, hw.String(), m, "normalised")
			require.False(t, seen[m], "MAC %s twice", m)
			seen[m] = true
		}
		require.LessOrEqual(t, len(rep.macs), maxInspectionNICs)
		for _, b := range rep.bmcs {
			require.NotEmpty(t, b)
			require.LessOrEqual(t, len(b), 255)
		}
	})
}
