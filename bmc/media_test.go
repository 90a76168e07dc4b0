package bmc_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
)

// TestRedfishVirtualMedia drives bmclib's virtual media calls against
// anvil-vbmc's Redfish VirtualMedia over real HTTP: the BMC fetches the
// ISO from the URL it is given, and only the selected system's CD is
// touched although the BMC serves two.
func TestRedfishVirtualMedia(t *testing.T) {
	iso := []byte("ISO9660 stand-in")
	isoSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/node-1.iso" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(iso)
	}))
	t.Cleanup(isoSrv.Close)
	env := startVBMC(t, "node-1", "node-2")
	env.nodes["node-2"].NoMedia = true
	m := bmc.New(fastConfig(nil))
	ctx := context.Background()
	tg := env.target(t, "node-1", testPass)

	out, err := m.InsertMedia(ctx, tg, isoSrv.URL+"/node-1.iso")
	require.NoError(t, err)
	assert.Equal(t, "gofish", out.Provider)
	md := env.srv.Node("node-1").Media()
	assert.True(t, md.Inserted)
	assert.Equal(t, isoSrv.URL+"/node-1.iso", md.Image)
	got, err := os.ReadFile(env.nodes["node-1"].MediaFile())
	require.NoError(t, err)
	assert.Equal(t, iso, got, "the BMC fetched the ISO")
	assert.False(t, env.srv.Node("node-2").Media().Inserted, "the other system's CD is not touched")

	// Inserting again ejects first (bmclib), as Ironic does: no "in use".
	_, err = m.InsertMedia(ctx, tg, isoSrv.URL+"/node-1.iso")
	require.NoError(t, err)
	assert.True(t, env.srv.Node("node-1").Media().Inserted)

	_, err = m.EjectMedia(ctx, tg)
	require.NoError(t, err)
	assert.False(t, env.srv.Node("node-1").Media().Inserted)
	assert.Empty(t, env.nodes["node-1"].MediaFile())

	t.Run("a URL the BMC cannot fetch names the BMC's answer", func(t *testing.T) {
		_, err := m.InsertMedia(ctx, tg, isoSrv.URL+"/missing.iso")
		require.Error(t, err)
		assert.Contains(t, err.Error(), "404")
		assert.False(t, env.srv.Node("node-1").Media().Inserted)
	})
	t.Run("a BMC without virtual media", func(t *testing.T) {
		_, err := m.InsertMedia(ctx, env.target(t, "node-2", testPass), isoSrv.URL+"/node-1.iso")
		require.ErrorIs(t, err, bmc.ErrUnsupported)
		assert.Contains(t, err.Error(), "no virtual CD slot")
	})
	t.Run("the fake BMC has a CD", func(t *testing.T) {
		f := bmc.New(bmc.Config{Fake: bmc.NewFake()})
		tg, err := bmc.ParseDriverInfo("fake-hardware", map[string]any{})
		require.NoError(t, err)
		_, err = f.InsertMedia(ctx, tg.WithID("n"), "http://x/y.iso")
		require.NoError(t, err)
		assert.Equal(t, "http://x/y.iso", f.Fake().State("n").Media)
	})
}
