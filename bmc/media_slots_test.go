package bmc_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/bmc/vbmc"
)

// isoServer serves a small "ISO" on loopback for anvil-vbmc to fetch.
func isoServer(t *testing.T) string {
	t.Helper()
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/data.iso" && r.URL.Path != "/other.iso" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write([]byte("CD001 data image"))
	}))
	t.Cleanup(ts.Close)
	return ts.URL
}

func TestRedfishVirtualMediaAttachReadDetach(t *testing.T) {
	env := startVBMC(t, "node-1", "node-2")
	iso := isoServer(t)
	m := bmc.New(fastConfig(nil))
	ctx := context.Background()
	tg := env.target(t, "node-2", testPass)

	slots, _, err := m.VirtualMedia(ctx, tg)
	require.NoError(t, err)
	require.Len(t, slots, 1, "node-2's manager has one slot; node-1's are not node-2's")
	assert.Equal(t, "Cd", slots[0].ID)
	assert.Equal(t, []string{"CD", "DVD"}, slots[0].MediaTypes)
	assert.False(t, slots[0].Inserted)
	assert.Empty(t, slots[0].Image)

	_, err = m.AttachMedia(ctx, tg, bmc.MediaCD, iso+"/data.iso", time.Second)
	require.NoError(t, err)
	slots, _, err = m.VirtualMedia(ctx, tg)
	require.NoError(t, err)
	assert.True(t, slots[0].Inserted)
	assert.Equal(t, iso+"/data.iso", slots[0].Image)
	assert.Equal(t, iso+"/data.iso", env.srv.Node("node-2").Media().Image)
	assert.False(t, env.srv.Node("node-1").Media().Inserted, "the other node's slot is untouched")

	// Attaching again replaces what the slot held (the BMC refuses an
	// insert into a full slot: it is ejected first).
	_, err = m.AttachMedia(ctx, tg, bmc.MediaCD, iso+"/other.iso", time.Second)
	require.NoError(t, err)
	assert.Equal(t, iso+"/other.iso", env.srv.Node("node-2").Media().Image)

	_, err = m.DetachMedia(ctx, tg, []string{bmc.MediaCD})
	require.NoError(t, err)
	assert.False(t, env.srv.Node("node-2").Media().Inserted)
	_, err = m.DetachMedia(ctx, tg, nil)
	require.NoError(t, err, "detaching an empty slot is not an error")
}

func TestRedfishVirtualMediaAttachRefusals(t *testing.T) {
	iso := ""
	tests := []struct {
		name    string
		setup   func(env *vbmcEnv)
		media   string
		url     func() string
		wantErr error
		want    string
	}{
		{name: "no slot takes USB sticks", media: bmc.MediaUSBStick, url: func() string { return iso + "/data.iso" },
			wantErr: bmc.ErrNoSlot, want: "none takes USBStick (slots: Cd=CD/DVD)"},
		{name: "the BMC cannot fetch the image", media: bmc.MediaCD, url: func() string { return iso + "/missing.iso" },
			want: "HTTP 404"},
		{name: "the BMC answers 204 and mounts nothing", media: bmc.MediaCD, url: func() string { return iso + "/data.iso" },
			setup:   func(env *vbmcEnv) { env.srv.SetFaults(vbmc.Faults{IgnoreMediaInsert: true}) },
			wantErr: bmc.ErrVerify, want: "expected Inserted with Image"},
		{name: "the BMC reports Inserted without an Image", media: bmc.MediaCD, url: func() string { return iso + "/data.iso" },
			setup:   func(env *vbmcEnv) { env.srv.SetFaults(vbmc.Faults{MediaInsertedWithoutImage: true}) },
			wantErr: bmc.ErrVerify, want: `observed Inserted=true Image=""`},
		{name: "no virtual media at all", media: bmc.MediaCD, url: func() string { return iso + "/data.iso" },
			setup:   func(env *vbmcEnv) { env.nodes["n"].NoMedia = true },
			wantErr: bmc.ErrUnsupported, want: "no virtual media"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			env := startVBMC(t, "n")
			iso = isoServer(t)
			if tt.setup != nil {
				tt.setup(env)
			}
			m := bmc.New(fastConfig(nil))
			_, err := m.AttachMedia(context.Background(), env.target(t, "n", testPass), tt.media, tt.url(), 200*time.Millisecond)
			require.Error(t, err)
			if tt.wantErr != nil {
				assert.True(t, errors.Is(err, tt.wantErr), "%v", err)
			}
			assert.Contains(t, err.Error(), tt.want)
			if !env.nodes["n"].NoMedia {
				assert.False(t, env.srv.Node("n").Media().Inserted, "nothing is left half-mounted")
			}
		})
	}
}

func TestVirtualMediaRefusedOnIPMI(t *testing.T) {
	m := bmc.New(fastConfig(nil))
	tg, err := bmc.ParseDriverInfo("ipmi", map[string]any{"ipmi_address": "127.0.0.1", "ipmi_username": "u", "ipmi_password": "p"})
	require.NoError(t, err)
	_, _, err = m.VirtualMedia(context.Background(), tg)
	assert.ErrorIs(t, err, bmc.ErrUnsupported)
	_, err = m.AttachMedia(context.Background(), tg, bmc.MediaCD, "http://x/y.iso", time.Second)
	assert.ErrorIs(t, err, bmc.ErrUnsupported)
	_, _, err = m.CreateSubscription(context.Background(), tg, bmc.SubscriptionRequest{Destination: "http://127.0.0.1/"})
	assert.ErrorIs(t, err, bmc.ErrUnsupported)
}

func TestFakeVirtualMediaIgnoredInsertIsEjected(t *testing.T) {
	f := bmc.NewFake()
	m := bmc.New(bmc.Config{Fake: f, MinInterval: -1, PollInterval: 5 * time.Millisecond})
	tg := bmc.Target{HardwareType: bmc.HardwareFake, ID: "n1"}
	_, err := m.AttachMedia(context.Background(), tg, bmc.MediaCD, "http://x/a.iso", time.Second)
	require.NoError(t, err)
	assert.Equal(t, "http://x/a.iso", f.State("n1").Media)

	f.SetKnobs("n1", bmc.FakeKnobs{IgnoreMedia: true})
	_, err = m.AttachMedia(context.Background(), tg, bmc.MediaCD, "http://x/b.iso", 50*time.Millisecond)
	require.ErrorIs(t, err, bmc.ErrVerify)
	assert.Empty(t, f.State("n1").Media, "the old image was ejected and the new one never held")
}
