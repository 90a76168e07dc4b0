package ui

import (
	"context"
	"encoding/json"
	"net/http"
	"net/url"

	"github.com/anvil-metal/anvil/controller/store"
)

// BIOSCache reads what the controller cached of a node's BIOS settings
// and firmware versions. The dashboard reads the store itself for these
// (not the API) because only the store keeps the BMC's pending BIOS
// values, which Ironic's API does not show, and so that the firmware list
// does not depend on the API's microversion.
type BIOSCache interface {
	ListBIOSSettings(ctx context.Context, nodeUUID string) ([]store.BIOSSetting, error)
	ListFirmwareComponents(ctx context.Context, nodeUUID string) ([]store.FirmwareComponent, error)
}

// cacheNode is what the BIOS and firmware pages read of the node: enough
// to say why its cache is empty.
type cacheNode struct {
	UUID           string `json:"uuid"`
	Driver         string `json:"driver"`
	BIOSInterface  string `json:"bios_interface"`
	FirmwareIface  string `json:"firmware_interface"`
	ProvisionState string `json:"provision_state"`
}

// cacheFields are the node fields cacheNode reads through the API.
const cacheFields = "uuid,driver,bios_interface,firmware_interface,provision_state"

// biosDoc is GET /ui/api/nodes/{node}/bios: the cached settings, each with
// Ironic's fields (1.74's registry fields included) and pending_value; and
// when there are none, why.
type biosDoc struct {
	NodeUUID string              `json:"node_uuid"`
	Settings []store.BIOSSetting `json:"bios"`
	Reason   string              `json:"reason,omitempty"`
}

// firmwareDoc is GET /ui/api/nodes/{node}/firmware, as biosDoc.
type firmwareDoc struct {
	NodeUUID   string                    `json:"node_uuid"`
	Components []store.FirmwareComponent `json:"firmware"`
	Reason     string                    `json:"reason,omitempty"`
}

// cacheNodeFor reads the node through the API as the requesting user, so
// that a node the user may not see, or that does not exist, is the API's
// own error; it answers that error itself and returns nil.
func (h *Handler) cacheNodeFor(w http.ResponseWriter, r *http.Request) *cacheNode {
	if h.cache == nil {
		writeError(w, http.StatusNotFound, "This controller's dashboard has no BIOS and firmware cache to read.")
		return nil
	}
	status, body := h.get(r, "/v1/nodes/"+url.PathEscape(r.PathValue("node"))+"?fields="+cacheFields)
	if status != http.StatusOK {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(body)
		return nil
	}
	var n cacheNode
	if err := json.Unmarshal(body, &n); err != nil || n.UUID == "" {
		h.log.Error("decoding the API's node failed", "err", err)
		writeError(w, http.StatusInternalServerError, "Internal server error; see the controller log")
		return nil
	}
	return &n
}

func (h *Handler) bios(w http.ResponseWriter, r *http.Request) {
	n := h.cacheNodeFor(w, r)
	if n == nil {
		return
	}
	settings, err := h.cache.ListBIOSSettings(r.Context(), n.UUID)
	if err != nil {
		h.log.Error("reading the BIOS settings cache failed", "node", n.UUID, "err", err)
		writeError(w, http.StatusInternalServerError, "Internal server error; see the controller log")
		return
	}
	doc := biosDoc{NodeUUID: n.UUID, Settings: settings}
	if len(settings) == 0 {
		doc.Reason = emptyReason(n, true)
	}
	writeJSON(w, http.StatusOK, doc)
}

func (h *Handler) firmware(w http.ResponseWriter, r *http.Request) {
	n := h.cacheNodeFor(w, r)
	if n == nil {
		return
	}
	comps, err := h.cache.ListFirmwareComponents(r.Context(), n.UUID)
	if err != nil {
		h.log.Error("reading the firmware cache failed", "node", n.UUID, "err", err)
		writeError(w, http.StatusInternalServerError, "Internal server error; see the controller log")
		return
	}
	doc := firmwareDoc{NodeUUID: n.UUID, Components: comps}
	if len(comps) == 0 {
		doc.Reason = emptyReason(n, false)
	}
	writeJSON(w, http.StatusOK, doc)
}

// emptyReason says why a node has no cached BIOS settings (bios) or
// firmware versions, most specific first. no-bios turns off the BIOS
// cache only, no-firmware the firmware cache only.
func emptyReason(n *cacheNode, bios bool) string {
	what := "firmware versions"
	if bios {
		what = "BIOS settings"
	}
	switch {
	case n.Driver == "ipmi":
		return "no " + what + " cached: the ipmi driver has none (the redfish hardware type reads them from the BMC)"
	case bios && n.BIOSInterface == "no-bios":
		return "no " + what + " cached: the node's bios_interface is no-bios (set it to redfish to read them)"
	case !bios && n.FirmwareIface == "no-firmware":
		return "no " + what + " cached: the node's firmware_interface is no-firmware (set it to redfish to read them)"
	case n.ProvisionState == "enroll":
		return "no " + what + " cached: the node has not been managed yet (they are read when it becomes manageable)"
	}
	return "no " + what + " cached yet: they are read from the BMC when the node becomes manageable, after cleaning and " +
		"after each BIOS or firmware step; a failed read is in the controller log"
}
