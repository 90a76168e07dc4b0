package main

import (
	"bytes"
	"context"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/api"
	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/sqlite"
	"github.com/anvil-metal/anvil/controller/store/storetest"
)

// anvil node timeline reads the API's boot timeline and prints the latest
// boot (--all: every boot) with times relative to its start.
func TestTimelineCLI(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	st, err := sqlite.Open(ctx, ":memory:")
	require.NoError(t, err)
	defer st.Close()
	cond := conductor.New(st, conductor.Config{Host: "cli", CheckInterval: time.Hour}, conductor.FakeDriver{})
	srv := httptest.NewServer(api.New(api.Config{Store: st, Conductor: cond}))
	defer srv.Close()
	n := storetest.NewNode("tl-node")
	require.NoError(t, st.CreateNode(ctx, n))
	cli := func(args ...string) (string, error) {
		var out bytes.Buffer
		err := run(ctx, args, strings.NewReader(""), &out, func(k string) string {
			if k == "ANVIL_URL" {
				return srv.URL
			}
			return ""
		})
		return out.String(), err
	}

	out, err := cli("node", "timeline", "tl-node")
	require.NoError(t, err)
	assert.Contains(t, out, "tl-node: no boot recorded yet")

	t0 := time.Date(2026, 11, 29, 12, 1, 0, 0, time.UTC)
	require.NoError(t, st.AddBootStages(ctx, []store.NodeBootStages{{NodeUUID: n.UUID, Stages: []store.BootStage{
		{At: t0, Stage: store.StageBoot, Detail: "first"},
		{At: t0, Stage: store.StageBoot, Detail: "into the agent ramdisk for cleaning"},
		{At: t0.Add(1500 * time.Millisecond), Stage: store.StagePower, Detail: "rebooting", Outcome: "ok"},
		{At: t0.Add(3 * time.Second), Stage: store.StageDHCP, Detail: "offered snponly.efi to 52:54:00:12:34:56 (UEFI PXE)", Outcome: "ok"},
		{At: t0.Add(2*time.Minute + 3*time.Second), Stage: store.StageTFTP, Detail: "snponly.efi to 10.0.0.5", Outcome: "not found"},
		{At: t0.Add(3 * time.Minute), Stage: store.StageLookup, Detail: "boot b-1 from 10.0.0.5", Outcome: "ok", BootID: "b-1"},
	}}}))
	out, err = cli("node", "timeline", "tl-node")
	require.NoError(t, err)
	assert.Contains(t, out, "boot 2 (agent boot b-1), began 2026-11-29T12:01:00Z\n")
	assert.Regexp(t, `\+0\.000s\s+boot\s+-\s+into the agent ramdisk for cleaning\n`, out)
	assert.Regexp(t, `\+1\.500s\s+bmc\.power\s+ok\s+rebooting\n`, out)
	assert.Regexp(t, `\+2m03s\s+tftp\s+not found\s+snponly\.efi to 10\.0\.0\.5\n`, out)
	assert.NotContains(t, out, "boot 1", "the latest boot only")

	out, err = cli("node", "timeline", n.UUID, "--all")
	require.NoError(t, err)
	assert.Less(t, strings.Index(out, "boot 2 "), strings.Index(out, "boot 1,"), "newest first")
	out, err = cli("node", "timeline", "tl-node", "--json")
	require.NoError(t, err)
	assert.Contains(t, out, `"stage": "tftp"`)
	_, err = cli("node", "timeline", "missing")
	assert.ErrorContains(t, err, "Node missing could not be found.")
}
