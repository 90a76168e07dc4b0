//go:build compat

package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCompatBaremetalCLI drives a real controller with python-ironicclient's
// `baremetal` CLI (Debian python3-ironicclient), as operators do.
func TestCompatBaremetalCLI(t *testing.T) {
	if _, err := exec.LookPath("baremetal"); err != nil {
		t.Fatalf("the baremetal CLI is required (apt-get install python3-ironicclient python3-openstackclient): %v", err)
	}
	p := startController(t, "--database", "sqlite://"+filepath.Join(t.TempDir(), "anvil.db"))
	home := t.TempDir() // the CLI caches negotiated versions under $HOME
	cli := func(args ...string) (string, error) {
		cmd := exec.Command("baremetal", args...)
		cmd.Env = append(os.Environ(), "OS_AUTH_TYPE=none", "OS_ENDPOINT="+p.URL, "HOME="+home)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	ok := func(args ...string) string {
		t.Helper()
		out, err := cli(args...)
		require.NoError(t, err, "baremetal %s:\n%s\ncontroller log:\n%s", strings.Join(args, " "), out, p.log())
		return out
	}
	field := func(node, name string) string {
		t.Helper()
		return strings.TrimSpace(ok("node", "show", node, "-f", "value", "-c", name))
	}
	listNames := func(args ...string) []string {
		t.Helper()
		var rows []map[string]any
		require.NoError(t, json.Unmarshal([]byte(ok(append([]string{"node", "list", "-f", "json"}, args...)...)), &rows))
		var names []string
		for _, r := range rows {
			names = append(names, r["Name"].(string))
		}
		return names
	}

	ok("node", "create", "--driver", "fake-hardware", "--name", "cli-1", "--property", "cpus=8")
	ok("node", "create", "--driver", "fake-hardware", "--name", "cli-2", "--resource-class", "gold")
	assert.Equal(t, "enroll", field("cli-1", "provision_state"))
	ok("port", "create", "52:54:00:12:34:56", "--node", "cli-1")
	assert.Contains(t, ok("port", "list", "--address", "52:54:00:12:34:56"), "52:54:00:12:34:56")

	ok("node", "set", "cli-1", "--property", "memory_mb=4096", "--extra", "rack=r4")
	assert.Contains(t, field("cli-1", "properties"), "'memory_mb': 4096")
	ok("node", "unset", "cli-1", "--property", "cpus")
	assert.NotContains(t, field("cli-1", "properties"), "cpus")
	assert.Equal(t, []string{"cli-2"}, listNames("--resource-class", "gold"))

	ok("node", "manage", "cli-1", "--wait", "30")
	assert.Equal(t, "manageable", field("cli-1", "provision_state"))
	assert.Equal(t, []string{"cli-1"}, listNames("--provision-state", "manageable"))
	checkBIOS(t, ok, "cli-1")
	// The CLI negotiates at most 1.78 (python3-ironicclient 5.0.1): asked
	// for 1.86 it shows what 1.83 and 1.86 added (it has no options to
	// set them).
	var at186 map[string]any
	require.NoError(t, json.Unmarshal([]byte(ok("--os-baremetal-api-version", "1.86", "node", "show", "cli-1", "-f", "json",
		"-c", "parent_node", "-c", "firmware_interface")), &at186))
	assert.Equal(t, map[string]any{"parent_node": nil, "firmware_interface": "fake"}, at186)
	ok("node", "provide", "cli-1", "--wait", "30")
	assert.Equal(t, "available", field("cli-1", "provision_state"))
	ok("node", "deploy", "cli-1", "--wait", "30")
	assert.Equal(t, "active", field("cli-1", "provision_state"))
	ok("node", "power", "off", "cli-1")
	assert.Eventually(t, func() bool { return field("cli-1", "power_state") == "power off" }, 20e9, 2e8)
	ok("node", "power", "on", "cli-1")
	assert.Eventually(t, func() bool { return field("cli-1", "power_state") == "power on" }, 20e9, 2e8)
	ok("node", "undeploy", "cli-1", "--wait", "30")
	assert.Equal(t, "available", field("cli-1", "provision_state"))

	// Allocations and VIFs, as Metal3 and Nova use them: the CLI waits
	// for the allocation to leave "allocating".
	ok("node", "set", "cli-1", "--resource-class", "silver")
	ok("node", "add", "trait", "cli-1", "CUSTOM_CLI")
	assert.Equal(t, "active", strings.TrimSpace(ok("allocation", "create", "--resource-class", "silver", "--trait", "CUSTOM_CLI",
		"--name", "cli-alloc", "--wait", "30", "-f", "value", "-c", "state")))
	assert.Equal(t, field("cli-1", "uuid"), strings.TrimSpace(ok("allocation", "show", "cli-alloc", "-f", "value", "-c", "node_uuid")))
	assert.Equal(t, strings.TrimSpace(ok("allocation", "show", "cli-alloc", "-f", "value", "-c", "uuid")), field("cli-1", "allocation_uuid"))
	out, err := cli("allocation", "create", "--resource-class", "silver", "--wait", "30")
	require.Error(t, err, "the only silver node is taken")
	assert.Contains(t, out, "no available nodes match the resource class silver")
	ok("allocation", "delete", "cli-alloc")
	assert.Equal(t, "None", field("cli-1", "instance_uuid"), "deleting the allocation frees the node")
	ok("port", "create", "52:54:00:12:34:57", "--node", "cli-1", "--pxe-enabled", "true")
	ok("node", "vif", "attach", "cli-1", "vif-cli")
	assert.Contains(t, ok("node", "vif", "list", "cli-1"), "vif-cli")
	ok("node", "vif", "detach", "cli-1", "vif-cli")
	assert.NotContains(t, ok("node", "vif", "list", "cli-1"), "vif-cli")

	ok("node", "maintenance", "set", "cli-1", "--reason", "disk swap")
	assert.Equal(t, "disk swap", field("cli-1", "maintenance_reason"))
	assert.Equal(t, []string{"cli-1"}, listNames("--maintenance"))
	ok("node", "maintenance", "unset", "cli-1")
	assert.Equal(t, "False", field("cli-1", "maintenance"))

	ok("node", "manage", "cli-1", "--wait", "30")
	ok("node", "set", "cli-1", "--retired", "--retired-reason", "end of life")
	assert.Equal(t, "True", field("cli-1", "retired"))
	assert.Equal(t, []string{"cli-1"}, listNames("--retired"))
	out, err = cli("node", "provide", "cli-1")
	require.Error(t, err, "providing a retired node must fail")
	assert.Contains(t, out, "because it is retired")

	ok("node", "validate", "cli-1")
	ok("node", "delete", "cli-1")
	out, err = cli("node", "show", "cli-1")
	require.Error(t, err)
	assert.Contains(t, out, "could not be found")
	assert.Equal(t, []string{"cli-2"}, listNames())
}

// checkBIOS reads the BIOS settings fake-hardware reported when the node
// became manageable, as the CLI's list, list --long and show print them.
func checkBIOS(t *testing.T, ok func(args ...string) string, node string) {
	t.Helper()
	var rows []map[string]any
	require.NoError(t, json.Unmarshal([]byte(ok("node", "bios", "setting", "list", node, "-f", "json")), &rows))
	values := map[string]any{}
	for _, r := range rows {
		values[r["BIOS setting name"].(string)] = r["BIOS setting value"]
	}
	assert.Equal(t, "Uefi", values["BootMode"], "%v", rows)
	assert.Equal(t, "8", values["ProcCores"])
	assert.Len(t, values, 5)

	rows = nil
	require.NoError(t, json.Unmarshal([]byte(ok("node", "bios", "setting", "list", node, "--long", "-f", "json")), &rows))
	var cores map[string]any
	for _, r := range rows {
		if r["Name"] == "ProcCores" { // --long names its columns Name and Value
			cores = r
		}
	}
	require.NotNil(t, cores, "%v", rows)
	assert.Equal(t, "Integer", cores["Attribute Type"], "%v", cores)
	assert.EqualValues(t, 64, cores["Upper Bound"])

	var one map[string]any
	require.NoError(t, json.Unmarshal([]byte(ok("node", "bios", "setting", "show", node, "BootMode", "-f", "json")), &one))
	assert.Equal(t, "BootMode", one["name"], "%v", one)
	assert.Equal(t, "Uefi", one["value"])
	assert.Equal(t, "Enumeration", one["attribute_type"])
}
