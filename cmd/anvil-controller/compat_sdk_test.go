//go:build compat

package main

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sdkScript drives the controller through openstacksdk's baremetal proxy
// as a Python program would; each line it prints is checked below.
const sdkScript = `
import sys, openstack
conn = openstack.connect(auth_type='none', baremetal_endpoint_override=sys.argv[1], baremetal_api_version='1')
bm = conn.baremetal
print('max', '%d.%d' % bm.get_endpoint_data().max_microversion)
n = bm.create_node(driver='fake-hardware', name='sdk-1', network_interface='noop')
print('created', n.provision_state)
vif = '4f6d5c10-2d6b-4d37-9a67-5b0a8b7cf0a1'
bm.attach_vif_to_node(n, vif)
bm.detach_vif_from_node(n, vif)
print('vif attached and detached')
n = bm.update_node(n, extra={'rack': 'r1'})
print('extra', n.extra['rack'])
p = bm.create_port(node_id=n.id, address='52:54:00:aa:bb:cc')
print('ports', ','.join(x.address for x in bm.ports(node=n.id)))
n = bm.set_node_provision_state(n, 'active', wait=True, timeout=30)
print('state', n.provision_state)
bm.set_node_power_state(n, 'power off', wait=True, timeout=30)
print('power', bm.get_node(n.id).power_state)
n = bm.set_node_provision_state(n, 'deleted', wait=True, timeout=60)
print('state', n.provision_state)
bm.delete_node(n)
print('left', len(list(bm.nodes())))
`

// TestCompatOpenstackSDK drives a real controller with Debian's
// openstacksdk (python3-openstacksdk 0.101), which negotiates the highest
// microversion the controller offers: create (which the SDK takes to
// available itself), a VIF on a noop node with no port (Ironic accepts
// it; the SDK's own functional test does this), PATCH, ports, deploy,
// power and tear-down.
func TestCompatOpenstackSDK(t *testing.T) {
	// Debian's module, not a pyenv interpreter's
	py := "/usr/bin/python3"
	if err := exec.Command(py, "-c", "import openstack").Run(); err != nil {
		t.Fatalf("openstacksdk is required (apt-get install python3-openstacksdk): %v", err)
	}
	p := startController(t, "--database", "sqlite://"+filepath.Join(t.TempDir(), "anvil.db"))
	out, err := exec.Command(py, "-c", sdkScript, p.URL).CombinedOutput()
	require.NoError(t, err, "%s\ncontroller log:\n%s", out, p.log())
	assert.Equal(t, []string{
		"max 1.110",
		"created available",
		"vif attached and detached",
		"extra r1",
		"ports 52:54:00:aa:bb:cc",
		"state active",
		"power power off",
		"state available",
		"left 0",
	}, strings.Split(strings.TrimSpace(string(out)), "\n"))
}
