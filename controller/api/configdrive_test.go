package api

import (
	"bytes"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/configdrive"
	"github.com/anvil-metal/anvil/controller/simagent"
	"github.com/anvil-metal/anvil/protocol"
)

// TestAgentDeployConfigDrive: a JSON configdrive (BMO's form) reaches the
// agent's write_image as a base64 gzipped config-2 ISO holding the node's
// uuid and the user_data, and is masked in the step's recorded result; a
// configdrive that cannot be used fails the deploy before the ramdisk
// boots, and so does an agent that would not write it.
func TestAgentDeployConfigDrive(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	uuid := e.agentNode("cd", map[string]any{"instance_info": map[string]any{"image_source": "http://127.0.0.1:8080/img.raw",
		"image_checksum": "sha256:" + strings.Repeat("ab", 32)}})
	a := simagent.New(e.srv.URL, mac1)
	require.Equal(t, 202, e.provision("cd", "provide", nil).status)
	e.drive(a, "cd", "available", nil)

	a.Boot()
	r := e.provision("cd", "active", map[string]any{"configdrive": map[string]any{
		"meta_data": map[string]any{"local-hostname": "worker-0"}, "user_data": "#cloud-config\n",
		"network_data": map[string]any{"links": []any{}}}})
	require.Equal(t, 202, r.status, string(r.body))
	e.drive(a, "cd", "active", nil)
	var write *protocol.Command
	for _, c := range a.Commands() {
		if c.Step != nil && c.Step.Step == "write_image" {
			write = &c
		}
	}
	require.NotNil(t, write)
	cd, _ := write.Step.Args[protocol.ConfigDriveArg].(string)
	iso, err := configdrive.Decode(cd)
	require.NoError(t, err)
	assert.Equal(t, "config-2", strings.TrimRight(string(iso[16*2048+40:16*2048+72]), " "))
	assert.True(t, bytes.Contains(iso, []byte(`"uuid":"`+uuid+`"`)), "meta_data carries the node's uuid")
	assert.True(t, bytes.Contains(iso, []byte(`"local-hostname":"worker-0"`)))
	assert.True(t, bytes.Contains(iso, []byte("#cloud-config\n")))
	res, _ := resultsOf(t, e, "/v1/nodes/cd/steps/results")
	found := false
	for _, r := range res {
		if r["step"] == "deploy.write_image" {
			found = true
			assert.Equal(t, "******", r["args"].(map[string]any)["configdrive"], "the configdrive is not kept with the result")
		}
	}
	assert.True(t, found, "write_image has a result")
	n := e.do("GET", "/v1/nodes/cd", latest, nil).json(t)
	assert.Equal(t, "******", n["instance_info"].(map[string]any)["configdrive"])

	for name, tc := range map[string]struct {
		configdrive any
		agentArgs   bool // the agent's write_image declares configdrive
		wantErr     string
	}{
		"truncated gzip": {configdrive: "H4sIAAAA", agentArgs: true, wantErr: "instance_info.configdrive: configdrive is not gzipped: unexpected EOF"},
		"not gzip":       {configdrive: "aGVsbG8=", agentArgs: true, wantErr: "configdrive is not gzipped"},
		"old agent":      {configdrive: map[string]any{"user_data": "x"}, wantErr: "does not write one: rebuild the ramdisk"},
	} {
		t.Run(name, func(t *testing.T) {
			require.Equal(t, 202, e.provision("cd", "deleted", nil).status)
			a.Boot()
			e.drive(a, "cd", "available", nil)
			if !tc.agentArgs {
				a.Deploy = []protocol.Step{{Interface: "deploy", Step: "write_image", ArgsInfo: map[string]protocol.ArgInfo{"image_url": {Required: true}, "image_checksum": {Required: true}}}}
			}
			// undeploy forgot the instance
			p := e.do("PATCH", "/v1/nodes/cd", latest, []map[string]any{
				{"op": "add", "path": "/instance_info/image_source", "value": "http://127.0.0.1:8080/img.raw"},
				{"op": "add", "path": "/instance_info/image_checksum", "value": "sha256:" + strings.Repeat("ab", 32)}})
			require.Equal(t, 200, p.status, string(p.body))
			ran := len(a.Ran())
			require.Equal(t, 202, e.provision("cd", "active", map[string]any{"configdrive": tc.configdrive}).status)
			a.Boot()
			n := e.drive(a, "cd", "deploy failed", nil)
			assert.Contains(t, n["last_error"], tc.wantErr)
			assert.NotContains(t, a.Ran()[ran:], "deploy.write_image", "no image written")
		})
	}
}
