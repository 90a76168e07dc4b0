package vbmc

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Firmware components a node has, as named in a firmware image's header.
const (
	FirmwareBIOS = "BIOS"
	FirmwareBMC  = "BMC"
	FirmwareNIC  = "NIC"
)

// FirmwareOptions tune the Redfish firmware update (UpdateService and
// TaskService) and switch on the quirks of real BMCs, for tests.
type FirmwareOptions struct {
	// UpdateDuration is how long flashing takes once the image is
	// downloaded and verified; PercentComplete advances over it. Zero
	// means 10 s.
	UpdateDuration time.Duration
	// OfflineAfterBMCUpdate: the BMC restarts after a BMC update and
	// answers every request (Redfish and the control endpoint) with
	// 503 Service Unavailable, Retry-After and Connection: close for
	// BMCRestart. The listener stays up: a refused connection would need
	// the listener to close, which the Server does not own.
	OfflineAfterBMCUpdate bool
	// BMCRestart is how long the BMC is unreachable; zero means 20 s,
	// about what an iDRAC or iLO takes.
	BMCRestart time.Duration
	// PurgeCompletedTasks: a task answers 404 once Completed, like Dell's
	// purged jobs; clients must read the inventory to learn the outcome.
	PurgeCompletedTasks bool
	// StallTasks: tasks stay Running (at 50 %) for ever, for the
	// controller's timeout tests.
	StallTasks bool
	// PushOnly: the UpdateService offers no SimpleUpdate action, only
	// MultipartHttpPushUri (the client uploads the image), like
	// Supermicro X12 and OpenBMC; a SimpleUpdate POST is then 404.
	// Without it both are offered, as on iDRAC 9 and iLO 6.
	PushOnly bool
}

func (o FirmwareOptions) withDefaults() FirmwareOptions {
	if o.UpdateDuration <= 0 {
		o.UpdateDuration = 10 * time.Second
	}
	if o.BMCRestart <= 0 {
		o.BMCRestart = 20 * time.Second
	}
	return o
}

// Firmware images are what SimpleUpdate downloads (or a client pushes to
// MultipartHttpPushUri): a magic line, a JSON header line, then the
// payload, whose SHA-256 the header carries:
//
//	ANVIL-FIRMWARE 1
//	{"component":"BIOS","version":"2.0.0","sha256":"<hex of payload>"}
//	<payload bytes>
const firmwareMagic = "ANVIL-FIRMWARE 1"

// Bounds on a downloaded image: headers are one short line, payloads stand
// in for real images of a few MiB.
const (
	maxFirmwareHeader  = 4 << 10
	maxFirmwarePayload = 256 << 20
)

// FirmwareHeader is a firmware image's header.
type FirmwareHeader struct {
	Component string `json:"component"`
	Version   string `json:"version"`
	SHA256    string `json:"sha256"`
}

// FirmwareImage builds a valid image of component at version around
// payload. Tests corrupt it by changing bytes after the header.
func FirmwareImage(component, version string, payload []byte) []byte {
	sum := sha256.Sum256(payload)
	h, _ := json.Marshal(FirmwareHeader{Component: component, Version: version, SHA256: hex.EncodeToString(sum[:])})
	out := append([]byte(firmwareMagic+"\n"), h...)
	out = append(out, '\n')
	return append(out, payload...)
}

// errImageInvalid marks an image that was downloaded but is not acceptable;
// other fetch errors are transfer failures. The BMC reports them with
// different MessageIds.
var errImageInvalid = errors.New("image verification failed")

// readFirmwareImage parses and verifies an image from r.
func readFirmwareImage(r io.Reader) (FirmwareHeader, error) {
	var h FirmwareHeader
	br := bufio.NewReaderSize(r, maxFirmwareHeader)
	magic, err := br.ReadSlice('\n')
	if err != nil || strings.TrimSpace(string(magic)) != firmwareMagic {
		return h, fmt.Errorf("%w: not an anvil firmware image (no %q line)", errImageInvalid, firmwareMagic)
	}
	line, err := br.ReadSlice('\n')
	if err != nil {
		return h, fmt.Errorf("%w: truncated header: %w", errImageInvalid, err)
	}
	if err := json.Unmarshal(line, &h); err != nil {
		return h, fmt.Errorf("%w: bad header: %w", errImageInvalid, err)
	}
	if h.Component == "" || h.Version == "" || h.SHA256 == "" {
		return h, fmt.Errorf("%w: header needs component, version and sha256", errImageInvalid)
	}
	sum := sha256.New()
	n, err := io.Copy(sum, io.LimitReader(br, maxFirmwarePayload+1))
	if err != nil {
		return h, fmt.Errorf("download interrupted: %w", err)
	}
	if n > maxFirmwarePayload {
		return h, fmt.Errorf("%w: payload larger than %d bytes", errImageInvalid, maxFirmwarePayload)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); !strings.EqualFold(got, h.SHA256) {
		return h, fmt.Errorf("%w: checksum mismatch: payload has sha256 %s, header says %s", errImageInvalid, got, h.SHA256)
	}
	return h, nil
}

// fetchFirmware downloads and verifies the image at url.
func fetchFirmware(ctx context.Context, url string) (FirmwareHeader, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return FirmwareHeader{}, fmt.Errorf("cannot fetch %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return FirmwareHeader{}, fmt.Errorf("cannot fetch %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return FirmwareHeader{}, fmt.Errorf("cannot fetch %s: HTTP %s", url, resp.Status)
	}
	return readFirmwareImage(resp.Body)
}

// component is one updatable firmware of one node.
type component struct {
	node    string
	kind    string // FirmwareBIOS, ...
	id      string // inventory id, unique across nodes
	name    string
	version string
	pending string // flashed, active after the next boot
}

// componentKinds lists each node's firmware: inventory id suffix, kind,
// name and factory version.
func componentKinds() [][4]string {
	return [][4]string{
		{"BIOS", FirmwareBIOS, "System BIOS", "2.19.1"},
		{"BMC", FirmwareBMC, "BMC Firmware", "1.00.00"},
		{"NIC.1", FirmwareNIC, "Virtual NIC 1 Firmware", "20.5.13"},
	}
}

// firmware is the BMC's firmware update state: inventory, tasks and the
// background work, which Close stops.
type firmware struct {
	log    *slog.Logger
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu           sync.Mutex
	opts         FirmwareOptions
	comps        []*component
	tasks        map[string]*task
	taskOrder    []string
	nextTask     int
	offlineUntil time.Time
}

func newFirmware(log *slog.Logger, nodes []*Node) *firmware {
	ctx, cancel := context.WithCancel(context.Background())
	f := &firmware{log: log, ctx: ctx, cancel: cancel, opts: FirmwareOptions{}.withDefaults(), tasks: map[string]*task{}}
	for _, n := range nodes {
		for _, k := range componentKinds() {
			// Ids carry the node's name: one vbmc serves several nodes
			// under one UpdateService.
			f.comps = append(f.comps, &component{node: n.Name, kind: k[1], id: n.Name + "-" + k[0], name: k[2], version: k[3]})
		}
	}
	return f
}

// SetFirmwareOptions replaces the firmware update knobs.
func (s *Server) SetFirmwareOptions(o FirmwareOptions) {
	s.fw.mu.Lock()
	defer s.fw.mu.Unlock()
	s.fw.opts = o.withDefaults()
}

// FirmwareVersion returns the active version of a node's component
// (FirmwareBIOS, ...) and the version waiting for the next boot, if any.
func (s *Server) FirmwareVersion(node, kind string) (active, pending string) {
	s.fw.mu.Lock()
	defer s.fw.mu.Unlock()
	if c := s.fw.find(node, kind); c != nil {
		return c.version, c.pending
	}
	return "", ""
}

// find returns node's component of kind. Called with f.mu held.
func (f *firmware) find(node, kind string) *component {
	for _, c := range f.comps {
		if c.node == node && c.kind == kind {
			return c
		}
	}
	return nil
}

// version is the active version, for the System and Manager documents.
func (f *firmware) version(node, kind string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c := f.find(node, kind); c != nil {
		return c.version
	}
	return ""
}

// booted activates the node's staged BIOS and NIC images, as the firmware
// does at the first boot after a flash.
func (f *firmware) booted(node string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.comps {
		if c.node == node && c.pending != "" {
			f.log.Info("vbmc: firmware activated at boot", "node", node, "component", c.kind, "from", c.version, "to", c.pending)
			c.version, c.pending = c.pending, ""
		}
	}
}

// afterReset tells the firmware about a reset: a start or restart of the
// machine is a boot. A GracefulShutdown the OS ignores is not.
func (f *firmware) afterReset(node, resetType string, wasOn, on bool) {
	restart := resetType == ResetForceRestart || resetType == ResetGracefulRestart || resetType == ResetPowerCycle
	if on && (restart || (resetType == ResetOn && !wasOn)) {
		f.booted(node)
	}
}

const (
	inventoryPath    = "/redfish/v1/UpdateService/FirmwareInventory"
	simpleUpdatePath = "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate"
	// pushPath is the MultipartHttpPushUri (iDRAC's name for it).
	pushPath = "/redfish/v1/UpdateService/MultipartUpload"
)

func (s *Server) firmwareRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET /redfish/v1/UpdateService", s.auth(s.updateService))
	mux.HandleFunc("GET "+inventoryPath, s.auth(s.listFirmware))
	mux.HandleFunc("GET "+inventoryPath+"/{fw}", s.auth(s.getFirmware))
	mux.HandleFunc("POST "+simpleUpdatePath, s.auth(s.simpleUpdate))
	mux.HandleFunc("POST "+pushPath, s.auth(s.multipartPush))
	s.taskRoutes(mux)
}

func (s *Server) pushOnly() bool {
	s.fw.mu.Lock()
	defer s.fw.mu.Unlock()
	return s.fw.opts.PushOnly
}

func (s *Server) updateService(w http.ResponseWriter, _ *http.Request) {
	u := odata("/redfish/v1/UpdateService", "#UpdateService.v1_11_0.UpdateService")
	u["Id"], u["Name"] = "UpdateService", "Update Service"
	u["ServiceEnabled"] = true
	u["Status"] = map[string]any{"State": "Enabled", "Health": "OK"}
	u["FirmwareInventory"] = link(inventoryPath)
	u["MultipartHttpPushUri"] = pushPath
	u["MaxImageSizeBytes"] = maxPushImage
	u["Actions"] = map[string]any{}
	if !s.pushOnly() {
		u["Actions"] = map[string]any{"#UpdateService.SimpleUpdate": map[string]any{
			"target": simpleUpdatePath,
			"TransferProtocol@Redfish.AllowableValues": []string{"HTTP", "HTTPS"},
		}}
	}
	writeJSON(w, http.StatusOK, u)
}

func (s *Server) listFirmware(w http.ResponseWriter, _ *http.Request) {
	s.fw.mu.Lock()
	var members []string
	for _, c := range s.fw.comps {
		members = append(members, inventoryPath+"/"+c.id)
	}
	s.fw.mu.Unlock()
	writeJSON(w, http.StatusOK, collection(inventoryPath, "#SoftwareInventoryCollection.SoftwareInventoryCollection", "Firmware Inventory Collection", members))
}

func (s *Server) getFirmware(w http.ResponseWriter, r *http.Request) {
	s.fw.mu.Lock()
	i := slices.IndexFunc(s.fw.comps, func(c *component) bool { return c.id == r.PathValue("fw") })
	var c component
	if i >= 0 {
		c = *s.fw.comps[i]
	}
	s.fw.mu.Unlock()
	if i < 0 {
		redfishError(w, http.StatusNotFound, "ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", r.URL.Path))
		return
	}
	d := odata(inventoryPath+"/"+c.id, "#SoftwareInventory.v1_3_0.SoftwareInventory")
	d["Id"], d["Name"], d["Version"], d["Updateable"] = c.id, c.name, c.version, true
	d["SoftwareId"] = c.kind
	d["Manufacturer"] = "anvil"
	d["Status"] = map[string]any{"State": "Enabled", "Health": "OK"}
	related := "/redfish/v1/Systems/" + c.node
	for _, n := range s.nodes {
		if n.Name == c.node {
			related = "/redfish/v1/Systems/" + n.SystemID() // the UUID quirk moves the system
		}
	}
	if c.kind == FirmwareBMC {
		related = "/redfish/v1/Managers/" + c.node
	}
	d["RelatedItem"], d["RelatedItem@odata.count"] = []any{link(related)}, 1
	if c.pending != "" {
		// No standard property says "staged"; real BMCs use Oem too.
		d["Oem"] = map[string]any{"Anvil": map[string]any{"PendingVersion": c.pending, "PendingActivation": "ForceRestart"}}
	}
	writeJSON(w, http.StatusOK, d)
}

// simpleUpdate starts a task that downloads ImageURI and flashes it. With
// no Targets the image's component on the only node is updated; with
// several nodes Targets is required (one inventory item).
func (s *Server) simpleUpdate(w http.ResponseWriter, r *http.Request) {
	if s.pushOnly() {
		redfishError(w, http.StatusNotFound, "ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", r.URL.Path))
		return
	}
	var body struct {
		ImageURI         string
		Targets          []string
		TransferProtocol string
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		redfishError(w, http.StatusBadRequest, "MalformedJSON", "The request body submitted was malformed JSON: "+err.Error())
		return
	}
	if body.ImageURI == "" {
		redfishError(w, http.StatusBadRequest, "ActionParameterMissing", "The action SimpleUpdate requires the parameter ImageURI to be present in the request body.")
		return
	}
	proto := strings.ToUpper(body.TransferProtocol)
	if proto != "" && proto != "HTTP" && proto != "HTTPS" {
		redfishError(w, http.StatusBadRequest, "ActionParameterNotSupported", fmt.Sprintf("The parameter TransferProtocol value %q is not supported (HTTP, HTTPS).", body.TransferProtocol))
		return
	}
	uri := body.ImageURI
	if proto != "" && !strings.Contains(uri, "://") {
		// Redfish lets ImageURI omit the scheme when TransferProtocol
		// names it.
		uri = strings.ToLower(proto) + "://" + uri
	}
	if !strings.HasPrefix(uri, "http://") && !strings.HasPrefix(uri, "https://") {
		redfishError(w, http.StatusBadRequest, "ActionParameterValueFormatError", fmt.Sprintf("The value %q for the parameter ImageURI is not an http or https URL.", body.ImageURI))
		return
	}
	t, err := s.fw.resolveTarget("SimpleUpdate", body.Targets)
	if err != nil {
		redfishError(w, http.StatusBadRequest, err.id, err.msg)
		return
	}
	s.startTask(w, image{name: uri, action: simpleUpdatePath}, t)
}

// startTask starts the update's task and answers 202 with it.
func (s *Server) startTask(w http.ResponseWriter, img image, t target) {
	doc := s.fw.start(img, t)
	if doc == nil {
		redfishError(w, http.StatusServiceUnavailable, "ServiceShuttingDown", "The service is shutting down.")
		return
	}
	w.Header().Set("Location", doc["@odata.id"].(string))
	writeJSON(w, http.StatusAccepted, doc)
}

// target is what an update was aimed at: a node, and one of its components
// when Targets named it ("" kind: whatever the image is for).
type target struct{ node, kind, id string }

type actionError struct{ id, msg string }

// resolveTarget finds what action (named in messages) was aimed at.
func (f *firmware) resolveTarget(action string, targets []string) (target, *actionError) {
	f.mu.Lock()
	defer f.mu.Unlock()
	switch len(targets) {
	case 0:
		nodes := map[string]bool{}
		for _, c := range f.comps {
			nodes[c.node] = true
		}
		if len(nodes) != 1 {
			return target{}, &actionError{"ActionParameterMissing", "The action " + action + " requires the parameter Targets: this BMC manages several systems."}
		}
		return target{node: f.comps[0].node}, nil
	case 1:
		id := strings.TrimPrefix(strings.TrimSuffix(targets[0], "/"), inventoryPath+"/")
		for _, c := range f.comps {
			if c.id == id {
				return target{node: c.node, kind: c.kind, id: c.id}, nil
			}
		}
		return target{}, &actionError{"ActionParameterValueNotInList", fmt.Sprintf("The value %q for the parameter Targets is not a firmware inventory item of this BMC.", targets[0])}
	}
	return target{}, &actionError{"ActionParameterValueNotInList", action + " takes one target per request on this BMC."}
}
