package ui

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
)

// fleetParams are the /v1/nodes list parameters the fleet page passes on.
var fleetParams = []string{"limit", "marker", "sort_key", "sort_dir", "provision_state", "maintenance", "retired",
	"description_contains", "name_contains", "text_contains", "owner", "resource_class", "driver", "fault"}

// fleetFields are what a fleet row shows. driver_internal_info holds the
// running step's progress; it is read here and cut down to that, so a page
// of 50 rows stays a few kilobytes however large the nodes' step caches.
const fleetFields = "uuid,name,provision_state,target_provision_state,power_state,maintenance,maintenance_reason," +
	"retired,last_error,owner,resource_class,clean_step,deploy_step,service_step,driver_internal_info"

// fleetRow is one row of the fleet table.
type fleetRow struct {
	UUID                 string    `json:"uuid"`
	Name                 *string   `json:"name"`
	ProvisionState       string    `json:"provision_state"`
	TargetProvisionState *string   `json:"target_provision_state"`
	PowerState           *string   `json:"power_state"`
	Maintenance          bool      `json:"maintenance"`
	MaintenanceReason    *string   `json:"maintenance_reason"`
	Retired              bool      `json:"retired"`
	LastError            *string   `json:"last_error"`
	Owner                *string   `json:"owner"`
	ResourceClass        *string   `json:"resource_class"`
	Step                 *stepInfo `json:"step"`
}

// stepInfo is the running step and its progress, as the agent reported it.
type stepInfo struct {
	Name       string  `json:"name"`  // interface.step
	Index      int     `json:"index"` // 1-based
	Total      int     `json:"total"`
	Percent    float64 `json:"percent"`
	Message    string  `json:"message,omitempty"`
	Device     string  `json:"device,omitempty"`
	BytesDone  uint64  `json:"bytes_done,omitempty"`
	BytesTotal uint64  `json:"bytes_total,omitempty"`
	StartedAt  string  `json:"started_at,omitempty"`
}

// apiNode is the part of the API's node document a fleet row reads.
type apiNode struct {
	fleetRow
	CleanStep          map[string]any `json:"clean_step"`
	DeployStep         map[string]any `json:"deploy_step"`
	ServiceStep        map[string]any `json:"service_step"`
	DriverInternalInfo struct {
		CleanSteps    []json.RawMessage `json:"clean_steps"`
		CleanIndex    *int              `json:"clean_step_index"`
		DeploySteps   []json.RawMessage `json:"deploy_steps"`
		DeployIndex   *int              `json:"deploy_step_index"`
		ServiceSteps  []json.RawMessage `json:"service_steps"`
		ServiceIndex  *int              `json:"service_step_index"`
		CommandStatus *struct {
			State     string `json:"state"`
			StartedAt string `json:"started_at"`
			Progress  *struct {
				Percent    float64 `json:"percent"`
				Message    string  `json:"message"`
				Device     string  `json:"device"`
				BytesDone  uint64  `json:"bytes_done"`
				BytesTotal uint64  `json:"bytes_total"`
			} `json:"progress"`
		} `json:"agent_command_status"`
	} `json:"driver_internal_info"`
}

// row cuts an API node down to a fleet row.
func (n *apiNode) row() fleetRow {
	r := n.fleetRow
	step, list, idx := n.CleanStep, n.DriverInternalInfo.CleanSteps, n.DriverInternalInfo.CleanIndex
	if len(step) == 0 {
		step, list, idx = n.DeployStep, n.DriverInternalInfo.DeploySteps, n.DriverInternalInfo.DeployIndex
	}
	if len(step) == 0 {
		step, list, idx = n.ServiceStep, n.DriverInternalInfo.ServiceSteps, n.DriverInternalInfo.ServiceIndex
	}
	if len(step) == 0 {
		return r
	}
	iface, _ := step["interface"].(string)
	name, _ := step["step"].(string)
	si := &stepInfo{Name: iface + "." + name, Total: len(list)}
	if idx != nil {
		si.Index = *idx + 1
	}
	if cs := n.DriverInternalInfo.CommandStatus; cs != nil && cs.State == "RUNNING" && cs.Progress != nil {
		p := cs.Progress
		si.Percent, si.Message, si.Device, si.BytesDone, si.BytesTotal = p.Percent, p.Message, p.Device, p.BytesDone, p.BytesTotal
		si.StartedAt = cs.StartedAt
	}
	r.Step = si
	return r
}

// fleet serves one page of the fleet table through the API's node list
// (server-side paging with limit and marker, sorting and filters).
func (h *Handler) fleet(w http.ResponseWriter, r *http.Request) {
	in := r.URL.Query()
	out := url.Values{}
	for k, v := range in {
		known := false
		for _, p := range fleetParams {
			known = known || p == k
		}
		if !known {
			writeError(w, http.StatusBadRequest, "Unknown argument(s): "+k)
			return
		}
		out[k] = v
	}
	if !out.Has("limit") {
		out.Set("limit", "50")
	}
	out.Set("fields", fleetFields)
	status, body := h.get(r, "/v1/nodes?"+out.Encode())
	if status != http.StatusOK {
		// the API's own error (bad filter, unknown marker) in its format
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(body)
		return
	}
	var page struct {
		Nodes []apiNode `json:"nodes"`
		Next  string    `json:"next"`
	}
	if err := json.Unmarshal(body, &page); err != nil {
		h.log.Error("decoding the API's node list failed", "err", err)
		writeError(w, http.StatusInternalServerError, "Internal server error; see the controller log")
		return
	}
	rows := make([]fleetRow, 0, len(page.Nodes))
	for i := range page.Nodes {
		rows = append(rows, page.Nodes[i].row())
	}
	next := ""
	if page.Next != "" && len(rows) > 0 {
		next = rows[len(rows)-1].UUID
	}
	writeJSON(w, http.StatusOK, map[string]any{"nodes": rows, "next_marker": next})
}

// node serves the API's node document with its running step worked out
// the way a fleet row shows it: {"node": {...}, "step": {...} | null}.
func (h *Handler) node(w http.ResponseWriter, r *http.Request) {
	status, body := h.get(r, "/v1/nodes/"+url.PathEscape(r.PathValue("node")))
	if status != http.StatusOK {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		_, _ = w.Write(body)
		return
	}
	var n apiNode
	if err := json.Unmarshal(body, &n); err != nil {
		h.log.Error("decoding the API's node failed", "err", err)
		writeError(w, http.StatusInternalServerError, "Internal server error; see the controller log")
		return
	}
	doc := map[string]any{"node": json.RawMessage(body), "step": n.row().Step}
	if h.policy != nil {
		var who struct {
			Owner  *string `json:"owner"`
			Lessee *string `json:"lessee"`
		}
		_ = json.Unmarshal(body, &who) // the node decoded above
		deref := func(s *string) string {
			if s == nil {
				return ""
			}
			return *s
		}
		// the buttons the page shows: only the actions the account may take
		doc["may"] = h.policy.NodeActions(r, deref(who.Owner), deref(who.Lessee))
	}
	writeJSON(w, http.StatusOK, doc)
}

// get runs a GET of path (with query) against the API or the dashboard's
// own endpoints as the requesting user: same credentials, same cookies,
// the latest microversion.
func (h *Handler) get(r *http.Request, path string) (int, []byte) {
	u, err := url.Parse(path)
	if err != nil {
		return http.StatusBadRequest, errorBody("Invalid path: " + err.Error())
	}
	sub := r.Clone(r.Context())
	sub.Method, sub.URL, sub.RequestURI, sub.Body, sub.ContentLength = http.MethodGet, u, u.RequestURI(), http.NoBody, 0
	sub.Header = r.Header.Clone()
	sub.Header.Set("X-OpenStack-Ironic-API-Version", "latest")
	sub.Header.Del("Accept")
	rec := &recorder{header: http.Header{}, status: http.StatusOK}
	if strings.HasPrefix(u.Path, "/ui/") {
		h.mux.ServeHTTP(rec, sub)
	} else {
		h.api.ServeHTTP(rec, sub)
	}
	return rec.status, rec.buf.Bytes()
}

func errorBody(msg string) []byte {
	inner, _ := json.Marshal(map[string]any{"faultcode": "Client", "faultstring": msg, "debuginfo": nil})
	b, _ := json.Marshal(map[string]string{"error_message": string(inner)})
	return b
}

// recorder is an in-memory http.ResponseWriter for sub-requests.
type recorder struct {
	header http.Header
	status int
	wrote  bool
	buf    bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(code int) {
	if !r.wrote {
		r.status, r.wrote = code, true
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	r.wrote = true
	n, err := r.buf.Write(b)
	if err != nil {
		return n, fmt.Errorf("buffer response: %w", err)
	}
	return n, nil
}
