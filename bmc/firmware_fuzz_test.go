package bmc

import (
	"errors"
	"testing"
)

// FuzzFirmwareDocuments feeds the decoders of what a BMC answers about
// firmware (tasks, inventory members, the UpdateService, SimpleUpdate's
// and a push's reply) arbitrary bytes: an error or a value, never a panic.
func FuzzFirmwareDocuments(f *testing.F) {
	f.Add([]byte(`{"@odata.id":"/redfish/v1/TaskService/Tasks/1","TaskState":"Running","TaskStatus":"OK","PercentComplete":40,"Messages":[{"MessageId":"Update.1.0.Downloading","Message":"x"}]}`))
	f.Add([]byte(`{"Id":"node-1-NIC.1","Name":"NIC","SoftwareId":"NIC","Version":"1","Updateable":false,"RelatedItem":[{"@odata.id":"/redfish/v1/Systems/x"}]}`))
	f.Add([]byte(`{"TaskState":"Completed","PercentComplete":1e400}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"PercentComplete":"x","TaskState":"Exception","Messages":[null,{"Message":7}]}`))
	f.Add([]byte(`{"ServiceEnabled":true,"MultipartHttpPushUri":"/redfish/v1/UpdateService/MultipartUpload","MaxImageSizeBytes":268439552,"Actions":{"#UpdateService.SimpleUpdate":{"target":"/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate","TransferProtocol@Redfish.AllowableValues":["HTTP","HTTPS"]}}}`))
	f.Add([]byte(`{"MultipartHttpPushUri":"https://10.0.0.1/redfish/v1/UpdateService/upload","HttpPushUri":"x","MaxImageSizeBytes":-1e30,"Actions":{"#UpdateService.SimpleUpdate":{"TransferProtocol@Redfish.AllowableValues":[null,1,"tftp"]}}}`))
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
		if o, err := parseUpdateService(body); err == nil {
			if o.maxImage < 0 {
				t.Fatalf("MaxImageSizeBytes %d", o.maxImage)
			}
			for _, u := range []string{o.simpleUpdate, o.multipartPush, o.httpPush} {
				if u != "" && u[0] != '/' {
					t.Fatalf("URI %q is not a path on the BMC", u)
				}
			}
			for _, url := range []string{"http://c/fw.bin", "tftp://c/fw.bin", "fw.bin"} {
				m, err := o.choose(url)
				switch {
				case err != nil && (m != "" || !errors.Is(err, ErrUnsupported)):
					t.Fatalf("choose %q: %q, %v", url, m, err)
				case m == MethodSimpleUpdate && o.simpleUpdate == "", m == MethodPush && o.multipartPush == "":
					t.Fatalf("choose %q: %s, not offered", url, m)
				}
			}
		}
	})
}
