package api

// The virtual media API (POST and DELETE /v1/nodes/{node}/vmedia from
// 1.89, GET from 1.93) and node vendor passthru (/v1/nodes/{node}/
// vendor_passthru?method=..., and .../vendor_passthru/methods), in the
// shapes and words of Ironic's api/controllers/v1/node.py
// (NodeVmediaController, NodeVendorPassthruController) and utils.py
// (vendor_passthru). The work is the conductor's (vmediaapi.go,
// vendorpassthru.go); the images it downloads for image_download_source
// "local" are served to BMCs here, under /v1/boot/{node}/data/.

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/gorilla/mux"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/vmedia"
)

// The microversions of the vmedia API.
const (
	vmediaVersion    = 89 // attach and detach
	vmediaGetVersion = 93 // the slots read from the BMC
)

// DataImages serves the images the conductor downloaded for
// image_download_source "local" (controller/vmedia.DataImages).
type DataImages interface {
	Open(nodeUUID, secret, file string) (*os.File, error)
	// RemoveNode removes a deleted node's images.
	RemoveNode(nodeUUID string)
}

func (s *Server) vmediaRoutes(r *mux.Router, authed func(handler) http.Handler, public func(string, handler) http.Handler) {
	n := "/nodes/{node}"
	r.Handle(n+"/vmedia", authed(s.attachVmedia)).Methods(http.MethodPost)
	r.Handle(n+"/vmedia", authed(s.detachVmedia)).Methods(http.MethodDelete)
	r.Handle(n+"/vmedia", authed(s.getVmedia)).Methods(http.MethodGet)
	r.Handle(n+"/vendor_passthru/methods", authed(s.vendorMethods)).Methods(http.MethodGet)
	r.Handle(n+"/vendor_passthru", authed(s.vendorPassthru)).
		Methods(http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete)
	r.Handle("/boot/{node}/data/{key:[0-9a-f]{48}}/{file}", public("boot_file", s.dataImage)).Methods(http.MethodGet, http.MethodHead)
}

// vmediaSchema is Ironic's VMEDIA_ATTACH_VALIDATOR.
func vmediaSchema() *schema {
	return &schema{
		props: []prop{{name: "device_type", types: []string{"string"}}, {name: "image_download_source", types: []string{"string"}},
			{name: "image_url", types: []string{"string"}}},
		required: []string{"device_type", "image_url"},
	}
}

// vmediaURLSchemes are the schemes Ironic lets the BMC fetch
// (image_publisher.VMEDIA_SUPPORTED_URL_SCHEMES).
func vmediaURLSchemes() []string { return []string{"http", "https", "nfs", "cifs", "smb"} }

// notOneOf is jsonschema's enum error.
func notOneOf(v string, allowed []string) error {
	quoted := make([]string, len(allowed))
	for i, a := range allowed {
		quoted[i] = pyRepr(a)
	}
	return badRequest("Schema error for vmedia: %s is not one of [%s]", pyRepr(v), strings.Join(quoted, ", "))
}

func (s *Server) attachVmedia(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if err := since(ctx, vmediaVersion); err != nil {
		return err
	}
	doc, err := readObject(r)
	if err != nil {
		return err
	}
	if err := vmediaSchema().validate("vmedia", doc); err != nil {
		return err
	}
	req := conductor.VmediaAttach{DeviceType: doc["device_type"].(string), ImageURL: doc["image_url"].(string), DownloadSource: "local"}
	if src, ok := doc["image_download_source"].(string); ok {
		if !slices.Contains([]string{"http", "local", "swift"}, src) {
			return notOneOf(src, []string{"http", "local", "swift"})
		}
		req.DownloadSource = src
	}
	if !slices.Contains(conductor.VmediaDevices(), req.DeviceType) {
		return notOneOf(req.DeviceType, conductor.VmediaDevices())
	}
	scheme := ""
	if u, err := url.Parse(req.ImageURL); err == nil {
		scheme = strings.ToLower(u.Scheme)
	}
	if !slices.Contains(vmediaURLSchemes(), scheme) {
		return badRequest("Unsupported or missing URL scheme: %s", scheme)
	}
	ident, err := nodeIdent(r)
	if err != nil {
		return err
	}
	if err := s.cond.AttachVirtualMedia(ctx, ident, req); err != nil {
		return nodeErr(ident, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// nodeErr names the node a store miss was about.
func nodeErr(ident string, err error) error {
	var ce *conductor.Error
	if !errors.As(err, &ce) && isNotFound(err) {
		return notFound("Node", ident)
	}
	return err
}

func (s *Server) detachVmedia(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if err := since(ctx, vmediaVersion); err != nil {
		return err
	}
	q, err := parseQuery(r, "device_types")
	if err != nil {
		return err
	}
	var devices []string
	if raw := q.v.Get("device_types"); raw != "" {
		var invalid []string
		for _, d := range strings.Split(raw, ",") {
			d = strings.TrimSpace(d)
			if d == "" {
				continue
			}
			if !slices.Contains(conductor.VmediaDevices(), d) {
				invalid = append(invalid, d)
			}
			devices = append(devices, d)
		}
		if len(invalid) > 0 {
			return badRequest("Invalid device type(s) %s (valid are %s)", strings.Join(invalid, ", "), strings.Join(conductor.VmediaDevices(), ", "))
		}
	}
	ident, err := nodeIdent(r)
	if err != nil {
		return err
	}
	if err := s.cond.DetachVirtualMedia(ctx, ident, devices); err != nil {
		return nodeErr(ident, err)
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) getVmedia(w http.ResponseWriter, r *http.Request) error {
	ctx := r.Context()
	if err := since(ctx, vmediaGetVersion); err != nil {
		return err
	}
	ident, err := nodeIdent(r)
	if err != nil {
		return err
	}
	slots, err := s.cond.GetVirtualMedia(ctx, ident)
	if err != nil {
		return nodeErr(ident, err)
	}
	writeJSON(w, http.StatusOK, slots)
	return nil
}

func (s *Server) vendorMethods(w http.ResponseWriter, r *http.Request) error {
	ident, err := nodeIdent(r)
	if err != nil {
		return err
	}
	methods, err := s.cond.VendorPassthruMethods(r.Context(), ident)
	if err != nil {
		return nodeErr(ident, err)
	}
	writeJSON(w, http.StatusOK, methods)
	return nil
}

// vendorPassthru is Ironic's NodeVendorPassthruController._default: the
// body (any JSON object; none is {}) goes to the method as its
// arguments; a synchronous method's return value is the answer, 200.
func (s *Server) vendorPassthru(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r, "method")
	if err != nil {
		return err
	}
	ident, err := nodeIdent(r)
	if err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	args := map[string]any{}
	if len(body) > 0 {
		if args, err = decodeObject(body); err != nil {
			return err
		}
	}
	method := q.v.Get("method")
	if method == "" {
		return badRequest("Method not specified")
	}
	res, err := s.cond.VendorPassthru(r.Context(), ident, method, r.Method, args)
	if err != nil {
		return nodeErr(ident, err)
	}
	if res.Async {
		w.WriteHeader(http.StatusAccepted)
		return nil
	}
	raw, err := json.Marshal(res.Return)
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(raw)
	return nil
}

// dataImage serves an image the conductor downloaded for the node's BMC
// (image_download_source "local"); 404 for any other secret.
func (s *Server) dataImage(w http.ResponseWriter, r *http.Request) error {
	missing := notFound("Boot file", "data image")
	if s.dataImages == nil {
		return missing
	}
	f, err := s.dataImages.Open(muxVar(r, "node"), muxVar(r, "key"), muxVar(r, "file"))
	if errors.Is(err, vmedia.ErrNotFound) {
		return missing
	}
	if err != nil {
		return err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Cache-Control", "no-store")
	extendWrite(w, bootFileWriteTimeout)
	http.ServeContent(w, r, muxVar(r, "file"), st.ModTime(), f)
	return nil
}
