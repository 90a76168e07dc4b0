package simagent

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
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

// The simulated firmware takes the nonce off the script's kernel line,
// gets none from a controller that serves no scripts, and reports a
// refusal.
func TestFirmwareBoot(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/boot/52:54:00:00:00:01/ipxe":
			fmt.Fprint(w, "#!ipxe\nkernel http://c/v1/boot/files/vmlinuz initrd=initramfs anvil.api=http://c anvil.node=n anvil.token=N0NCE console=tty0\nboot\n")
		case "/v1/boot/52:54:00:00:00:02/ipxe":
			fmt.Fprint(w, "#!ipxe\nkernel http://c/v1/boot/files/vmlinuz anvil.node=n\nboot\n")
		case "/v1/boot/52:54:00:00:00:03/ipxe":
			http.Error(w, "Not allowed", http.StatusForbidden)
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	for mac, want := range map[string]string{"52:54:00:00:00:01": "N0NCE", "52:54:00:00:00:02": "", "52:54:00:00:00:09": ""} {
		got, err := FirmwareBoot(ctx, srv.Client(), srv.URL+"/", mac)
		require.NoError(t, err, mac)
		assert.Equal(t, want, got, mac)
	}
	_, err := FirmwareBoot(ctx, srv.Client(), srv.URL, "52:54:00:00:00:03")
	assert.ErrorContains(t, err, "HTTP 403")
}
