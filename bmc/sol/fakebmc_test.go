package sol_test

import (
	"context"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	ipmibmc "github.com/bougou/go-ipmi/pkg/bmc"
	"github.com/bougou/go-ipmi/pkg/clock"
	"github.com/bougou/go-ipmi/pkg/hal/mock"
	"github.com/bougou/go-ipmi/pkg/server"
	"github.com/bougou/go-ipmi/pkg/transport/udp"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc/sol"
)

// fakeBMC runs go-ipmi's reference BMC on a UDP loopback port with an
// in-memory serial console: a second, independent RMCP+ implementation
// (ipmi_sim cannot do cipher suite 17).
func fakeBMC(t *testing.T) (port int, console *mock.FakeConsoleConn) {
	t.Helper()
	console = &mock.FakeConsoleConn{}
	m := mock.New()
	m.SetConsole(&mock.Console{Conn: console})
	b := ipmibmc.New(ipmibmc.DeviceInfo{IPMIVersion: 0x20}, [16]byte{}, m, ipmibmc.WithClock(clock.Real))
	user, err := b.Users.Add(2, "admin")
	require.NoError(t, err)
	user.SetPassword([]byte("password"))
	user.Enabled = true
	user.ChannelAccess[1] = ipmibmc.UserChannelAccess{MaxPrivilege: ipmibmc.PrivilegeLevelAdministrator, Enabled: true}
	pc, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	require.NoError(t, err)
	srv := server.NewServer(b, udp.Wrap(pc))
	ctx, cancel := context.WithCancel(context.Background())
	go func() { _ = srv.Serve(ctx) }()
	t.Cleanup(func() { cancel(); _ = srv.Close(); _ = pc.Close() })
	return pc.LocalAddr().(*net.UDPAddr).Port, console
}

// TestCipherSuitesAgainstAFakeBMC: a whole session on suite 17
// (HMAC-SHA256) and on suite 3; a payload a vanished viewer left active is
// taken over (deactivated, then activated again).
func TestCipherSuitesAgainstAFakeBMC(t *testing.T) {
	for _, suite := range []int{17, 3} {
		t.Run(map[int]string{17: "suite 17", 3: "suite 3"}[suite], func(t *testing.T) {
			port, console := fakeBMC(t)
			target := sol.Target{Host: "127.0.0.1", Port: port, Username: "admin", Password: "password", CipherSuite: suite,
				PollInterval: 50 * time.Millisecond, Timeout: 2 * time.Second}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()

			stale, err := sol.Open(ctx, target) // a viewer that will vanish without deactivating
			require.NoError(t, err)
			_ = stale

			s, err := sol.Open(ctx, target)
			require.NoError(t, err, "the stale payload is deactivated and SOL activated again")
			inR, inW := io.Pipe()
			defer inW.Close()
			out := &syncBuffer{}
			runCtx, stop := context.WithCancel(ctx)
			done := make(chan error, 1)
			go func() { done <- s.Run(runCtx, inR, out) }()

			console.FeedRX([]byte("Linux version 6.1 on ttyS0\r\n"))
			require.Eventually(t, func() bool { return strings.Contains(out.String(), "Linux version 6.1 on ttyS0") }, 10*time.Second, 10*time.Millisecond)
			_, err = inW.Write([]byte("root\r"))
			require.NoError(t, err)
			require.Eventually(t, func() bool { return strings.Contains(console.TXString(), "root\r") }, 10*time.Second, 10*time.Millisecond)
			stop()
			assert.NoError(t, <-done)
			assert.NoError(t, s.Close(context.Background()))
		})
	}
}
