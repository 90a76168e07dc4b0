package vbmc

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// MediaBackend is a Backend with a virtual CD drive (Redfish VirtualMedia).
type MediaBackend interface {
	// InsertMedia puts the image file into the CD drive, also while the
	// machine is off (the next boot sees it).
	InsertMedia(ctx context.Context, file string) error
	// EjectMedia empties the CD drive.
	EjectMedia(ctx context.Context) error
	// MediaDir is where the node keeps fetched images ("": a temp dir).
	MediaDir() string
	// HasMedia reports whether this machine has the CD drive.
	HasMedia() bool
}

// Media is a node's virtual CD as Redfish shows it.
type Media struct {
	Image    string // the URL it was inserted from
	Inserted bool
	Bytes    int64
}

// maxMediaBytes bounds a fetched image: an agent ISO is tens of MiB.
const maxMediaBytes = 2 << 30

// Errors of InsertMedia and EjectMedia.
var (
	ErrNoMedia    = errors.New("this node has no virtual media")
	ErrMediaInUse = errors.New("the virtual CD slot is in use: eject it first")
)

// Media returns the node's virtual CD.
func (n *Node) Media() Media {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.media
}

// HasMedia reports whether the node has a virtual CD drive.
func (n *Node) HasMedia() bool {
	mb, ok := n.backend.(MediaBackend)
	return ok && mb.HasMedia()
}

// InsertMedia fetches the image at url, as a BMC does, and puts it into
// the node's CD drive. A slot already in use is refused (eject first), as
// the Redfish VirtualMedia schema has it.
func (n *Node) InsertMedia(ctx context.Context, url string) error {
	mb, ok := n.backend.(MediaBackend)
	if !ok || !mb.HasMedia() {
		return ErrNoMedia
	}
	n.mu.Lock()
	held := n.media
	n.mu.Unlock()
	if held.Inserted {
		return fmt.Errorf("%w (it holds %s)", ErrMediaInUse, held.Image)
	}
	file, size, err := fetchMedia(ctx, mb.MediaDir(), n.Name, url)
	if err != nil {
		return err
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := mb.InsertMedia(ctx, file); err != nil {
		os.Remove(file)
		return err
	}
	n.mediaFile = file
	n.media = Media{Image: url, Inserted: true, Bytes: size}
	return nil
}

// EjectMedia empties the node's CD drive and forgets the fetched image.
func (n *Node) EjectMedia(ctx context.Context) error {
	mb, ok := n.backend.(MediaBackend)
	if !ok || !mb.HasMedia() {
		return ErrNoMedia
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if err := mb.EjectMedia(ctx); err != nil {
		return err
	}
	if n.mediaFile != "" {
		os.Remove(n.mediaFile)
	}
	n.mediaFile, n.media = "", Media{}
	return nil
}

// fetchMedia downloads url into dir. Errors name the server's answer: the
// controller reports them as the BMC's.
func fetchMedia(ctx context.Context, dir, node, url string) (string, int64, error) {
	if !strings.HasPrefix(url, "http://") && !strings.HasPrefix(url, "https://") {
		return "", 0, fmt.Errorf("image %q: only http and https URLs are supported", url)
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", 0, fmt.Errorf("image %s: %w", url, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", 0, fmt.Errorf("cannot fetch image %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", 0, fmt.Errorf("cannot fetch image %s: HTTP %s", url, resp.Status)
	}
	if dir == "" {
		dir = os.TempDir()
	}
	f, err := os.CreateTemp(dir, "vbmc-media-"+filepath.Base(node)+"-*.iso")
	if err != nil {
		return "", 0, fmt.Errorf("image %s: %w", url, err)
	}
	n, err := io.Copy(f, io.LimitReader(resp.Body, maxMediaBytes+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > maxMediaBytes {
		err = fmt.Errorf("larger than %d bytes", int64(maxMediaBytes))
	}
	if err != nil {
		os.Remove(f.Name())
		return "", 0, fmt.Errorf("cannot fetch image %s: %w", url, err)
	}
	return f.Name(), n, nil
}

// Redfish: one manager per node (Managers/{node}) with one CD slot
// (VirtualMedia/Cd), linked both ways with the system.

func (s *Server) listManagers(w http.ResponseWriter, _ *http.Request) {
	var members []string
	for _, n := range s.nodes {
		members = append(members, "/redfish/v1/Managers/"+n.Name)
	}
	writeJSON(w, http.StatusOK, collection("/redfish/v1/Managers", "#ManagerCollection.ManagerCollection", "Manager Collection", members))
}

func (s *Server) getManager(w http.ResponseWriter, _ *http.Request, n *Node) {
	id := "/redfish/v1/Managers/" + n.Name
	m := odata(id, "#Manager.v1_10_0.Manager")
	m["Id"], m["Name"], m["ManagerType"] = n.Name, "BMC of "+n.Name, "BMC"
	m["Status"] = map[string]any{"State": "Enabled", "Health": "OK"}
	m["FirmwareVersion"] = s.fw.version(n.Name, FirmwareBMC)
	m["Links"] = map[string]any{"ManagerForServers": []any{link("/redfish/v1/Systems/" + n.SystemID())}}
	m["LogServices"] = link(id + "/LogServices")
	if n.HasMedia() {
		m["VirtualMedia"] = link(id + "/VirtualMedia")
	}
	writeJSON(w, http.StatusOK, m)
}

func (s *Server) listVirtualMedia(w http.ResponseWriter, _ *http.Request, n *Node) {
	id := "/redfish/v1/Managers/" + n.Name + "/VirtualMedia"
	var members []string
	if n.HasMedia() {
		members = append(members, id+"/Cd")
	}
	writeJSON(w, http.StatusOK, collection(id, "#VirtualMediaCollection.VirtualMediaCollection", "Virtual Media Services", members))
}

func (s *Server) withMedia(h func(http.ResponseWriter, *http.Request, *Node)) func(http.ResponseWriter, *http.Request, *Node) {
	return func(w http.ResponseWriter, r *http.Request, n *Node) {
		if r.PathValue("media") != "Cd" || !n.HasMedia() {
			redfishError(w, http.StatusNotFound, "ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", r.URL.Path))
			return
		}
		h(w, r, n)
	}
}

func (s *Server) getVirtualMedia(w http.ResponseWriter, _ *http.Request, n *Node) {
	id := "/redfish/v1/Managers/" + n.Name + "/VirtualMedia/Cd"
	md := n.Media()
	v := odata(id, "#VirtualMedia.v1_3_0.VirtualMedia")
	v["Id"], v["Name"] = "Cd", "Virtual CD"
	v["MediaTypes"] = []string{"CD", "DVD"}
	v["Image"], v["Inserted"], v["WriteProtected"] = nil, md.Inserted, true
	v["ConnectedVia"] = "NotConnected"
	s.mu.Lock()
	empty := s.emptyInserted[n.Name]
	s.mu.Unlock()
	if empty && !md.Inserted {
		v["Inserted"] = true // the MediaInsertedWithoutImage fault
	}
	if md.Inserted {
		v["Image"], v["ImageName"], v["ConnectedVia"] = md.Image, filepath.Base(md.Image), "URI"
	}
	v["TransferProtocolType"] = "HTTP"
	v["Actions"] = map[string]any{
		"#VirtualMedia.InsertMedia": map[string]any{"target": id + "/Actions/VirtualMedia.InsertMedia"},
		"#VirtualMedia.EjectMedia":  map[string]any{"target": id + "/Actions/VirtualMedia.EjectMedia"},
	}
	writeJSON(w, http.StatusOK, v)
}

func (s *Server) insertMedia(w http.ResponseWriter, r *http.Request, n *Node) {
	var body struct {
		Image          string
		Inserted       *bool
		WriteProtected *bool
	}
	if err := json.NewDecoder(io.LimitReader(r.Body, maxBody)).Decode(&body); err != nil {
		redfishError(w, http.StatusBadRequest, "MalformedJSON", "The request body is not valid JSON: "+err.Error())
		return
	}
	if body.Image == "" {
		redfishError(w, http.StatusBadRequest, "PropertyMissing", "The property Image is a required property and must be included in the request.")
		return
	}
	if body.Inserted != nil && !*body.Inserted {
		redfishError(w, http.StatusBadRequest, "PropertyValueNotInList", "Inserted=false is not supported: use EjectMedia.")
		return
	}
	if body.WriteProtected != nil && !*body.WriteProtected {
		redfishError(w, http.StatusBadRequest, "PropertyValueNotInList", "The virtual CD is read-only: WriteProtected must be true.")
		return
	}
	if s.getFaults().MediaInsertedWithoutImage {
		s.log.Info("vbmc: fault: virtual media reported inserted without an image", "node", n.Name)
		s.mu.Lock()
		s.emptyInserted[n.Name] = true
		s.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if s.getFaults().IgnoreMediaInsert {
		s.log.Info("vbmc: fault: ignoring virtual media insert", "node", n.Name)
		w.WriteHeader(http.StatusNoContent)
		return
	}
	if err := n.InsertMedia(r.Context(), body.Image); errors.Is(err, ErrMediaInUse) {
		redfishError(w, http.StatusConflict, "ResourceInUse", "InsertMedia failed: "+err.Error())
		return
	} else if err != nil {
		redfishError(w, http.StatusBadRequest, "ActionParameterValueError", "InsertMedia failed: "+err.Error())
		return
	}
	s.log.Info("vbmc: virtual media inserted", "node", n.Name, "image", body.Image, "bytes", n.Media().Bytes)
	s.mediaEvent(n, "inserted")
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) ejectMedia(w http.ResponseWriter, r *http.Request, n *Node) {
	s.mu.Lock()
	delete(s.emptyInserted, n.Name)
	s.mu.Unlock()
	if err := n.EjectMedia(r.Context()); err != nil {
		redfishError(w, http.StatusInternalServerError, "InternalError", "EjectMedia failed: "+err.Error())
		return
	}
	s.log.Info("vbmc: virtual media ejected", "node", n.Name)
	s.mediaEvent(n, "ejected")
	w.WriteHeader(http.StatusNoContent)
}

// InsertMedia implements MediaBackend: the in-memory CD holds the file.
func (m *Memory) InsertMedia(_ context.Context, file string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.media = file
	return nil
}

// EjectMedia implements MediaBackend.
func (m *Memory) EjectMedia(context.Context) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.media = ""
	return nil
}

// MediaDir implements MediaBackend: a temp dir.
func (m *Memory) MediaDir() string { return "" }

// HasMedia implements MediaBackend: unless NoMedia is set.
func (m *Memory) HasMedia() bool { return !m.NoMedia }

// MediaFile returns the file in the in-memory CD drive ("": empty).
func (m *Memory) MediaFile() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.media
}
