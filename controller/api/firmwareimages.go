package api

// GET /v1/boot/firmware/{file}: firmware images from --firmware-dir, for
// BMCs to pull during firmware.update (Redfish SimpleUpdate sends no
// credentials, so the route is public, as the boot files are). Only
// regular files directly in the directory are served, through os.Root:
// no name, symlink or ".." leaves it.

import (
	"net/http"
	"os"
	"regexp"

	"github.com/anvil-metal/anvil/internal/regularfile"
)

// firmwareImageName is what a served image may be called: one path
// element, no leading dot.
var firmwareImageName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,254}$`)

func (s *Server) firmwareImage(w http.ResponseWriter, r *http.Request) error {
	name := muxVar(r, "file")
	if s.firmwareDir == "" || !firmwareImageName.MatchString(name) {
		return notFound("Firmware image", name)
	}
	root, err := os.OpenRoot(s.firmwareDir)
	if err != nil {
		return notFound("Firmware image", name)
	}
	defer root.Close()
	f, err := regularfile.OpenIn(root, name)
	if err != nil {
		return notFound("Firmware image", name)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return err
	}
	if st.Mode().Perm()&0o004 == 0 {
		// Only what anyone on the host may read is served: a database or a
		// key (mode 0600) put or linked there by mistake stays private.
		return notFound("Firmware image", name)
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	extendWrite(w, bootFileWriteTimeout)
	http.ServeContent(w, r, name, st.ModTime(), f)
	return nil
}
