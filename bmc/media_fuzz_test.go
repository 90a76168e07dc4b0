package bmc

import (
	"strings"
	"testing"
)

// FuzzVirtualMediaAndEventDocuments feeds the decoders of what a BMC
// answers about virtual media slots, its EventService and subscriptions
// arbitrary bytes: an error or a value, never a panic, and never an
// action target that leaves the BMC.
func FuzzVirtualMediaAndEventDocuments(f *testing.F) {
	f.Add([]byte(`{"@odata.id":"/redfish/v1/Managers/n/VirtualMedia/Cd","Id":"Cd","MediaTypes":["CD","DVD"],"Inserted":true,"Image":"http://x/a.iso","Actions":{"#VirtualMedia.InsertMedia":{"target":"/redfish/v1/Managers/n/VirtualMedia/Cd/Actions/VirtualMedia.InsertMedia"},"#VirtualMedia.EjectMedia":{"target":"https://bmc/redfish/v1/x"}}}`))
	f.Add([]byte(`{"MediaTypes":[null,1,"USBStick"],"Inserted":"yes","Image":null,"Actions":{"#VirtualMedia.InsertMedia":{"target":"//evil/x"}}}`))
	f.Add([]byte(`{"Id":"1","Destination":"http://127.0.0.1/e","Context":"c","Protocol":"Redfish","EventTypes":["Alert"]}`))
	f.Add([]byte(`{"@odata.id":"/redfish/v1/EventService","Subscriptions":{"@odata.id":"/redfish/v1/EventService/Subscriptions"},"EventTypesForSubscription":["Alert",7,null]}`))
	f.Add([]byte(`[]`))
	f.Add([]byte(`{"@odata.id":"///"}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		if s, err := parseMediaSlot("/redfish/v1/Managers/n/VirtualMedia/1", body); err == nil {
			for _, a := range []string{s.insert, s.eject} {
				if a != "" && (!strings.HasPrefix(a, "/") || strings.HasPrefix(a, "//")) {
					t.Fatalf("action target %q is not a path on the BMC", a)
				}
			}
			_ = s.Takes(MediaCD)
			_ = slotSummary([]MediaSlot{s})
		}
		if sub, err := parseSubscription(body); err == nil && sub.ID == "" {
			t.Fatal("a subscription without an id")
		}
		if subs, _, err := parseEventService(body); err == nil && subs == "" {
			t.Fatal("an event service without subscriptions")
		}
	})
}
