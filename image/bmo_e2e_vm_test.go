//go:build vm

package image

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/diskfs/go-diskfs/backend/file"
	"github.com/diskfs/go-diskfs/filesystem/iso9660"

	"github.com/anvil-metal/anvil/bmc/vbmc"
)

// TestVME2EBMOOrder drives anvil with the calls metal3's
// baremetal-operator makes (gophercloud v2.13, microversion 1.110), in
// BMO's order, against a QEMU node behind anvil-vbmc (Redfish) with
// disable_power_off: discovery, enrol and registration, fast (redfish)
// then agent inspection, /bios and /firmware reads, automated cleaning,
// a deploy with a configdrive object, a data image through /vmedia,
// servicing with firmware.update and bios.apply_configuration, power
// actions as BMO sends them to such a node, health, a BMC event
// subscription through vendor passthru, undeploy, an abort in wait
// call-back (1.110), and BMO's forced detach: maintenance and DELETE.
// The host checks the disks, QEMU's CD drive and the BMC's events.
func TestVME2EBMOOrder(t *testing.T) {
	fwDir := t.TempDir()
	fwImage := vbmc.FirmwareImage(vbmc.FirmwareBMC, "2.00.00", bytes.Repeat([]byte("bmc firmware "), 4096))
	if err := os.WriteFile(filepath.Join(fwDir, "bmc-2.00.00.bin"), fwImage, 0o644); err != nil {
		t.Fatal(err)
	}
	e := newE2EWith(t, e2eConfig{virtualMedia: true,
		controllerArgs: []string{"--firmware-dir", fwDir, "--timeout-check-interval", "1s", "--heartbeat-interval", "2s"}})
	e.bmc.SetFirmwareOptions(vbmc.FirmwareOptions{UpdateDuration: time.Second})
	b := &bmoClient{t: t, url: e.c.url}
	start, last := time.Now(), time.Now()
	step := func(what string) {
		t.Logf("[%6.1fs +%5.1fs] %s", time.Since(start).Seconds(), time.Since(last).Seconds(), what)
		last = time.Now()
	}
	sum := sha256.Sum256(e.image)
	imageHash := hex.EncodeToString(sum[:])

	// 1. The provisioner factory: version discovery with no version
	// header (gophercloud utils.GetSupportedMicroversions), then the
	// conductor check.
	resp, err := http.Get(e.c.url + "/v1/")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 && resp.StatusCode != 300 {
		t.Fatalf("GET /v1/ = HTTP %d", resp.StatusCode)
	}
	var disc struct {
		Version *struct {
			ID, Status, Version string
			MinVersion          string `json:"min_version"`
		} `json:"version"`
	}
	b.decode(raw, &disc)
	if v := disc.Version; v == nil || v.Version != bmoVersion || v.MinVersion == "" || !slices.Contains([]string{"CURRENT", "STABLE", "SUPPORTED", "DEPRECATED", ""}, v.Status) {
		t.Fatalf("GET /v1/: BMO would not choose %s from %s", bmoVersion, raw)
	}
	var drivers struct {
		Drivers []struct{ Name string } `json:"drivers"`
	}
	b.decode(b.do("GET", "/v1/drivers", nil, 200), &drivers)
	if !slices.ContainsFunc(drivers.Drivers, func(d struct{ Name string }) bool { return d.Name == "redfish" }) {
		t.Fatalf("GET /v1/drivers lacks redfish: %+v", drivers)
	}

	// Registering, first reconcile: the node is looked up by name, its
	// boot MAC is free, then it is enrolled and its port created.
	const name = "metal3~host-0"
	b.do("GET", "/v1/nodes/"+name, nil, 404)
	var ports struct {
		Ports []struct {
			UUID     string `json:"uuid"`
			Address  string `json:"address"`
			NodeUUID string `json:"node_uuid"`
		} `json:"ports"`
	}
	b.decode(b.do("GET", "/v1/ports?"+portsQuery("address", e.mac), nil, 200), &ports)
	if len(ports.Ports) != 0 {
		t.Fatalf("the boot MAC is already on a port: %+v", ports)
	}
	var n bmoNode
	b.decode(b.do("POST", "/v1/nodes", map[string]any{"driver": "redfish", "boot_interface": "ipxe",
		"firmware_interface": "redfish", "raid_interface": "redfish", "inspect_interface": "agent",
		"name": name, "disable_power_off": true,
		"driver_info": map[string]any{"redfish_address": e.bmcURL, "redfish_username": "admin", "redfish_password": "password",
			"redfish_system_id": "/redfish/v1/Systems/e2e-node"},
		"properties": map[string]any{"capabilities": "boot_mode:bios", "cpu_arch": "x86_64"}}, 201, 202), &n)
	if n.UUID == "" || n.ProvisionState != "enroll" || !n.DisablePowerOff || n.Fault != "" || n.Maintenance {
		t.Fatalf("enrolled node: %+v", n)
	}
	id := n.UUID
	b.decode(b.do("GET", "/v1/ports?"+portsQuery("node_uuid", id), nil, 200), &ports)
	if len(ports.Ports) != 0 {
		t.Fatalf("a new node has ports: %+v", ports)
	}
	b.decode(b.do("GET", "/v1/ports?"+portsQuery("address", e.mac), nil, 200), &ports)
	b.do("POST", "/v1/ports", map[string]any{"node_uuid": id, "address": e.mac, "pxe_enabled": true}, 201, 202)
	b.decode(b.do("GET", "/v1/ports?"+portsQuery("address", e.mac), nil, 200), &ports)
	if len(ports.Ports) != 1 || ports.Ports[0].NodeUUID != id {
		t.Fatalf("ports by address after the POST: %+v", ports)
	}
	b.provision(id, map[string]any{"target": "manage"})
	b.wait(id, time.Minute, func(n bmoNode) bool {
		if n.ProvisionState == "enroll" && n.LastError != "" {
			t.Fatalf("verify failed: %s", n.LastError)
		}
		return n.ProvisionState == "manageable"
	})
	// configureNode: automated_clean (null → add) and the properties.
	n = b.patch(id, map[string]any{"op": "add", "path": "/automated_clean", "value": true})
	if n.AutomatedClean == nil || !*n.AutomatedClean {
		t.Errorf("automated_clean after the PATCH: %v", n.AutomatedClean)
	}
	if fw := b.firmware(id); fw["bmc"] != "1.00.00" {
		t.Errorf("GET /firmware before the update: %v", fw)
	}
	if n = b.node(name); n.UUID != id {
		t.Errorf("GET by the name with ~: %s", n.UUID)
	}
	// The BMCEventSubscription controller works beside the host's state
	// machine: the subscription is made as soon as the node exists, so
	// the events tell whether the BMC ever saw a power-off.
	sink := &eventSink{}
	hook := httptest.NewServer(sink)
	t.Cleanup(hook.Close)
	var sub struct {
		ID          string `json:"Id"`
		Destination string `json:"Destination"`
	}
	b.decode(b.do("POST", "/v1/nodes/"+id+"/vendor_passthru?method=create_subscription",
		map[string]any{"Destination": hook.URL + "/events", "Context": "metal3-host-0", "HttpHeaders": []any{map[string]any{"X-Auth": "v"}}}, 200), &sub)
	if sub.ID == "" {
		t.Fatal("create_subscription answered without an Id")
	}
	step("discovered, enrolled, port created, manageable; event subscription " + sub.ID)

	// 2. Inspection: /inventory 404 means "not inspected"; fast
	// (redfish) first, then agent, as after BMO's inspect annotation.
	b.do("GET", "/v1/nodes/"+id+"/inventory", nil, 404)
	b.patch(id, map[string]any{"op": "add", "path": "/inspect_interface", "value": "redfish"})
	b.provision(id, map[string]any{"target": "inspect"})
	var seen []string
	b.wait(id, time.Minute, func(n bmoNode) bool {
		if n.ProvisionState == "inspect failed" {
			t.Fatalf("redfish inspection failed: %s", n.LastError)
		}
		if !slices.Contains(seen, n.ProvisionState) {
			seen = append(seen, n.ProvisionState)
		}
		return settled("manageable")(n)
	})
	if slices.Contains(seen, "inspect wait") {
		t.Errorf("redfish inspection went through inspect wait: %v", seen)
	}
	var inv bmoInventory
	b.decode(b.do("GET", "/v1/nodes/"+id+"/inventory", nil, 200), &inv)
	step("fast inspection (redfish): states " + strings.Join(seen, ", ") + "; inventory 200")

	b.patch(id, map[string]any{"op": "add", "path": "/inspect_interface", "value": "agent"})
	b.provision(id, map[string]any{"target": "inspect"})
	n = b.wait(id, 4*time.Minute, func(n bmoNode) bool {
		if n.ProvisionState == "inspect failed" {
			t.Fatalf("agent inspection failed: %s", n.LastError)
		}
		return settled("manageable")(n)
	})
	if n.LastError != "" {
		t.Errorf("last_error after inspection: %q", n.LastError)
	}
	inv = bmoInventory{}
	raw = b.do("GET", "/v1/nodes/"+id+"/inventory", nil, 200)
	b.decode(raw, &inv)
	i := inv.Inventory
	if i.CPU.Count < 1 || i.CPU.Architecture != "x86_64" || i.Memory.PhysicalMb < 256 {
		t.Errorf("agent inventory: cpu %+v, memory %d MiB", i.CPU, i.Memory.PhysicalMb)
	}
	t.Logf("inventory disks: %s", toJSON(i.Disks))
	for _, d := range e.disks {
		if !slices.ContainsFunc(i.Disks, func(x bmoDisk) bool {
			return x.Serial == d.Serial && x.Size == 64<<20
		}) {
			t.Errorf("inventory lacks disk %s of 64 MiB: %+v", d.Serial, i.Disks)
		}
	}
	if !strings.Contains(toJSON(i.Interfaces), e.mac) {
		t.Errorf("inventory lacks NIC %s: %+v", e.mac, i.Interfaces)
	}
	var pd bmoPluginData
	if err := json.Unmarshal(inv.PluginData, &pd); err != nil {
		t.Logf("plugin_data does not decode as BMO reads it (BMO only logs this): %v", err)
	}
	step("agent inspection: inventory decodes with gophercloud's types")

	// 3. The HostFirmwareSettings and HostFirmwareComponents controllers.
	bios := b.bios(id)
	if bios["ProcVirtualization"] != "Enabled" {
		t.Errorf("GET /bios?detail=true: ProcVirtualization = %q", bios["ProcVirtualization"])
	}
	if fw := b.firmware(id); fw["bmc"] != "1.00.00" || fw["bios"] == "" {
		t.Errorf("GET /firmware: %v", fw)
	}
	step("/bios?detail=true and /firmware read")

	// 4. Provisioning: provide (automated cleaning), then in one
	// reconcile PATCH instance_info, validate, deploy with a configdrive.
	b.provision(id, map[string]any{"target": "provide"})
	n = b.wait(id, 5*time.Minute, func(n bmoNode) bool {
		if n.ProvisionState == "clean failed" {
			t.Fatalf("automated cleaning failed: %s", n.LastError)
		}
		return settled("available")(n)
	})
	assertErased(t, e.disks)
	step("provide: automated cleaning done, disks erased, available")

	deploy := func(instance string) {
		t.Helper()
		b.patch(id,
			map[string]any{"op": "add", "path": "/instance_uuid", "value": instance},
			map[string]any{"op": "add", "path": "/instance_info/capabilities", "value": map[string]any{}},
			map[string]any{"op": "add", "path": "/instance_info/root_device", "value": map[string]any{"serial": "s== " + e.disks[0].Serial}},
			map[string]any{"op": "add", "path": "/instance_info/image_source", "value": e.imageURL},
			map[string]any{"op": "add", "path": "/instance_info/image_disk_format", "value": "raw"},
			map[string]any{"op": "add", "path": "/instance_info/image_os_hash_algo", "value": "sha256"},
			map[string]any{"op": "add", "path": "/instance_info/image_os_hash_value", "value": imageHash},
			map[string]any{"op": "add", "path": "/driver_info/force_persistent_boot_device", "value": "Default"})
		var v struct {
			Boot, Deploy struct {
				Result *bool  `json:"result"`
				Reason string `json:"reason"`
			}
		}
		b.decode(b.do("GET", "/v1/nodes/"+id+"/validate", nil, 200), &v)
		if v.Boot.Result == nil || !*v.Boot.Result || v.Deploy.Result == nil || !*v.Deploy.Result {
			t.Fatalf("host validation error: boot %v %q, deploy %v %q", v.Boot.Result, v.Boot.Reason, v.Deploy.Result, v.Deploy.Reason)
		}
		b.provision(id, map[string]any{"target": "active", "configdrive": map[string]any{
			"meta_data": map[string]any{"uuid": instance, "metal3-namespace": "metal3", "metal3-name": "host-0",
				"local-hostname": "host-0", "local_hostname": "host-0", "name": "host-0"},
			"user_data":    "#cloud-config\nhostname: host-0\n",
			"network_data": map[string]any{"links": []any{map[string]any{"id": "eth0", "type": "phy", "ethernet_mac_address": e.mac}}}}})
	}
	deploy("0b1e6a52-5a4f-4d8e-9d40-7f3c1a2b3c4d")
	n = b.wait(id, 6*time.Minute, func(n bmoNode) bool {
		if n.ProvisionState == "deploy failed" {
			t.Fatalf("deploy failed: %s", n.LastError)
		}
		return settled("active")(n)
	})
	if n.PowerState != "power on" || n.LastError != "" {
		t.Errorf("active node: power %s, last_error %q", n.PowerState, n.LastError)
	}
	// Ironic hides a stored configdrive in the node's instance_info.
	if cd := n.InstanceInfo["configdrive"]; cd != "******" {
		t.Errorf("instance_info.configdrive = %v, want it stored and hidden as ******", cd)
	}
	cdPart := assertConfigDrive(t, e.disks[0].Path, e.image, "0b1e6a52-5a4f-4d8e-9d40-7f3c1a2b3c4d", "#cloud-config\nhostname: host-0\n")
	booted := waitSerialMarkers(t, e, 1, time.Minute)
	step("deployed with a configdrive object: image on disk, " + cdPart + ", booted")

	// 5. A DataImage, as manageHostPower attaches it.
	isoBytes := bytes.Repeat([]byte("metal3 data image "), 4096)
	isoSrv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write(isoBytes) }))
	t.Cleanup(isoSrv.Close)
	isoURL := isoSrv.URL + "/data.iso"
	type slot struct {
		Image      string   `json:"image"`
		Inserted   bool     `json:"inserted"`
		MediaTypes []string `json:"media_types"`
	}
	var slots []slot
	if n = b.node(id); n.Reservation != "" {
		t.Fatalf("reservation %q while idle: BMO would not attach", n.Reservation)
	}
	b.decode(b.do("GET", "/v1/nodes/"+id+"/vmedia", nil, 200), &slots)
	if slices.ContainsFunc(slots, func(s slot) bool { return s.Inserted }) {
		t.Fatalf("a medium is inserted before the attach: %+v", slots)
	}
	b.do("POST", "/v1/nodes/"+id+"/vmedia", map[string]any{"device_type": "cdrom", "image_url": isoURL}, 204)
	b.decode(b.do("GET", "/v1/nodes/"+id+"/vmedia", nil, 200), &slots)
	// image_download_source defaults to "local" (Ironic's API): the
	// controller downloads the image and the BMC reads it from there.
	if !slices.ContainsFunc(slots, func(s slot) bool { return s.Inserted && s.Image != "" }) {
		t.Errorf("GET /vmedia after the attach: %+v", slots)
	}
	if f := cdFile(t, e.qemu); f == "" {
		t.Error("QEMU's CD drive is empty after the attach")
	} else if got, err := os.ReadFile(f); err != nil || !bytes.Equal(got, isoBytes) {
		t.Errorf("QEMU's CD drive holds %s (%d bytes, %v), not the data image", f, len(got), err)
	}
	b.do("DELETE", "/v1/nodes/"+id+"/vmedia?device_types=cdrom", nil, 204)
	b.decode(b.do("GET", "/v1/nodes/"+id+"/vmedia", nil, 200), &slots)
	if slices.ContainsFunc(slots, func(s slot) bool { return s.Inserted }) {
		t.Errorf("GET /vmedia after the detach: %+v", slots)
	}
	if f := cdFile(t, e.qemu); f != "" {
		t.Errorf("QEMU's CD drive still holds %s after the detach", f)
	}
	step("data image attached (QEMU's CD holds it) and detached (empty)")

	// 6. Servicing, as doServiceIfNeeded sends it.
	b.provision(id, map[string]any{"target": "service", "service_steps": []any{
		map[string]any{"interface": "bios", "step": "apply_configuration", "args": map[string]any{"settings": []any{
			map[string]any{"name": "ProcVirtualization", "value": "Disabled"}}}},
		map[string]any{"interface": "firmware", "step": "update", "args": map[string]any{"settings": []any{
			map[string]any{"component": "bmc", "url": e.c.url + "/v1/boot/firmware/bmc-2.00.00.bin"}}}}}})
	b.firmware(id) // saveHostFirmwareComponents
	seen = nil
	n = b.wait(id, 5*time.Minute, func(n bmoNode) bool {
		if !slices.Contains(seen, n.ProvisionState) {
			seen = append(seen, n.ProvisionState)
		}
		if n.ProvisionState == "service failed" {
			t.Fatalf("service failed: %s", n.LastError)
		}
		return settled("active")(n)
	})
	if n.PowerState != "power on" || n.LastError != "" {
		t.Errorf("after servicing: power %s, last_error %q", n.PowerState, n.LastError)
	}
	if fw := b.firmware(id); fw["bmc"] != "2.00.00" {
		t.Errorf("GET /firmware after the update: %v", fw)
	}
	if v := b.bios(id)["ProcVirtualization"]; v != "Disabled" {
		t.Errorf("GET /bios after apply_configuration: ProcVirtualization = %q", v)
	}
	booted = waitSerialMarkers(t, e, booted+1, 2*time.Minute)
	step("serviced (" + strings.Join(seen, " → ") + "): BMC 2.00.00, BIOS applied, instance booted again")

	// 7. Power: BMO never powers such a node off; it reboots it.
	for _, target := range []string{"soft rebooting", "rebooting"} {
		b.power(id, target)
		n = b.wait(id, 2*time.Minute, func(n bmoNode) bool { return n.TargetPowerState == "" && n.PowerState == "power on" })
		if n.LastError != "" {
			t.Errorf("%s: last_error %q", target, n.LastError)
		}
		booted = waitSerialMarkers(t, e, booted+1, time.Minute) // the instance booted again
	}
	b.do("PUT", "/v1/nodes/"+id+"/states/power", map[string]any{"target": "power off"}, 409)
	if on, _ := e.node.On(t.Context()); !on {
		t.Error("the VM is off after BMO's power actions")
	}
	step("soft rebooting and rebooting accepted (202), the instance booted again each time; power off refused (409)")

	// 8. Health (1.109), read from the node by computeConditions.
	if n = b.node(id); n.Health != "OK" {
		t.Errorf("health %q, want OK", n.Health)
	}

	// 9. The subscription got the BMC's events.
	ev := sink.seen()
	if !slices.Contains(ev, "ResourceEvent.1.3.ResourcePoweredOn") || !slices.Contains(ev, "ResourceEvent.1.3.ResourceChanged") {
		t.Errorf("events delivered to the subscription: %v, want a power-on and the media change", ev)
	}
	step("health OK; events so far: " + strings.Join(ev, ", "))

	// 10. Deprovisioning, then a second deploy aborted in wait call-back
	// (1.110), then BMO's forced detach: maintenance, then DELETE.
	b.provision(id, map[string]any{"target": "deleted"})
	b.wait(id, 5*time.Minute, func(n bmoNode) bool {
		if n.ProvisionState == "clean failed" || n.ProvisionState == "error" {
			t.Fatalf("deprovisioning: %s: %s", n.ProvisionState, n.LastError)
		}
		return settled("available")(n)
	})
	assertErased(t, e.disks[1:])
	if hasAt(t, e.disks[0].Path, 0, e.image[:512]) {
		t.Error("the deployed image survived deprovisioning")
	}
	step("deleted: automated cleaning done, available")

	deploy("6f1d2c3b-4a5e-4f60-8a7b-9c0d1e2f3a4b")
	b.wait(id, 3*time.Minute, func(n bmoNode) bool {
		if n.ProvisionState == "active" || n.ProvisionState == "deploy failed" {
			t.Fatalf("the deploy ended (%s) before wait call-back was seen", n.ProvisionState)
		}
		return n.ProvisionState == "wait call-back"
	})
	b.provision(id, map[string]any{"target": "abort"})
	n = b.wait(id, time.Minute, func(n bmoNode) bool { return n.ProvisionState == "deploy failed" && n.Reservation == "" })
	if n.LastError == "" {
		t.Error("deploy failed without last_error: BMO would requeue in a hot loop")
	}
	n = b.wait(id, time.Minute, func(n bmoNode) bool { return n.TargetPowerState == "" })
	if n.PowerState != "power on" {
		t.Errorf("power_state %s after the abort, want power on (disable_power_off)", n.PowerState)
	}
	time.Sleep(2 * time.Second)
	if n = b.node(id); n.ProvisionState != "deploy failed" || len(n.CleanStep) != 0 {
		t.Errorf("after the abort: %s, clean_step %v: no automated cleaning may start", n.ProvisionState, n.CleanStep)
	}
	step("second deploy aborted in wait call-back: deploy failed, " + n.LastError)

	// The BMC never saw a power-off in all of the above; the finalizer
	// deletes the subscription before the node goes.
	ev = sink.seen()
	if slices.Contains(ev, "ResourceEvent.1.3.ResourcePoweredOff") {
		t.Errorf("the BMC powered the node off although disable_power_off is set: events %v", ev)
	}
	b.do("DELETE", "/v1/nodes/"+id+"/vendor_passthru?method=delete_subscription", map[string]any{"id": sub.ID}, 200, 202, 204)
	step(fmt.Sprintf("no power-off among the BMC's %d events; subscription deleted", len(ev)))

	b.do("PUT", "/v1/nodes/"+id+"/maintenance", map[string]any{"reason": "forcing deletion in baremetal-operator"}, 202)
	b.do("DELETE", "/v1/nodes/"+id, nil, 202, 204)
	b.do("GET", "/v1/nodes/"+id, nil, 404)
	b.do("GET", "/v1/nodes/"+name, nil, 404)
	b.decode(b.do("GET", "/v1/ports?"+portsQuery("address", e.mac), nil, 200), &ports)
	if len(ports.Ports) != 0 {
		t.Errorf("the node's port outlived it: %+v", ports)
	}
	step("detached: maintenance, DELETE, GET 404")

	// What the BMC was asked to do, all test long: resets only, never a
	// power-off (ForceOff, GracefulShutdown).
	var resets []string
	for _, line := range strings.Split(e.bmcLog.String(), "\n") {
		if i := strings.Index(line, "reset_type="); i >= 0 && strings.Contains(line, "vbmc: reset") {
			resets = append(resets, strings.Fields(line[i+len("reset_type="):])[0])
		}
	}
	t.Logf("Redfish resets the BMC got: %s", strings.Join(resets, " "))
	for _, r := range resets {
		if r == vbmc.ResetForceOff || r == vbmc.ResetGracefulShutdown {
			t.Errorf("the BMC got a %s although disable_power_off is set", r)
		}
	}
	if t.Failed() {
		t.Logf("BMC log:\n%s", e.bmcLog.String())
	}
}

// assertConfigDrive checks from the host that the root disk holds the
// deployed image (its MBR boot code and signature; the agent added a
// partition entry) and, in the partition the agent added after it, an
// ISO9660 volume labelled config-2 whose openstack/latest holds the
// meta_data.json and user_data sent. It says where the configdrive is.
func assertConfigDrive(t *testing.T, path string, image []byte, uuid, userData string) string {
	t.Helper()
	disk, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(disk) < len(image) || !bytes.Equal(disk[:446], image[:446]) || !bytes.Equal(disk[510:len(image)], image[510:]) {
		t.Errorf("%s does not hold the deployed image", path)
	}
	var start, count uint32
	for i := range 4 {
		e := disk[446+16*i:]
		if e[4] != 0 {
			start, count = binary.LittleEndian.Uint32(e[8:]), binary.LittleEndian.Uint32(e[12:])
			if e[4] != 0x83 || i != 0 {
				t.Errorf("partition %d has type %#x, want the configdrive's (0x83) as the first", i+1, e[4])
			}
		}
	}
	off, size := int64(start)*512, int64(count)*512
	if start == 0 || off < int64(len(image)) || off+size > int64(len(disk)) || size > 64<<20 {
		t.Fatalf("no configdrive partition after the image: start %d, %d sectors", start, count)
	}
	p := filepath.Join(t.TempDir(), "configdrive.iso")
	if err := os.WriteFile(p, disk[off:off+size], 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fsys, err := iso9660.Read(file.New(f, true), size, 0, 2048)
	if err != nil {
		t.Fatalf("the configdrive partition holds no ISO9660 volume: %v", err)
	}
	if l := strings.TrimRight(fsys.Label(), " \x00"); l != "config-2" {
		t.Errorf("configdrive volume label %q, want config-2", l)
	}
	meta, err := fsys.ReadFile("openstack/latest/meta_data.json")
	if err != nil {
		t.Fatalf("configdrive meta_data.json: %v", err)
	}
	var m map[string]any
	if err := json.Unmarshal(meta, &m); err != nil || m["uuid"] != uuid || m["local-hostname"] != "host-0" {
		t.Errorf("configdrive meta_data.json = %s (%v), want uuid %s and local-hostname host-0", meta, err, uuid)
	}
	ud, err := fsys.ReadFile("openstack/latest/user_data")
	if err != nil || string(ud) != userData {
		t.Errorf("configdrive user_data = %q (%v), want %q", ud, err, userData)
	}
	nd, err := fsys.ReadFile("openstack/latest/network_data.json")
	if err != nil || !strings.Contains(string(nd), `"eth0"`) {
		t.Errorf("configdrive network_data.json = %s (%v)", nd, err)
	}
	return fmt.Sprintf("configdrive (config-2 ISO with meta_data.json, user_data, network_data.json) in MBR partition 1 at %d MiB, %d MiB", off>>20, size>>20)
}
