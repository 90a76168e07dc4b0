package sol_test

import (
	"context"
	"net"
	"testing"
	"time"

	"github.com/bougou/go-ipmi/pkg/types"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc/sol"
	"github.com/anvil-metal/anvil/bmc/vbmc/ipmisim"
)

// TestOpenFailsClearly: a BMC that does not answer, and a wrong password,
// are errors that say what failed, within the configured timeout.
func TestOpenFailsClearly(t *testing.T) {
	silent, err := net.ListenPacket("udp4", "127.0.0.1:0")
	require.NoError(t, err)
	defer silent.Close()
	port := silent.LocalAddr().(*net.UDPAddr).Port

	start := time.Now()
	_, err = sol.Open(context.Background(), sol.Target{Host: "127.0.0.1", Port: port, Username: "admin", Password: "x", Timeout: 200 * time.Millisecond})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "opening an RMCP+ session to 127.0.0.1")
	assert.Less(t, time.Since(start), 5*time.Second)

	sim := ipmisim.Start(t, ipmisim.Options{ChassisControl: "/bin/true"})
	_, err = sol.Open(context.Background(), sol.Target{Host: "127.0.0.1", Port: sim.Port, Username: "admin", Password: "wrong", Timeout: time.Second})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "opening an RMCP+ session")
}

// FuzzSOLPacket: the SOL payload parser the stream runs on every packet a
// BMC (or anyone able to send UDP to the controller) sends never panics,
// and what it accepts keeps its data within the packet.
func FuzzSOLPacket(f *testing.F) {
	f.Add([]byte{0x01, 0x00, 0x00, 0x00, 'h', 'i'})
	f.Add([]byte{0x00, 0x03, 0x02, 0x10})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		var p types.SOLPayloadResponse
		if err := p.Unpack(b); err == nil {
			assert.LessOrEqual(t, len(p.CharacterData), len(b))
		}
	})
}
