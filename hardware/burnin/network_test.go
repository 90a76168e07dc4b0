package burnin

import (
	"context"
	"net"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/protocol"
)

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

func TestNetworkPairExchangesBothWays(t *testing.T) {
	port := freePort(t)
	base := NetworkOptions{Runtime: time.Second, PairingTimeout: 10 * time.Second, Port: port, Listen: "127.0.0.1", Partner: "127.0.0.1"}
	var wg sync.WaitGroup
	results := make([]NetworkResult, 2)
	errs := make([]error, 2)
	for i, role := range []string{RoleWriter, RoleReader} {
		o := base
		o.Role = role
		wg.Add(1)
		go func() {
			defer wg.Done()
			results[i], errs[i] = Network(context.Background(), o, nil)
		}()
	}
	wg.Wait()
	for i := range results {
		require.NoError(t, errs[i])
		require.Len(t, results[i].Directions, 2)
		for _, d := range results[i].Directions {
			assert.NotZero(t, d.Bytes, "%+v", d)
			assert.Greater(t, d.MBPerSecond, 0.0)
		}
	}
	w, r := results[0], results[1]
	assert.Equal(t, []string{RoleWriter, RoleReader}, []string{w.Directions[0].Role, w.Directions[1].Role})
	assert.Equal(t, []string{RoleReader, RoleWriter}, []string{r.Directions[0].Role, r.Directions[1].Role})
	assert.Equal(t, w.Directions[0].Bytes, r.Directions[0].Bytes, "what one sent the other received")
	assert.Equal(t, r.Directions[1].Bytes, w.Directions[1].Bytes)
	assert.Contains(t, w.Summary(), "MB/s")
}

func TestNetworkPartnerNeverConnects(t *testing.T) {
	o := NetworkOptions{Role: RoleWriter, Partner: "127.0.0.1", Runtime: time.Second, PairingTimeout: 500 * time.Millisecond, Port: freePort(t), Listen: "127.0.0.1"}
	start := time.Now()
	res, err := Network(context.Background(), o, nil)
	var pe *protocol.Error
	require.ErrorAs(t, err, &pe)
	assert.Contains(t, pe.Message, "did not connect")
	assert.Less(t, time.Since(start), 5*time.Second)
	require.Len(t, res.Directions, 1)
}

func TestNetworkStrangerIsIgnored(t *testing.T) {
	port := freePort(t)
	o := NetworkOptions{Role: RoleWriter, Partner: "127.0.0.1", Runtime: time.Second, PairingTimeout: time.Second, Port: port, Listen: "127.0.0.1"}
	go func() {
		for range 20 {
			if c, err := net.Dial("tcp", net.JoinHostPort("127.0.0.1", itoa(port))); err == nil {
				_, _ = c.Write([]byte("GET / HTTP/1.0\r\n\r\n"))
				c.Close()
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	_, err := Network(context.Background(), o, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "did not connect", "a stranger is not the partner")
}

func TestNetworkReaderWithoutWriter(t *testing.T) {
	o := NetworkOptions{Role: RoleReader, Partner: "127.0.0.1", PairingTimeout: 1500 * time.Millisecond, Port: freePort(t)}
	_, err := Network(context.Background(), o, nil)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "not reachable")
}

func TestNetworkAbort(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	o := NetworkOptions{Role: RoleWriter, Partner: "127.0.0.1", Runtime: time.Hour, PairingTimeout: time.Hour, Port: freePort(t), Listen: "127.0.0.1"}
	start := time.Now()
	_, err := Network(ctx, o, nil)
	assert.Less(t, time.Since(start), 2*time.Second)
	var pe *protocol.Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, protocol.ErrTypeAborted, pe.Type)
}

func itoa(i int) string { return strconv.Itoa(i) }
