package bmc

import (
	"net/http"
	"testing"

	"github.com/stretchr/testify/assert"
)

// An iDRAC-shaped inventory: each component as Installed-, Previous- and
// Available- members; only what runs counts, each NIC and disk once.
func TestFirmwareInventoryKeepsWhatRuns(t *testing.T) {
	sys, mgr := "/redfish/v1/Systems/System.Embedded.1", "/redfish/v1/Managers/iDRAC.Embedded.1"
	inv := firmwareInventory{system: sys, manager: mgr, biosVersion: "2.19.1", bmcVersion: "7.00.00.171", items: []inventoryItem{
		{uri: "/inv/Previous-159-2.18.1__BIOS.Setup.1-1", id: "Previous-159-2.18.1__BIOS.Setup.1-1", name: "BIOS", version: "2.18.1", updateable: true},
		{uri: "/inv/Installed-159-2.19.1__BIOS.Setup.1-1", id: "Installed-159-2.19.1__BIOS.Setup.1-1", name: "BIOS", version: "2.19.1", updateable: true},
		{uri: "/inv/Available-159-2.20.0__BIOS.Setup.1-1", id: "Available-159-2.20.0__BIOS.Setup.1-1", name: "BIOS", version: "2.20.0", updateable: true},
		{uri: "/inv/Installed-25227-7.00.00.171__iDRAC.Embedded.1-1", id: "Installed-25227-7.00.00.171__iDRAC.Embedded.1-1", name: "Integrated Dell Remote Access Controller", version: "7.00.00.171", updateable: true},
		{uri: "/inv/Previous-101548-22.31.6__NIC.Integrated.1-1-1", id: "Previous-101548-22.31.6__NIC.Integrated.1-1-1", name: "NIC", version: "22.31.6", updateable: true},
		{uri: "/inv/Installed-101548-22.36.6__NIC.Integrated.1-1-1", id: "Installed-101548-22.36.6__NIC.Integrated.1-1-1", name: "NIC", version: "22.36.6", updateable: true},
		{uri: "/inv/Installed-101548-22.36.6__NIC.Integrated.1-2-1", id: "Installed-101548-22.36.6__NIC.Integrated.1-2-1", name: "NIC", version: "22.36.6", updateable: true},
		{uri: "/inv/Installed-0-1.1__Disk.Bay.0", id: "Installed-0-1.1__Disk.Bay.0", name: "SSD 0", version: "1.1", updateable: true},
	}}
	got := map[string]FirmwareComponent{}
	for _, c := range inv.components() {
		_, dup := got[c.Component]
		assert.False(t, dup, "component %s listed twice", c.Component)
		got[c.Component] = c
	}
	assert.Equal(t, "2.19.1", got["bios"].Version)
	assert.Equal(t, "/inv/Installed-159-2.19.1__BIOS.Setup.1-1", got["bios"].InventoryURI, "the running image is the target, not the rollback or the staged one")
	assert.Equal(t, "7.00.00.171", got["bmc"].Version)
	assert.Equal(t, "22.36.6", got["nic:NIC.Integrated.1-1-1"].Version, "the installed NIC image, not the previous one")
	assert.Contains(t, got, "nic:NIC.Integrated.1-2-1")
	assert.Equal(t, "1.1", got["disk:Disk.Bay.0"].Version, "disks where the BMC reports them")
	assert.Len(t, got, 5)
}

func TestNoDowngrade(t *testing.T) {
	get := func(u string) *http.Request {
		r, err := http.NewRequest("GET", u, nil)
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	assert.NoError(t, NoDowngrade(get("https://b.test/x"), []*http.Request{get("https://a.test/x")}))
	assert.NoError(t, NoDowngrade(get("http://b.test/x"), []*http.Request{get("http://a.test/x")}))
	err := NoDowngrade(get("http://b.test/x"), []*http.Request{get("https://a.test/x")})
	assert.ErrorContains(t, err, "not fetched over plain http")
	many := make([]*http.Request, 10)
	for i := range many {
		many[i] = get("https://a.test/x")
	}
	assert.Error(t, NoDowngrade(get("https://b.test/x"), many))
}
