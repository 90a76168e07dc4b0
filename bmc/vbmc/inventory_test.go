package vbmc_test

import (
	"io"
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc/vbmc"
)

// TestHealthHook: the system's Status.Health is OK until the control
// endpoint (or SetHealth) changes it; a bad value is refused.
func TestHealthHook(t *testing.T) {
	e := newEnv(t)
	auth := basic("admin", "password")
	_, sys := e.do(t, "GET", "/redfish/v1/Systems/node-1", "", auth)
	assert.Equal(t, map[string]any{"State": "Enabled", "Health": "OK", "HealthRollup": "OK"}, sys["Status"])

	resp, _ := e.do(t, "POST", "/control/node-1/health", "Critical", auth)
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	_, sys = e.do(t, "GET", "/redfish/v1/Systems/node-1", "", auth)
	assert.Equal(t, "Critical", sys["Status"].(map[string]any)["Health"])
	_, other := e.do(t, "GET", "/redfish/v1/Systems/node-2", "", auth)
	assert.Equal(t, "OK", other["Status"].(map[string]any)["Health"])

	req, err := http.NewRequest("GET", e.ts.URL+"/control/node-1/health", nil)
	require.NoError(t, err)
	req.SetBasicAuth("admin", "password")
	r, err := e.ts.Client().Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(r.Body)
	r.Body.Close()
	assert.Equal(t, "health:Critical\n", string(body))

	resp, _ = e.do(t, "POST", "/control/node-1/health", "Degraded", auth)
	assert.Equal(t, http.StatusBadRequest, resp.StatusCode)
	assert.Equal(t, "Critical", e.node.Health())
}

// TestInventoryResources: the system links the inventory resources and
// each answers what the node's Hardware says; unknown members are 404.
func TestInventoryResources(t *testing.T) {
	e := newEnv(t)
	auth := basic("admin", "password")
	e.node.SetHardware(vbmc.Hardware{CPUs: 4, CPUModel: "m", MemoryMiB: 2048, MACs: []string{"52:54:00:00:00:01"},
		Disks: []vbmc.HardwareDisk{{Name: "a", Serial: "A", SizeBytes: 1 << 33, Bus: vbmc.BusNVMe}, {Name: "b", Serial: "B", SizeBytes: 1 << 34, Bus: vbmc.BusAHCI},
			{Name: "c", Serial: "C", SizeBytes: 1 << 34, Bus: vbmc.BusAHCI}}})
	_, sys := e.do(t, "GET", "/redfish/v1/Systems/node-1", "", auth)
	assert.Equal(t, 2.0, sys["MemorySummary"].(map[string]any)["TotalSystemMemoryGiB"])
	assert.Equal(t, 4.0, sys["ProcessorSummary"].(map[string]any)["LogicalProcessorCount"])
	for _, res := range []string{"Processors", "Memory", "Storage", "EthernetInterfaces"} {
		assert.Equal(t, "/redfish/v1/Systems/node-1/"+res, sys[res].(map[string]any)["@odata.id"])
	}
	_, st := e.do(t, "GET", "/redfish/v1/Systems/node-1/Storage", "", auth)
	assert.Equal(t, 2.0, st["Members@odata.count"], "an NVMe controller and the AHCI adapter its two disks share")
	_, ahci := e.do(t, "GET", "/redfish/v1/Systems/node-1/Storage/ahci", "", auth)
	assert.Equal(t, 2.0, ahci["Drives@odata.count"])
	_, d := e.do(t, "GET", "/redfish/v1/Systems/node-1/Storage/ahci/Drives/2", "", auth)
	assert.Equal(t, "C", d["SerialNumber"])
	assert.Equal(t, "SATA", d["Protocol"])
	assert.Equal(t, "HDD", d["MediaType"])
	_, nic := e.do(t, "GET", "/redfish/v1/Systems/node-1/EthernetInterfaces/NIC0", "", auth)
	assert.Equal(t, "52:54:00:00:00:01", nic["MACAddress"])
	_, cpu := e.do(t, "GET", "/redfish/v1/Systems/node-1/Processors/CPU0", "", auth)
	assert.Equal(t, 4.0, cpu["TotalThreads"])
	_, dimm := e.do(t, "GET", "/redfish/v1/Systems/node-1/Memory/DIMM0", "", auth)
	assert.Equal(t, 2048.0, dimm["CapacityMiB"])
	for _, p := range []string{"Processors/CPU1", "EthernetInterfaces/NIC1", "EthernetInterfaces/NIC01", "Storage/ahci/Drives/0",
		"Storage/NVMe9", "Memory/DIMM0/x", "Storage/ahci/Drives/x"} {
		resp, _ := e.do(t, "GET", "/redfish/v1/Systems/node-1/"+p, "", auth)
		assert.Equal(t, http.StatusNotFound, resp.StatusCode, p)
	}
	resp, _ := e.do(t, "GET", "/redfish/v1/Systems/node-1/Processors", "")
	assert.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}
