package agent

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/protocol"
)

// discoveryAgent runs an agent in discovery mode against a controller that
// answers POST /v1/discovery with the given statuses in turn (the last
// one repeats); it returns the reports received and the power actions.
func discoveryAgent(t *testing.T, statuses ...int) (func() []protocol.DiscoveryRequest, chan string) {
	var mu sync.Mutex
	var reports []protocol.DiscoveryRequest
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.URL.Path != protocol.DiscoveryPath {
			http.Error(w, "unexpected", http.StatusTeapot)
			return
		}
		var dr protocol.DiscoveryRequest
		require.NoError(t, json.NewDecoder(r.Body).Decode(&dr))
		mu.Lock()
		reports = append(reports, dr)
		st := statuses[min(len(reports), len(statuses))-1]
		mu.Unlock()
		w.WriteHeader(st)
		if st == http.StatusCreated {
			_ = json.NewEncoder(w).Encode(protocol.DiscoveryResponse{NodeUUID: "new-node", Action: protocol.DiscoveryPowerOff})
		} else {
			_, _ = w.Write([]byte(`{"error_message": "{\"faultstring\": \"refused\"}"}`))
		}
	}))
	t.Cleanup(srv.Close)
	client, err := NewClient(ClientConfig{API: srv.URL, Version: Version, Timeout: 5 * time.Second})
	require.NoError(t, err)
	var events []string
	power := &fakePower{events: &events, calls: make(chan string, 4)}
	a := &Agent{Controller: client, Network: StaticMACs{"52:54:00:12:34:56"}, Discover: true, Power: power,
		Hardware: func(context.Context, *protocol.LookupResponse) (Hardware, error) {
			t.Error("discovery mode sets up no hardware managers")
			return nil, context.Canceled
		},
		Inventory: func(context.Context) (protocol.Inventory, error) {
			return protocol.Inventory{Interfaces: []protocol.NIC{{Name: "eth0", MACAddress: "52:54:00:12:34:56"}}}, nil
		},
		Log: slog.New(slog.DiscardHandler), Backoff: Backoff{Initial: 5 * time.Millisecond, Max: 20 * time.Millisecond}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return func() []protocol.DiscoveryRequest {
		mu.Lock()
		defer mu.Unlock()
		return append([]protocol.DiscoveryRequest(nil), reports...)
	}, power.calls
}

func TestDiscoveryModeReportsAndPowersOff(t *testing.T) {
	for name, tc := range map[string]struct {
		statuses []int
		reports  int
	}{
		"enrolled after a rate limit and a full queue": {[]int{429, 503, 201}, 3},
		"already a node": {[]int{409}, 1},
	} {
		t.Run(name, func(t *testing.T) {
			reports, power := discoveryAgent(t, tc.statuses...)
			select {
			case got := <-power:
				assert.Equal(t, "power_off", got)
			case <-time.After(10 * time.Second):
				t.Fatal("no power off")
			}
			r := reports()
			require.Len(t, r, tc.reports)
			assert.Equal(t, "52:54:00:12:34:56", r[0].Inventory.Interfaces[0].MACAddress)
			assert.NotEmpty(t, r[0].BootID)
			time.Sleep(50 * time.Millisecond)
			assert.Len(t, reports(), tc.reports, "one accepted answer ends the reports")
		})
	}
}

// A refusal that an operator can fix (discovery off: 404) is retried, and
// the machine is not switched off meanwhile.
func TestDiscoveryModeRetriesRefusal(t *testing.T) {
	reports, power := discoveryAgent(t, 404)
	require.Eventually(t, func() bool { return len(reports()) >= 3 }, 10*time.Second, 5*time.Millisecond)
	select {
	case got := <-power:
		t.Fatalf("powered %s on a refusal", got)
	default:
	}
}
