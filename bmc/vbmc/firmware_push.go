package vbmc

// The Redfish push update (UpdateService MultipartHttpPushUri): the client
// uploads the image as multipart/form-data, a part UpdateParameters (JSON:
// Targets, @Redfish.OperationApplyTime) and a part UpdateFile (the image);
// the BMC answers 202 with a task, which then runs as a pulled image's.

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"path"
	"strings"
)

// Bounds on a push: the image (announced as MaxImageSizeBytes), the JSON
// part, and the parts a client may send beside them (OemParameters).
const (
	maxPushImage  = maxFirmwareHeader + maxFirmwarePayload
	maxPushParams = 64 << 10
	maxPushParts  = 8
	// maxPushBody leaves room for the parts' headers and boundaries.
	maxPushBody = maxPushImage + maxPushParams + 64<<10
)

// pushParams is the UpdateParameters part.
type pushParams struct {
	Targets   []string `json:"Targets"`
	ApplyTime string   `json:"@Redfish.OperationApplyTime"`
}

// pushError is a refused push: its HTTP status and Redfish message.
type pushError struct {
	status  int
	id, msg string
}

func (e *pushError) Error() string { return e.msg }

func badPush(id, msg string) *pushError { return &pushError{http.StatusBadRequest, id, msg} }

// multipartPush takes an uploaded image and starts its task. The image is
// read whole into memory (bounded by MaxImageSizeBytes, as a BMC's
// staging area is) and verified by the task: a corrupt image fails the
// task, a malformed request is refused here.
func (s *Server) multipartPush(w http.ResponseWriter, r *http.Request) {
	params, img, perr := readPush(w, r)
	if perr != nil {
		if perr.status == http.StatusRequestEntityTooLarge {
			w.Header().Set("Connection", "close") // the rest of the body is not read
		}
		redfishError(w, perr.status, perr.id, perr.msg)
		return
	}
	switch params.ApplyTime {
	case "", "Immediate", "OnReset":
		// A BMC image is active at once, a BIOS or NIC one at the next
		// boot, whatever was asked: as a real BMC stages them.
	default:
		redfishError(w, http.StatusBadRequest, "ActionParameterValueNotInList",
			fmt.Sprintf("The value %q for the parameter @Redfish.OperationApplyTime is not supported (Immediate, OnReset).", params.ApplyTime))
		return
	}
	t, aerr := s.fw.resolveTarget("MultipartHttpPushUri", params.Targets)
	if aerr != nil {
		redfishError(w, http.StatusBadRequest, aerr.id, aerr.msg)
		return
	}
	s.startTask(w, img, t)
}

// readPush reads and checks the multipart body: both parts present, the
// parameters valid JSON, the image within bounds.
func readPush(w http.ResponseWriter, r *http.Request) (pushParams, image, *pushError) {
	var params pushParams
	mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if err != nil || mt != "multipart/form-data" {
		return params, image{}, &pushError{http.StatusUnsupportedMediaType, "GeneralError",
			fmt.Sprintf("MultipartHttpPushUri takes multipart/form-data with the parts UpdateParameters and UpdateFile, not %q.", r.Header.Get("Content-Type"))}
	}
	if r.ContentLength > maxPushBody {
		return params, image{}, tooLarge()
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxPushBody)
	mr, err := r.MultipartReader()
	if err != nil {
		return params, image{}, badPush("GeneralError", "The multipart body cannot be read: "+err.Error())
	}
	var gotParams bool
	img := image{action: pushPath, pushed: true}
	for i := 0; ; i++ {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return params, image{}, readFailed(err)
		}
		if i >= maxPushParts {
			return params, image{}, badPush("GeneralError", fmt.Sprintf("The multipart body has more than %d parts.", maxPushParts))
		}
		switch part.FormName() {
		case "UpdateParameters":
			raw, err := io.ReadAll(io.LimitReader(part, maxPushParams+1))
			if err != nil {
				return params, image{}, readFailed(err)
			}
			if len(raw) > maxPushParams {
				return params, image{}, badPush("MalformedJSON", fmt.Sprintf("The part UpdateParameters is larger than %d bytes.", maxPushParams))
			}
			if err := json.Unmarshal(raw, &params); err != nil {
				return params, image{}, badPush("MalformedJSON", "The part UpdateParameters is malformed JSON: "+err.Error())
			}
			gotParams = true
		case "UpdateFile":
			img.name = "UpdateFile"
			if fn := path.Base(strings.ReplaceAll(part.FileName(), `\`, "/")); fn != "" && fn != "." && fn != "/" {
				img.name = fn
			}
			img.data, err = io.ReadAll(io.LimitReader(part, maxPushImage+1))
			if err != nil {
				return params, image{}, readFailed(err)
			}
			if len(img.data) > maxPushImage {
				return params, image{}, tooLarge()
			}
		default:
			// OemParameters and the like: read past.
			if _, err := io.Copy(io.Discard, part); err != nil {
				return params, image{}, readFailed(err)
			}
		}
	}
	switch {
	case !gotParams:
		return params, image{}, badPush("ActionParameterMissing", "The action MultipartHttpPushUri requires the part UpdateParameters to be present in the request body.")
	case img.data == nil:
		return params, image{}, badPush("ActionParameterMissing", "The action MultipartHttpPushUri requires the part UpdateFile to be present in the request body.")
	}
	return params, img, nil
}

func tooLarge() *pushError {
	return &pushError{http.StatusRequestEntityTooLarge, "GeneralError",
		fmt.Sprintf("The image is larger than MaxImageSizeBytes (%d bytes).", maxPushImage)}
}

func readFailed(err error) *pushError {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		return tooLarge()
	}
	return badPush("GeneralError", "The multipart body cannot be read: "+err.Error())
}
