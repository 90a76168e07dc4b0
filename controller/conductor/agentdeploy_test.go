package conductor

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

// The root device hints of a deploy: instance_info.root_device wins over
// properties.root_device, as in Ironic's get_root_device_for_deploy.
func TestImageArgsRootDevice(t *testing.T) {
	byProps := map[string]any{"serial": "PROPS"}
	byInstance := map[string]any{"serial": "s== INSTANCE"}
	for _, tc := range []struct {
		name       string
		props, ii  map[string]any
		wantHints  any
		wantNoHint bool
	}{
		{name: "none", wantNoHint: true},
		{name: "properties only", props: byProps, wantHints: byProps},
		{name: "instance_info only", ii: byInstance, wantHints: byInstance},
		{name: "instance_info wins", props: byProps, ii: byInstance, wantHints: byInstance},
		{name: "empty instance_info hints fall back", props: byProps, ii: map[string]any{}, wantHints: byProps},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ii := map[string]any{"image_source": "http://img/disk.raw", "image_os_hash_algo": "sha256", "image_os_hash_value": "ab"}
			if tc.ii != nil {
				ii["root_device"] = tc.ii
			}
			props := map[string]any{}
			if tc.props != nil {
				props["root_device"] = tc.props
			}
			args, err := imageArgs(&store.Node{InstanceInfo: ii, Properties: props}, nil)
			require.NoError(t, err)
			assert.Equal(t, "sha256:ab", args["image_checksum"])
			hints, ok := args["root_device"]
			if tc.wantNoHint {
				assert.False(t, ok, "hints %v", hints)
				return
			}
			assert.Equal(t, tc.wantHints, hints)
		})
	}
}
