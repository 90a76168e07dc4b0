//go:build vm

package image

// A client of the anvil API that behaves as gophercloud v2.13 does for
// metal3's baremetal-operator (TestVME2EBMOOrder).

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvil-metal/anvil/bmc/vbmc"
)

// bmoVersion is the microversion metal3's baremetal-operator pins when the
// server offers it (pkg/provisioner/ironic/clients/features.go).
const bmoVersion = "1.110"

// bmoClient sends requests as gophercloud v2.13 does for the
// baremetal-operator: both microversion headers, JSON bodies, query
// strings from url.Values.Encode (sorted, percent-encoded), and only the
// status codes gophercloud accepts for each call: any other code is an
// error there, so it fails the test here (BMO would stall or retry).
type bmoClient struct {
	t   *testing.T
	url string
}

func (b *bmoClient) do(method, path string, body any, accept ...int) []byte {
	b.t.Helper()
	var r io.Reader
	if body != nil {
		raw, err := json.Marshal(body)
		if err != nil {
			b.t.Fatal(err)
		}
		r = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, b.url+path, r)
	if err != nil {
		b.t.Fatal(err)
	}
	req.Header.Set("X-OpenStack-Ironic-API-Version", bmoVersion)
	req.Header.Set("OpenStack-API-Version", "baremetal "+bmoVersion)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if !slices.Contains(accept, resp.StatusCode) {
		b.t.Fatalf("%s %s = HTTP %d, gophercloud accepts only %v: %s", method, path, resp.StatusCode, accept, raw)
	}
	return raw
}

// decode is gophercloud's Extract: a JSON type that does not match the
// Go field is an error.
func (b *bmoClient) decode(raw []byte, v any) {
	b.t.Helper()
	if err := json.Unmarshal(raw, v); err != nil {
		b.t.Fatalf("gophercloud could not decode %s: %v", tailBytes(raw, 600), err)
	}
}

// bmoNode is the part of gophercloud's nodes.Node that BMO reads, with
// its Go types.
type bmoNode struct {
	UUID                 string         `json:"uuid"`
	Name                 string         `json:"name"`
	ProvisionState       string         `json:"provision_state"`
	TargetProvisionState string         `json:"target_provision_state"`
	PowerState           string         `json:"power_state"`
	TargetPowerState     string         `json:"target_power_state"`
	LastError            string         `json:"last_error"`
	Fault                string         `json:"fault"`
	Maintenance          bool           `json:"maintenance"`
	Reservation          string         `json:"reservation"`
	DisablePowerOff      bool           `json:"disable_power_off"`
	AutomatedClean       *bool          `json:"automated_clean"`
	Health               string         `json:"health"`
	InstanceUUID         string         `json:"instance_uuid"`
	InspectInterface     string         `json:"inspect_interface"`
	BootInterface        string         `json:"boot_interface"`
	DriverInfo           map[string]any `json:"driver_info"`
	InstanceInfo         map[string]any `json:"instance_info"`
	Properties           map[string]any `json:"properties"`
	CleanStep            map[string]any `json:"clean_step"`
	DeployStep           map[string]any `json:"deploy_step"`
	ServiceStep          map[string]any `json:"service_step"`
	Links                []struct {
		Href string `json:"href"`
		Rel  string `json:"rel"`
	} `json:"links"`
	CreatedAt          time.Time  `json:"created_at"`
	UpdatedAt          *time.Time `json:"updated_at"`
	ProvisionUpdatedAt *time.Time `json:"provision_updated_at"`
}

func (b *bmoClient) node(ident string) bmoNode {
	b.t.Helper()
	var n bmoNode
	b.decode(b.do("GET", "/v1/nodes/"+ident, nil, 200), &n)
	return n
}

// patch sends a JSON patch and returns the answer, which must be the
// whole node: BMO replaces its cached node with it.
func (b *bmoClient) patch(ident string, ops ...map[string]any) bmoNode {
	b.t.Helper()
	var n bmoNode
	b.decode(b.do("PATCH", "/v1/nodes/"+ident, ops, 200), &n)
	if n.UUID == "" || n.ProvisionState == "" || n.DriverInfo == nil {
		b.t.Fatalf("PATCH answered with no full node: %+v", n)
	}
	return n
}

func (b *bmoClient) provision(ident string, body map[string]any) {
	b.t.Helper()
	b.do("PUT", "/v1/nodes/"+ident+"/states/provision", body, 202)
}

func (b *bmoClient) power(ident, target string) {
	b.t.Helper()
	b.do("PUT", "/v1/nodes/"+ident+"/states/power", map[string]any{"target": target}, 202)
}

// wait polls the node until ok says so, each poll a reconcile as BMO
// makes it (every 3 or 10 s there): the ipxe scheme's capacity check (a
// node list with fields), the node, and the firmware components
// (registerHost).
func (b *bmoClient) wait(ident string, timeout time.Duration, ok func(bmoNode) bool) bmoNode {
	b.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var list struct {
			Nodes []struct {
				UUID           string `json:"uuid"`
				Name           string `json:"name"`
				ProvisionState string `json:"provision_state"`
				BootInterface  string `json:"boot_interface"`
			} `json:"nodes"`
		}
		b.decode(b.do("GET", "/v1/nodes?"+url.Values{"fields": {"uuid,name,provision_state,boot_interface"}}.Encode(), nil, 200), &list)
		if len(list.Nodes) != 1 || list.Nodes[0].BootInterface != "ipxe" || list.Nodes[0].ProvisionState == "" {
			b.t.Fatalf("the capacity check's node list: %+v", list)
		}
		n := b.node(ident)
		b.firmware(ident)
		if ok(n) {
			return n
		}
		if time.Now().After(deadline) {
			b.t.Fatalf("node %s: condition not met after %v: %s (target %q), power %s, last_error %q", ident, timeout,
				n.ProvisionState, n.TargetProvisionState, n.PowerState, n.LastError)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

// settled is a stable state as BMO's changePower needs it: no target, no
// reservation, no power change pending.
func settled(state string) func(bmoNode) bool {
	return func(n bmoNode) bool {
		return n.ProvisionState == state && n.TargetProvisionState == "" && n.Reservation == "" && n.TargetPowerState == ""
	}
}

// portsQuery is the query of gophercloud's ports.List as BMO fills it.
func portsQuery(key, value string) string {
	return url.Values{key: {value}, "fields": {"node_uuid,uuid,address"}}.Encode()
}

// bmoInventory is gophercloud's inventory.InventoryData with the fields
// BMO reads (pkg/hardwaredetails), in their Go types.
type bmoInventory struct {
	Inventory struct {
		CPU struct {
			Architecture string   `json:"architecture"`
			Count        int      `json:"count"`
			Flags        []string `json:"flags"`
			Frequency    string   `json:"frequency"`
			ModelName    string   `json:"model_name"`
		} `json:"cpu"`
		Memory struct {
			PhysicalMb int `json:"physical_mb"`
		} `json:"memory"`
		Interfaces []struct {
			Name        string `json:"name"`
			MACAddress  string `json:"mac_address"`
			IPV4Address string `json:"ipv4_address"`
			IPV6Address string `json:"ipv6_address"`
			Vendor      string `json:"vendor"`
			Product     string `json:"product"`
			SpeedMbps   int    `json:"speed_mbps"`
			PCIAddress  string `json:"pci_address"`
		} `json:"interfaces"`
		Disks        []bmoDisk `json:"disks"`
		SystemVendor struct {
			Manufacturer string `json:"manufacturer"`
			ProductName  string `json:"product_name"`
			SerialNumber string `json:"serial_number"`
			Firmware     struct {
				Vendor    string `json:"vendor"`
				Version   string `json:"version"`
				BuildDate string `json:"build_date"`
			} `json:"firmware"`
		} `json:"system_vendor"`
		Hostname string `json:"hostname"`
	} `json:"inventory"`
	PluginData json.RawMessage `json:"plugin_data"`
}

type bmoDisk struct {
	Name               string `json:"name"`
	ByPath             string `json:"by_path"`
	Rotational         bool   `json:"rotational"`
	Size               int64  `json:"size"`
	Vendor             string `json:"vendor"`
	Model              string `json:"model"`
	Serial             string `json:"serial"`
	WWN                string `json:"wwn"`
	WWNWithExtension   string `json:"wwn_with_extension"`
	WWNVendorExtension string `json:"wwn_vendor_extension"`
	Hctl               string `json:"hctl"`
}

// bmoPluginData is what BMO takes from plugin_data; a decode error there
// is only logged by BMO, so the test logs it too.
type bmoPluginData struct {
	AllInterfaces map[string]struct {
		PXEEnabled bool `json:"pxe_enabled"`
	} `json:"all_interfaces"`
}

type bmoFirmware struct {
	Firmware []struct {
		Component          string     `json:"component"`
		InitialVersion     string     `json:"initial_version"`
		CurrentVersion     string     `json:"current_version"`
		LastVersionFlashed string     `json:"last_version_flashed"`
		CreatedAt          time.Time  `json:"created_at"`
		UpdatedAt          *time.Time `json:"updated_at"`
	} `json:"firmware"`
}

// firmware is GET /firmware as BMO's registerHost sends it on every
// reconcile, by component (only bios, bmc and nic:* are kept by BMO).
func (b *bmoClient) firmware(ident string) map[string]string {
	b.t.Helper()
	var fw bmoFirmware
	b.decode(b.do("GET", "/v1/nodes/"+ident+"/firmware", nil, 200), &fw)
	out := map[string]string{}
	for _, c := range fw.Firmware {
		if c.CreatedAt.IsZero() {
			b.t.Errorf("firmware %s: no created_at", c.Component)
		}
		out[c.Component] = c.CurrentVersion
	}
	return out
}

type bmoBIOS struct {
	BIOS []struct {
		Name            string   `json:"name"`
		Value           string   `json:"value"`
		AttributeType   string   `json:"attribute_type"`
		AllowableValues []string `json:"allowable_values"`
		LowerBound      *int     `json:"lower_bound"`
		UpperBound      *int     `json:"upper_bound"`
		MinLength       *int     `json:"min_length"`
		MaxLength       *int     `json:"max_length"`
		ReadOnly        *bool    `json:"read_only"`
		ResetRequired   *bool    `json:"reset_required"`
		Unique          *bool    `json:"unique"`
	} `json:"bios"`
}

// bios is the HostFirmwareSettings controller's GET /bios?detail=true.
func (b *bmoClient) bios(ident string) map[string]string {
	b.t.Helper()
	var s bmoBIOS
	b.decode(b.do("GET", "/v1/nodes/"+ident+"/bios?detail=true", nil, 200), &s)
	out := map[string]string{}
	for _, a := range s.BIOS {
		out[a.Name] = a.Value
	}
	return out
}

// eventSink is the destination of a Redfish event subscription.
type eventSink struct {
	mu   sync.Mutex
	msgs []string // MessageIds, in order
}

func (s *eventSink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var doc struct{ Events []struct{ MessageId string } }
	_ = json.NewDecoder(r.Body).Decode(&doc)
	s.mu.Lock()
	for _, e := range doc.Events {
		s.msgs = append(s.msgs, e.MessageId)
	}
	s.mu.Unlock()
}

func (s *eventSink) seen() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.msgs...)
}

// cdFile is the file QEMU's CD drive holds ("" when empty), from QMP
// query-block.
func cdFile(t *testing.T, q *vbmc.QEMU) string {
	t.Helper()
	raw, err := vbmc.QMP(t.Context(), q.QMPSocket(), "query-block", nil)
	if err != nil {
		t.Fatalf("QMP query-block: %v", err)
	}
	var blocks []struct {
		Device   string `json:"device"`
		Inserted *struct {
			File string `json:"file"`
		} `json:"inserted"`
	}
	if err := json.Unmarshal(raw, &blocks); err != nil {
		t.Fatal(err)
	}
	for _, b := range blocks {
		if strings.HasPrefix(b.Device, "cd0") {
			if b.Inserted == nil {
				return ""
			}
			return b.Inserted.File
		}
	}
	t.Fatalf("no CD drive in %s", raw)
	return ""
}
