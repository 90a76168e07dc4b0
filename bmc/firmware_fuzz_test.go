package bmc

import (
	"testing"
)

// FuzzFirmwareDocuments feeds the decoders of what a BMC answers about
// firmware (tasks, inventory members, SimpleUpdate's reply) arbitrary
// bytes: an error or a value, never a panic.
func FuzzFirmwareDocuments(f *testing.F) {
	f.Add([]byte(`{"@odata.id":"/redfish/v1/TaskService/Tasks/1","TaskState":"Running","TaskStatus":"OK","PercentComplete":40,"Messages":[{"MessageId":"Update.1.0.Downloading","Message":"x"}]}`))
	f.Add([]byte(`{"Id":"node-1-NIC.1","Name":"NIC","SoftwareId":"NIC","Version":"1","Updateable":false,"RelatedItem":[{"@odata.id":"/redfish/v1/Systems/x"}]}`))
	f.Add([]byte(`{"TaskState":"Completed","PercentComplete":1e400}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"PercentComplete":"x","TaskState":"Exception","Messages":[null,{"Message":7}]}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if tk, err := parseTask("/t", body); err == nil {
			_ = tk.Finished()
			_ = tk.Message()
			if tk.Percent < -1 || tk.Percent > 100 {
				t.Fatalf("percent %d out of range", tk.Percent)
			}
		}
		if it, err := parseInventoryItem(body); err == nil {
			inv := firmwareInventory{system: "/redfish/v1/Systems/x", manager: "/redfish/v1/Managers/x", items: []inventoryItem{it}}
			_ = inv.components()
		}
		_ = taskLocation("https://bmc/redfish/v1/TaskService/Tasks/2", body)
	})
}
