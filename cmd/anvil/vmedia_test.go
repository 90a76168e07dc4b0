package main

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/bmc/vbmc"
	"github.com/anvil-metal/anvil/controller/api"
	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
)

// TestVmediaAndSubscriptionCLI: anvil node vmedia and anvil node
// subscription against the real API over SQLite, a redfish node behind an
// in-memory anvil-vbmc, and images and events on loopback.
func TestVmediaAndSubscriptionCLI(t *testing.T) {
	ctx := context.Background()
	st, err := sqlite.Open(ctx, ":memory:")
	require.NoError(t, err)
	defer st.Close()
	vs := vbmc.NewServer(nil, "admin", "pw", vbmc.NewNode("n1", vbmc.NewMemory()))
	vts := httptest.NewServer(vs.Handler())
	defer vts.Close()
	files := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = io.WriteString(w, "CD001") }))
	defer files.Close()
	events := make(chan string, 4)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { events <- r.Header.Get("X-Token") }))
	defer sink.Close()

	m := bmc.New(bmc.Config{MinInterval: -1, PollInterval: 10 * time.Millisecond})
	cond := conductor.New(st, conductor.Config{Host: "cli", CheckInterval: time.Hour}, conductor.NewBMCDriver(bmc.HardwareRedfish, m, nil))
	srv := httptest.NewServer(api.New(api.Config{Store: st, Conductor: cond}))
	defer srv.Close()
	name := "rf"
	n := &store.Node{UUID: uuid.NewString(), Name: &name, Driver: "redfish", ProvisionState: "manageable", CreatedAt: time.Now().UTC(),
		DriverInfo: map[string]any{"redfish_address": vts.URL, "redfish_username": "admin", "redfish_password": "pw", "redfish_system_id": "/redfish/v1/Systems/n1"}}
	n.Interfaces.Vendor = conductor.VendorRedfish
	require.NoError(t, st.CreateNode(ctx, n))

	env := func(k string) string {
		if k == "ANVIL_URL" {
			return srv.URL
		}
		return ""
	}
	cli := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, args, strings.NewReader(""), &out, env)
		return out.String(), err
	}

	out, err := cli("node", "vmedia", "attach", "rf", files.URL+"/data.iso", "--source", "http")
	require.NoError(t, err)
	assert.Equal(t, "cdrom attached to rf\n", out)
	out, err = cli("node", "vmedia", "show", "rf")
	require.NoError(t, err)
	assert.Contains(t, out, "CD,DVD       true      "+files.URL+"/data.iso")
	_, err = cli("node", "vmedia", "detach", "rf", "--device", "cdrom")
	require.NoError(t, err)
	assert.False(t, vs.Node("n1").Media().Inserted)
	_, err = cli("node", "vmedia", "attach", "rf", "ftp://x/y.iso")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Unsupported or missing URL scheme: ftp")

	out, err = cli("node", "subscription", "create", "rf", sink.URL+"/ev", "--context", "c1", "--header", "X-Token=abc")
	require.NoError(t, err)
	assert.Contains(t, out, `"Id": "1"`)
	vs.Emit(vbmc.Event{EventType: "Alert", MessageID: "Test.1.0.Hello", Origin: "/redfish/v1/Systems/n1"})
	select {
	case tok := <-events:
		assert.Equal(t, "abc", tok)
	case <-time.After(5 * time.Second):
		t.Fatal("no event")
	}
	out, err = cli("node", "subscription", "list", "rf")
	require.NoError(t, err)
	assert.Contains(t, out, "1   "+sink.URL+"/ev  Alert        c1")
	_, err = cli("node", "subscription", "delete", "rf", "1")
	require.NoError(t, err)
	out, err = cli("node", "subscription", "list", "rf")
	require.NoError(t, err)
	assert.NotContains(t, out, sink.URL)
}
