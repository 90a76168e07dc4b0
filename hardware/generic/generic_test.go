package generic

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"testing"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/erase"
	"github.com/anvil-metal/anvil/hardware/internal/testdev"
	"github.com/anvil-metal/anvil/protocol"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

var outside = hardware.Environment{Evidence: "test"}

func dispatcher(t *testing.T, cfg Config) *hardware.Dispatcher {
	t.Helper()
	d, err := hardware.NewDispatcher(context.Background(), New(cfg))
	require.NoError(t, err)
	return d
}

func TestCatalogue(t *testing.T) {
	cat := New(Config{}).Steps(context.Background())
	prio := func(steps []protocol.Step) map[string]int {
		out := map[string]int{}
		for _, s := range steps {
			require.NoError(t, s.Validate())
			out[s.Step] = s.Priority
		}
		return out
	}
	assert.Equal(t, map[string]int{
		"erase_devices_metadata": 99, "erase_devices": 10, "erase_devices_express": 0,
		"delete_configuration": 0, "create_configuration": 0, "verify_hardware": 0,
		"burnin_cpu": 0, "burnin_memory": 0, "burnin_disk": 0, "burnin_network": 0,
	}, prio(cat.Clean))
	assert.Equal(t, map[string]int{"erase_devices_metadata": 0, "write_image": 0, "verify_hardware": 0}, prio(cat.Deploy))
	for _, s := range cat.Clean {
		switch s.Step {
		case "erase_devices", "erase_devices_metadata", "burnin_cpu", "burnin_memory", "burnin_disk", "burnin_network":
			assert.True(t, s.Abortable, s.Step)
		}
		if s.Step == "delete_configuration" || s.Step == "create_configuration" {
			assert.Equal(t, protocol.InterfaceRAID, s.Interface)
		}
	}
	b, err := json.Marshal(cat)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"image_checksum":{"description"`)
}

func TestDestructiveStepsNeedAGuard(t *testing.T) {
	tests := []struct {
		name  string
		guard *hardware.Guard
	}{
		{"no guard", nil},
		{"outside the ramdisk without allow-list", hardware.NewGuard(outside, nil)},
	}
	for _, tt := range tests {
		for _, step := range []struct {
			kind hardware.Kind
			name string
			args map[string]any
		}{
			{hardware.KindClean, "erase_devices", nil},
			{hardware.KindClean, "erase_devices_metadata", nil},
			{hardware.KindClean, "erase_devices_express", nil},
			{hardware.KindClean, "delete_configuration", nil},
			{hardware.KindClean, "create_configuration", map[string]any{"target_raid_config": map[string]any{}}},
			{hardware.KindDeploy, "write_image", map[string]any{"image_url": "http://x", "image_checksum": "sha256:00"}},
			{hardware.KindClean, "burnin_disk", nil},
		} {
			t.Run(tt.name+"/"+step.name, func(t *testing.T) {
				d := dispatcher(t, Config{Guard: tt.guard})
				_, err := d.Run(context.Background(), step.kind, step.name, step.args, nil)
				var pe *protocol.Error
				require.ErrorAs(t, err, &pe)
				assert.Equal(t, protocol.ErrTypeProtectedDevice, pe.Type)
				assert.NotEmpty(t, pe.Message)
			})
		}
	}
}

// TestEraseStepsOnLoopDevice runs the clean steps through the dispatcher on
// the real host sysfs: only the test's loop device is allow-listed, so every
// other disk of the machine must be reported as protected and untouched.
func TestEraseStepsOnLoopDevice(t *testing.T) {
	testdev.Need(t, "mkfs.ext4", "blkid")
	dev := testdev.Loop(t, 32<<20, false)
	testdev.Run(t, "mkfs.ext4", "-q", "-F", dev)
	guard := hardware.NewGuard(outside, []string{dev})
	d := dispatcher(t, Config{Root: "/", Guard: guard, Prober: erase.SysProber{}})
	ctx := context.Background()

	res, err := d.Run(ctx, hardware.KindClean, "erase_devices_metadata", nil, nil)
	require.NoError(t, err)
	md := res.(erase.MetadataResult)
	seen := false
	for _, r := range md.Devices {
		if r.Device == dev {
			seen = true
			assert.Equal(t, erase.StatusErased, r.Status)
			require.Len(t, r.Wipes, 1)
			assert.Contains(t, r.Wipes[0].Found[0].Type, "ext")
		} else {
			assert.Equal(t, erase.StatusSkipped, r.Status, r.Device)
			assert.Contains(t, r.Reason, "guard", r.Device)
		}
	}
	require.True(t, seen)
	out, _ := testdev.Output("blkid", "-p", dev)
	assert.NotContains(t, out, "ext4")

	testdev.Fill(t, dev, 0, 32<<20, 0xEE)
	res, err = d.Run(ctx, hardware.KindClean, "erase_devices", map[string]any{"iterations": float64(0), "allow_zeroout": false}, nil)
	require.NoError(t, err)
	er := res.(erase.Result)
	for _, r := range er.Devices {
		if r.Plan.Device == dev {
			assert.Equal(t, erase.StatusErased, r.Status)
			assert.Equal(t, erase.MethodOverwrite, r.Method)
			require.NotEmpty(t, r.Attempts)
			assert.NotNil(t, r.Attempts[len(r.Attempts)-1].Verification)
		} else {
			assert.NotEqual(t, erase.StatusErased, r.Status, r.Plan.Device)
		}
	}
	b, err := json.Marshal(er)
	require.NoError(t, err, "step results must be JSON-serialisable")
	assert.Contains(t, string(b), `"estimated_seconds"`)

	_, err = d.Run(ctx, hardware.KindClean, "erase_devices", map[string]any{"iterations": "many"}, nil)
	var pe *protocol.Error
	require.ErrorAs(t, err, &pe)
	assert.Equal(t, protocol.ErrTypeInvalidArgs, pe.Type)

	res, err = d.Run(ctx, hardware.KindClean, "erase_devices_express", nil, nil)
	require.NoError(t, err)
	ex := res.(ExpressResult)
	assert.Nil(t, ex.NVMe, "a loop device is not NVMe")
	require.NotNil(t, ex.Metadata)
}

func TestWriteImageStep(t *testing.T) {
	dev := testdev.Loop(t, 16<<20, false)
	img := make([]byte, 5<<20)
	_, err := rand.Read(img)
	require.NoError(t, err)
	sum := sha256.Sum256(img)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write(img) }))
	defer srv.Close()
	d := dispatcher(t, Config{Root: "/", Guard: hardware.NewGuard(outside, []string{dev})})
	args := map[string]any{
		"image_url":      srv.URL + "/disk.raw",
		"image_checksum": "sha256:" + hex.EncodeToString(sum[:]),
		"root_device":    map[string]any{"name": strings.TrimPrefix(dev, "/dev/")},
	}
	res, err := d.Run(context.Background(), hardware.KindDeploy, "write_image", args, nil)
	require.NoError(t, err)
	wr := res.(WriteImageResult)
	assert.Equal(t, dev, wr.RootDevice.Path)
	assert.Equal(t, int64(len(img)), wr.Image.BytesWritten)
	f, err := os.Open(dev)
	require.NoError(t, err)
	defer f.Close()
	got := make([]byte, len(img))
	_, err = f.ReadAt(got, 0)
	require.NoError(t, err)
	assert.Equal(t, img, got)

	// A hint that matches nothing is an error before anything is written.
	args["root_device"] = map[string]any{"serial": "no-such-disk"}
	_, err = d.Run(context.Background(), hardware.KindDeploy, "write_image", args, nil)
	var pe *protocol.Error
	require.ErrorAs(t, err, &pe)
	assert.Contains(t, pe.Message, "no disk matches")
}

// TestWriteImageStepKeepsURLSecrets: what write_image returns goes to the
// controller and into the node's history; a signed URL's credentials and
// query must not.
func TestWriteImageStepKeepsURLSecrets(t *testing.T) {
	dev := testdev.Loop(t, 16<<20, false)
	img := make([]byte, 1<<20)
	_, err := rand.Read(img)
	require.NoError(t, err)
	sum := sha256.Sum256(img)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/disk.raw" {
			http.NotFound(w, r)
			return
		}
		w.Write(img)
	}))
	defer srv.Close()
	d := dispatcher(t, Config{Root: "/", Guard: hardware.NewGuard(outside, []string{dev})})
	host := strings.TrimPrefix(srv.URL, "http://")
	tests := []struct {
		name, path string
		wantErr    bool
	}{
		{"written", "/disk.raw", false},
		{"404", "/missing.raw", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args := map[string]any{
				"image_url":      "http://user:pass@" + host + tt.path + "?temp_url_sig=SECRET&temp_url_expires=1",
				"image_checksum": "sha256:" + hex.EncodeToString(sum[:]),
				"root_device":    map[string]any{"name": strings.TrimPrefix(dev, "/dev/")},
			}
			res, err := d.Run(context.Background(), hardware.KindDeploy, "write_image", args, nil)
			b, jerr := json.Marshal(res)
			require.NoError(t, jerr)
			out := string(b)
			if tt.wantErr {
				require.Error(t, err)
				out += err.Error()
			} else {
				require.NoError(t, err)
				assert.Equal(t, "http://"+host+tt.path, res.(WriteImageResult).Image.URL)
			}
			assert.Contains(t, out, host+tt.path)
			assert.NotContains(t, out, "SECRET")
			assert.NotContains(t, out, "pass")
		})
	}
}

// TestDefaultImageClientHasTimeouts: without a configured client,
// write_image must not fall back to http.DefaultClient, which would wait
// forever for a server that never answers.
func TestDefaultImageClientHasTimeouts(t *testing.T) {
	c := New(Config{}).writer.Client
	require.NotNil(t, c)
	tr, ok := c.Transport.(*http.Transport)
	require.True(t, ok)
	assert.Positive(t, tr.ResponseHeaderTimeout)
	assert.Positive(t, tr.TLSHandshakeTimeout)
	assert.Zero(t, c.Timeout, "no overall timeout: images may take hours")
}

func TestUnknownStepFallsThrough(t *testing.T) {
	_, err := New(Config{}).Run(context.Background(), hardware.KindClean, protocol.Step{Step: "burnin_gpu"}, nil, nil)
	assert.ErrorIs(t, err, hardware.ErrNotSupported)
}

// testdata/protocol/generic-catalogue.json is the catalogue this manager
// reports: the controller's simulated agent is checked against it
// (controller/simagent cannot import hardware). A change of steps or
// arguments updates the file, and the simulated agent with it.
func TestCatalogueMatchesTestdata(t *testing.T) {
	want, err := os.ReadFile("../../testdata/protocol/generic-catalogue.json")
	require.NoError(t, err)
	got, err := json.MarshalIndent(New(Config{}).Steps(context.Background()), "", "  ")
	require.NoError(t, err)
	assert.JSONEq(t, string(want), string(got), "update the file with:\n%s", got)
}
