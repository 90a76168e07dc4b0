package api

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/simagent"
	"github.com/anvil-metal/anvil/protocol"
)

var (
	guardDiskA = protocol.Disk{Name: "/dev/sda", Serial: "QM00001", Model: "QEMU HARDDISK", Size: 64 << 20, Controller: "scsi"}
	guardDiskB = protocol.Disk{Name: "/dev/sdb", Serial: "QM00002", Model: "QEMU HARDDISK", Size: 64 << 20, Controller: "scsi"}
	guardAHCI  = protocol.PCIDevice{Address: "0000:00:1f.2", Vendor: "8086", Device: "2922", Class: "010601", Modules: []string{"ahci"}}
	guardMega  = protocol.PCIDevice{Address: "0000:00:05.0", Vendor: "1000", Device: "005b", Class: "010400"}
)

// A node inspected with two disks cleans on a boot where the agent sees
// neither (the SATA driver did not bind): cleaning fails before anything is
// erased, names both disks, and keeps the node out of available.
func TestCleaningFailsClosedWhenInspectedDisksAreMissing(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	e.agentNode("fc1", nil)
	a := simagent.New(e.srv.URL, mac1)
	a.Inventory.Disks = []protocol.Disk{guardDiskA, guardDiskB}
	a.Inventory.PCI = []protocol.PCIDevice{{Address: "0000:00:1f.2", Vendor: "8086", Device: "2922", Class: "010601", Driver: "ahci"}}
	require.Equal(t, 202, e.provision("fc1", "inspect", nil).status)
	e.drive(a, "fc1", "manageable", nil)

	a.Boot()
	a.Inventory.Disks = nil
	a.Inventory.PCI = []protocol.PCIDevice{guardAHCI}
	require.Equal(t, 202, e.provision("fc1", "provide", nil).status)
	n := e.drive(a, "fc1", "clean failed", nil)
	last := n["last_error"].(string)
	for _, s := range []string{"Clean step deploy.erase_devices_metadata failed", "nothing was erased",
		"serial QM00001 (QEMU HARDDISK, 64.0 MiB", "serial QM00002", "no disks found",
		"SATA controller 0000:00:1f.2 (8086:2922) has no driver", "ahci"} {
		assert.Contains(t, last, s)
	}
	assert.Equal(t, true, n["maintenance"])
	assert.Equal(t, "clean failure", n["fault"])
	assert.Empty(t, a.Steps(), "no erase step reached the agent")

	check := n["driver_internal_info"].(map[string]any)["disk_check"].(map[string]any)
	assert.Equal(t, false, check["ok"])
	assert.Equal(t, "deploy.erase_devices_metadata", check["step"])
	assert.Len(t, check["missing"], 2, "the API shows the missing disks")
	assert.Len(t, check["expected"], 2)
	assert.Len(t, check["storage_without_driver"], 1)
	assert.Contains(t, historyText(e, "fc1"), "disk check before deploy.erase_devices_metadata: expected 2 disks (serial QM00001 (QEMU HARDDISK, 64.0 MiB), serial QM00002 (QEMU HARDDISK, 64.0 MiB)), seen 0",
		"the history records expected and seen")

	// inspection stored the PCI list; a driverless controller warns there
	a.Inventory.PCI = []protocol.PCIDevice{guardAHCI, {Address: "0000:00:02.0", Vendor: "8086", Device: "10d3", Class: "020000"}}
	a.Inventory.FirmwareMissing = []string{"rtl_nic/rtl8168h-2.fw"}
	inv := e.do("GET", "/v1/nodes/fc1/inventory", latest, nil).json(t)
	assert.Len(t, inv["inventory"].(map[string]any)["pci"], 1)
	assert.NotContains(t, inv["plugin_data"], "warnings", "the inspected controller had its driver")

	// the driver is back: the same node cleans, and the record says so
	require.Equal(t, 200, e.do("PATCH", "/v1/nodes/fc1", latest, []map[string]any{{"op": "replace", "path": "/maintenance", "value": false}}).status)
	require.Equal(t, 202, e.provision("fc1", "manage", nil).status)
	e.waitState("fc1", "manageable")
	a.Boot()
	a.Inventory.Disks = []protocol.Disk{guardDiskA, guardDiskB}
	a.Inventory.PCI = []protocol.PCIDevice{{Address: "0000:00:1f.2", Vendor: "8086", Device: "2922", Class: "010601", Driver: "ahci"}}
	require.Equal(t, 202, e.provision("fc1", "provide", nil).status)
	n = e.drive(a, "fc1", "available", nil)
	assert.Equal(t, []string{"deploy.erase_devices_metadata", "deploy.erase_devices"}, a.Steps())
	assert.Equal(t, true, n["driver_internal_info"].(map[string]any)["disk_check"].(map[string]any)["ok"])
}

// A never-inspected node whose only disk sits behind a controller without a
// driver: "no disks found" naming the controller; with the diskless flag it
// cleans and the history says why.
func TestCleaningNoDisksFailsUnlessDiskless(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	e.agentNode("fc2", nil)
	a := simagent.New(e.srv.URL, mac1)
	a.Inventory.Disks = nil
	a.Inventory.PCI = []protocol.PCIDevice{guardMega}
	require.Equal(t, 202, e.provision("fc2", "provide", nil).status)
	n := e.drive(a, "fc2", "clean failed", nil)
	assert.Contains(t, n["last_error"], "no disks found")
	assert.Contains(t, n["last_error"], "RAID controller 0000:00:05.0 (1000:005b) has no driver (the ramdisk has no module for it)")

	require.Equal(t, 200, e.do("PATCH", "/v1/nodes/fc2", latest, []map[string]any{
		{"op": "replace", "path": "/maintenance", "value": false},
		{"op": "add", "path": "/properties/diskless", "value": true}}).status)
	require.Equal(t, 202, e.provision("fc2", "manage", nil).status)
	e.waitState("fc2", "manageable")
	a.Boot()
	require.Equal(t, 202, e.provision("fc2", "provide", nil).status)
	e.drive(a, "fc2", "available", nil)
	hist := historyText(e, "fc2")
	assert.Contains(t, hist, "no disks present, allowed by properties.diskless")
	assert.Regexp(t, "clean step deploy.erase_devices(_metadata)? finished: no disks present, allowed by properties.diskless", hist,
		"the step's own outcome says why it found nothing to erase")
}

// An agent that cannot report what it sees never lets cleaning succeed.
func TestCleaningFailsWhenTheAgentCannotReportDisks(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	e.agentNode("fc3", nil)
	a := simagent.New(e.srv.URL, mac1)
	a.Outcomes[protocol.CmdInventory] = simagent.Outcome{Fail: "inventory is not configured in this agent"}
	require.Equal(t, 202, e.provision("fc3", "provide", nil).status)
	n := e.drive(a, "fc3", "clean failed", nil)
	assert.Contains(t, n["last_error"], "the agent could not report the disks it sees")
	assert.Empty(t, a.Steps())
}

// Deploy: the disk a serial hint names is missing, so nothing is written
// anywhere else.
func TestInventoryWarnsOfDevicesWithoutDriver(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	e.agentNode("fc5", nil)
	a := simagent.New(e.srv.URL, mac1)
	a.Inventory.PCI = []protocol.PCIDevice{guardAHCI, {Address: "0000:00:02.0", Vendor: "8086", Device: "10d3", Class: "020000"},
		{Address: "0000:00:03.0", Vendor: "1af4", Device: "1041", Class: "020000", Driver: "virtio-pci"}}
	a.Inventory.FirmwareMissing = []string{"rtl_nic/rtl8168h-2.fw"}
	require.Equal(t, 202, e.provision("fc5", "inspect", nil).status)
	e.drive(a, "fc5", "manageable", nil)
	inv := e.do("GET", "/v1/nodes/fc5/inventory", latest, nil).json(t)
	assert.Len(t, inv["inventory"].(map[string]any)["pci"], 3, "the controller keeps the PCI list")
	assert.Equal(t, []any{"rtl_nic/rtl8168h-2.fw"}, inv["inventory"].(map[string]any)["firmware_missing"])
	assert.Equal(t, []any{
		"SATA controller 0000:00:1f.2 (8086:2922) has no driver (the ramdisk's kernel has [ahci] for it, which did not bind)",
		"network controller 0000:00:02.0 (8086:10d3) has no driver (the ramdisk has no module for it)",
		"firmware rtl_nic/rtl8168h-2.fw was not found by the kernel",
	}, inv["plugin_data"].(map[string]any)["warnings"])
}

func TestDeployFailsWhenTheHintedDiskIsMissing(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	e.agentNode("fc4", map[string]any{"instance_info": map[string]any{"image_source": "http://127.0.0.1:8080/img.raw",
		"image_checksum": "sha256:" + strings.Repeat("ab", 32)}, "properties": map[string]any{"root_device": map[string]any{"serial": "QM00002"}}})
	a := simagent.New(e.srv.URL, mac1)
	a.Inventory.Disks = []protocol.Disk{guardDiskA}
	a.Inventory.PCI = []protocol.PCIDevice{}
	require.Equal(t, 202, e.provision("fc4", "provide", nil).status)
	n := e.drive(a, "fc4", "clean failed", nil)
	assert.Contains(t, n["last_error"], "serial QM00002 (expected from properties.root_device)", "cleaning also expects the hinted disk")

	require.Equal(t, 200, e.do("PATCH", "/v1/nodes/fc4", latest, []map[string]any{
		{"op": "replace", "path": "/maintenance", "value": false},
		{"op": "replace", "path": "/properties/root_device", "value": map[string]any{"serial": "QM00001"}}}).status)
	require.Equal(t, 202, e.provision("fc4", "manage", nil).status)
	e.waitState("fc4", "manageable")
	a.Boot()
	require.Equal(t, 202, e.provision("fc4", "provide", nil).status)
	e.drive(a, "fc4", "available", nil)

	require.Equal(t, 200, e.do("PATCH", "/v1/nodes/fc4", latest, []map[string]any{
		{"op": "replace", "path": "/properties/root_device", "value": map[string]any{"serial": "QM00002"}}}).status)
	a.Boot()
	require.Equal(t, 202, e.provision("fc4", "active", nil).status)
	n = e.drive(a, "fc4", "deploy failed", nil)
	assert.Contains(t, n["last_error"], "Deploy step deploy.write_image failed")
	assert.Contains(t, n["last_error"], "the disk the root device hints name is missing")
	assert.Contains(t, n["last_error"], "serial QM00002")
	assert.NotContains(t, a.Steps(), "deploy.write_image", "the image went nowhere")
}

// The disk burn-in is guarded as an erase is: it writes every disk the
// agent sees, so a disk hidden by a missing driver would pass untested.
// With a disk missing the burn-in is never issued and last_error says
// nothing was written; with both disks back it runs.
func TestDiskBurninIsGuardedByTheDiskCheck(t *testing.T) {
	e := newEnvWith(t, agentConfig(), ":memory:")
	e.agentNode("bd", nil)
	a := simagent.New(e.srv.URL, mac1)
	a.Inventory.Disks = []protocol.Disk{guardDiskA, guardDiskB}
	require.Equal(t, 202, e.provision("bd", "inspect", nil).status)
	e.drive(a, "bd", "manageable", nil)

	burnin := map[string]any{"clean_steps": []map[string]any{{"interface": "deploy", "step": "burnin_disk"}}}
	a.Boot()
	a.Inventory.Disks = []protocol.Disk{guardDiskA}
	require.Equal(t, 202, e.provision("bd", "clean", burnin).status)
	n := e.drive(a, "bd", "clean failed", nil)
	last := n["last_error"].(string)
	for _, s := range []string{"Clean step deploy.burnin_disk failed", "disk check failed, nothing was written", "serial QM00002"} {
		assert.Contains(t, last, s)
	}
	assert.NotContains(t, last, "erased", "a burn-in erases nothing; the message says what it would have done")
	assert.Empty(t, a.Steps(), "the burn-in never reached the agent")

	require.Equal(t, 200, e.do("PATCH", "/v1/nodes/bd", latest, []map[string]any{{"op": "replace", "path": "/maintenance", "value": false}}).status)
	require.Equal(t, 202, e.provision("bd", "manage", nil).status)
	e.waitState("bd", "manageable")
	a.Boot()
	a.Inventory.Disks = []protocol.Disk{guardDiskA, guardDiskB}
	require.Equal(t, 202, e.provision("bd", "clean", burnin).status)
	e.drive(a, "bd", "manageable", nil)
	assert.Contains(t, a.Steps(), "deploy.burnin_disk")
	check := e.do("GET", "/v1/nodes/bd", latest, nil).json(t)["driver_internal_info"].(map[string]any)["disk_check"].(map[string]any)
	assert.Equal(t, true, check["ok"])
	assert.Equal(t, "deploy.burnin_disk", check["step"])
}
