package bmc

// Firmware over Redfish, through gofish on the bmclib session (as the
// BIOS, redfish_bios.go): bmclib v2.3.0 has no URL-pull SimpleUpdate, and
// its inventory only looks at systems with ids it knows.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"

	"github.com/stmcginnis/gofish"
)

// maxInventory bounds the firmware inventory members read (a large server
// lists a few dozen).
const maxInventory = 128

// systemDoc finds the selected system as biosURI does and returns its URI
// and document.
func (s *redfishSession) systemDoc(c *gofish.APIClient) (string, map[string]any, error) {
	sys := s.tr.systemID
	if sys == "" {
		body, _, err := getDoc(c, systemsPath)
		if err != nil {
			return "", nil, err
		}
		coll, err := decodeObject(body)
		if err != nil {
			return "", nil, fmt.Errorf("systems collection: %w", err)
		}
		members, _ := coll["Members"].([]any)
		if len(members) != 1 || odataID(members[0]) == "" {
			return "", nil, fmt.Errorf("systems collection: %d members: set redfish_system_id", len(members))
		}
		sys = odataID(members[0])
	}
	body, _, err := getDoc(c, sys)
	if err != nil {
		return "", nil, err
	}
	obj, err := decodeObject(body)
	if err != nil {
		return "", nil, fmt.Errorf("system %s: %w", sys, err)
	}
	if id := odataID(obj); id != "" {
		sys = id
	}
	return sys, obj, nil
}

// firmware implements firmwareSession.
func (s *redfishSession) firmware(ctx context.Context) ([]FirmwareComponent, error) {
	s.tr.reset()
	c, err := s.gofish(ctx)
	if err != nil {
		return nil, s.classify(ctx, err)
	}
	sysURI, sys, err := s.systemDoc(c)
	if err != nil {
		return nil, s.classify(ctx, err)
	}
	inv := firmwareInventory{system: sysURI, biosVersion: str(sys["BiosVersion"])}
	links, _ := sys["Links"].(map[string]any)
	if managers, _ := links["ManagedBy"].([]any); len(managers) > 0 {
		inv.manager = odataID(managers[0])
	}
	if inv.manager != "" {
		body, _, err := getDoc(c, inv.manager)
		if err != nil {
			return nil, s.classify(ctx, err)
		}
		mgr, err := decodeObject(body)
		if err != nil {
			return nil, fmt.Errorf("manager %s: %w", inv.manager, err)
		}
		inv.bmcVersion = str(mgr["FirmwareVersion"])
	}
	collURI, err := s.inventoryURI(c)
	if err != nil {
		return nil, s.classify(ctx, err)
	}
	if collURI != "" {
		body, _, err := getDoc(c, collURI)
		if err != nil {
			return nil, s.classify(ctx, err)
		}
		coll, err := decodeObject(body)
		if err != nil {
			return nil, fmt.Errorf("firmware inventory: %w", err)
		}
		members, _ := coll["Members"].([]any)
		if len(members) > maxInventory {
			members = members[:maxInventory]
		}
		for _, m := range members {
			uri := odataID(m)
			if uri == "" {
				continue
			}
			body, _, err := getDoc(c, uri)
			if err != nil {
				return nil, s.classify(ctx, err)
			}
			item, err := parseInventoryItem(body)
			if err != nil {
				return nil, fmt.Errorf("firmware inventory member %s: %w", uri, err)
			}
			if item.uri == "" {
				item.uri = uri
			}
			inv.items = append(inv.items, item)
		}
	}
	return inv.components(), nil
}

// inventoryURI is the UpdateService's FirmwareInventory ("" when the BMC
// has no update service or lists no inventory).
func (s *redfishSession) inventoryURI(c *gofish.APIClient) (string, error) {
	svc, err := s.updateService(c)
	if err != nil || svc == nil {
		return "", err
	}
	return odataID(svc["FirmwareInventory"]), nil
}

// updateService reads the service root's UpdateService (nil: none).
func (s *redfishSession) updateService(c *gofish.APIClient) (map[string]any, error) {
	body, err := updateServiceDoc(c)
	if err != nil || body == nil {
		return nil, err
	}
	svc, err := decodeObject(body)
	if err != nil {
		return nil, fmt.Errorf("update service: %w", err)
	}
	return svc, nil
}

// updateServiceDoc is the UpdateService document (nil: the service root
// names none).
func updateServiceDoc(c *gofish.APIClient) ([]byte, error) {
	body, _, err := getDoc(c, "/redfish/v1/")
	if err != nil {
		return nil, err
	}
	root, err := decodeObject(body)
	if err != nil {
		return nil, fmt.Errorf("service root: %w", err)
	}
	uri := odataID(root["UpdateService"])
	if uri == "" {
		return nil, nil
	}
	body, _, err = getDoc(c, uri)
	return body, err
}

// simpleUpdate implements firmwareSession: #UpdateService.SimpleUpdate
// with the image's URL (the BMC pulls it) and, when the component is in
// the inventory, that member as the one target.
func (s *redfishSession) simpleUpdate(ctx context.Context, imageURL, target string) (string, error) {
	s.tr.reset()
	c, err := s.gofish(ctx)
	if err != nil {
		return "", s.classify(ctx, err)
	}
	o, err := s.offer(c)
	if err != nil {
		return "", s.classify(ctx, err)
	}
	if o.simpleUpdate == "" {
		return "", fmt.Errorf("%w: the BMC's UpdateService offers no SimpleUpdate", ErrUnsupported)
	}
	return s.postSimpleUpdate(ctx, c, o.simpleUpdate, imageURL, target)
}

// postSimpleUpdate asks the BMC at uri (the action's target) to pull
// imageURL.
func (s *redfishSession) postSimpleUpdate(ctx context.Context, c *gofish.APIClient, uri, imageURL, target string) (string, error) {
	body := map[string]any{"ImageURI": imageURL}
	if p := urlScheme(imageURL); p == "HTTP" || p == "HTTPS" {
		body["TransferProtocol"] = p
	}
	if target != "" {
		body["Targets"] = []string{target}
	}
	resp, err := c.Post(uri, body)
	if err != nil {
		return "", s.classify(ctx, &bmclibError{msg: fmt.Sprintf("POST %s: %s", uri, redfishMessages(err)), cause: err})
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxDoc))
	task := taskLocation(resp.Header.Get("Location"), raw)
	if task == "" {
		return "", fmt.Errorf("POST %s: HTTP %d without a task to watch (no Location, no task in the body)", uri, resp.StatusCode)
	}
	return task, nil
}

// task implements firmwareSession.
func (s *redfishSession) task(ctx context.Context, uri string) (FirmwareTask, error) {
	s.tr.reset()
	c, err := s.gofish(ctx)
	if err != nil {
		return FirmwareTask{}, s.classify(ctx, err)
	}
	body, _, err := getDoc(c, uri)
	if err != nil {
		if httpStatus(err) == http.StatusNotFound {
			return FirmwareTask{URI: uri, Gone: true, Percent: -1}, nil
		}
		return FirmwareTask{}, s.classify(ctx, err)
	}
	return parseTask(uri, body)
}

// taskLocation is the task an accepted SimpleUpdate or push started: the body's
// task (its @odata.id) or else the Location header (a task or its
// monitor, which answers with the task too).
func taskLocation(location string, body []byte) string {
	if obj, err := decodeObject(body); err == nil {
		if id, _ := obj["@odata.id"].(string); id != "" && strings.Contains(id, "/Task") {
			return id
		}
	}
	if location != "" {
		if i := strings.Index(location, "/redfish/"); i > 0 {
			location = location[i:] // an absolute URL: gofish takes paths
		}
		return location
	}
	return ""
}

// parseTask decodes a Redfish Task.
func parseTask(uri string, body []byte) (FirmwareTask, error) {
	var doc struct {
		TaskState       string
		TaskStatus      string
		PercentComplete *json.Number
		Messages        []struct {
			MessageID string `json:"MessageId"`
			Message   string
		}
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		return FirmwareTask{}, fmt.Errorf("task %s: %w", uri, err)
	}
	if doc.TaskState == "" {
		return FirmwareTask{}, fmt.Errorf("task %s: no TaskState", uri)
	}
	t := FirmwareTask{URI: uri, State: doc.TaskState, Status: doc.TaskStatus, Percent: -1}
	if doc.PercentComplete != nil {
		if p, err := doc.PercentComplete.Int64(); err == nil && p >= 0 && p <= 100 {
			t.Percent = int(p)
		}
	}
	for _, m := range doc.Messages {
		text := strings.TrimSpace(m.Message)
		if text == "" {
			text = m.MessageID
		}
		if text != "" {
			t.Messages = append(t.Messages, text)
		}
	}
	return t, nil
}

// inventoryItem is a FirmwareInventory member.
type inventoryItem struct {
	uri, id, name, softwareID, version string
	related                            []string
	updateable                         bool
}

func parseInventoryItem(body []byte) (inventoryItem, error) {
	obj, err := decodeObject(body)
	if err != nil {
		return inventoryItem{}, err
	}
	it := inventoryItem{uri: odataID(obj), id: str(obj["Id"]), name: str(obj["Name"]), softwareID: str(obj["SoftwareId"]),
		version: str(obj["Version"]), updateable: true}
	if u, ok := obj["Updateable"].(bool); ok {
		it.updateable = u
	}
	rel, _ := obj["RelatedItem"].([]any)
	for _, r := range rel {
		if id := odataID(r); id != "" {
			it.related = append(it.related, id)
		}
	}
	return it, nil
}

// firmwareInventory is what Firmware reads: the system, its manager and
// the inventory members.
type firmwareInventory struct {
	system, manager         string
	biosVersion, bmcVersion string
	items                   []inventoryItem
}

// components names this system's firmware as Ironic does. The BIOS and
// BMC versions come from the system and its manager (Ironic reads them
// there too); the inventory gives their update targets, the NICs and the
// disks. A
// member related to another system or manager of the BMC is not ours; a
// member related to nothing is, on a BMC with one system.
func (inv firmwareInventory) components() []FirmwareComponent {
	bios := FirmwareComponent{Component: ComponentBIOS, Version: inv.biosVersion, Updateable: true}
	bmc := FirmwareComponent{Component: ComponentBMC, Version: inv.bmcVersion, Updateable: true}
	var parts []FirmwareComponent // NICs and disks, the first member of each kept
	seen := map[string]bool{}
	for _, it := range inv.items {
		ours, toManager := inv.relation(it)
		if !ours || notRunning(it) {
			continue
		}
		switch kind := classifyItem(it, toManager); {
		case kind == ComponentBIOS && bios.InventoryURI == "":
			bios = mergeItem(bios, it)
		case kind == ComponentBMC && bmc.InventoryURI == "":
			bmc = mergeItem(bmc, it)
		case kind == componentNIC || kind == componentDisk:
			name := kind + partID(it, strings.TrimSuffix(strings.ToUpper(kind), ":"))
			if !seen[name] {
				seen[name] = true
				parts = append(parts, FirmwareComponent{Component: name, Version: it.version,
					Name: it.name, InventoryURI: it.uri, Updateable: it.updateable})
			}
		}
	}
	var out []FirmwareComponent
	for _, c := range []FirmwareComponent{bios, bmc} {
		if c.Version != "" || c.InventoryURI != "" {
			out = append(out, c)
		}
	}
	return append(out, parts...)
}

// relation says whether an inventory member is this system's, and whether
// it is its manager's.
func (inv firmwareInventory) relation(it inventoryItem) (ours, toManager bool) {
	if len(it.related) == 0 {
		return true, false
	}
	for _, r := range it.related {
		r = strings.TrimSuffix(r, "/")
		switch {
		case inv.manager != "" && (r == inv.manager || strings.HasPrefix(r, inv.manager+"/")):
			return true, true
		case r == inv.system || strings.HasPrefix(r, inv.system+"/"):
			return true, false
		}
	}
	return false, false
}

// notRunning: iDRAC lists each component up to three times, as
// "Installed-<id>" (what runs), "Previous-<id>" (the rollback image) and
// "Available-<id>" (staged): only what runs is the component's version.
func notRunning(it inventoryItem) bool {
	id := it.id
	if id == "" {
		id = it.uri[strings.LastIndex(it.uri, "/")+1:]
	}
	return strings.HasPrefix(id, "Previous-") || strings.HasPrefix(id, "Available-")
}

// classifyItem: bios, bmc, componentNIC, componentDisk, or "" for what
// is not listed (PSUs, CPLDs, backplanes).
func classifyItem(it inventoryItem, toManager bool) string {
	text := strings.ToUpper(it.id + " " + it.name + " " + it.softwareID)
	switch {
	case toManager || strings.Contains(text, "BMC") || strings.Contains(text, "IDRAC") || strings.Contains(text, "ILO"):
		return ComponentBMC
	case strings.Contains(text, "BIOS"):
		return ComponentBIOS
	case strings.Contains(text, "NIC") || strings.Contains(text, "NETWORK"):
		return componentNIC
	case strings.Contains(text, "DISK") || strings.Contains(text, "DRIVE"):
		return componentDisk
	}
	return ""
}

// partID is a NIC's or disk's id from the point its kind's word (NIC,
// DISK) starts: without what a multi-system BMC prefixes to make it
// unique ("node-1-NIC.1" → "NIC.1") or iDRAC's install state and version
// ("Installed-0-1.1__Disk.Bay.0" → "Disk.Bay.0").
func partID(it inventoryItem, word string) string {
	id := it.id
	if id == "" {
		id = it.uri[strings.LastIndex(it.uri, "/")+1:]
	}
	if i := strings.Index(strings.ToUpper(id), word); i > 0 {
		id = id[i:]
	}
	return id
}

func mergeItem(c FirmwareComponent, it inventoryItem) FirmwareComponent {
	c.InventoryURI, c.Name, c.Updateable = it.uri, it.name, it.updateable
	if c.Version == "" {
		c.Version = it.version
	}
	return c
}

func str(v any) string {
	s, _ := v.(string)
	return s
}
