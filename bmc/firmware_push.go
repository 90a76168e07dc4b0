package bmc

// How a firmware image reaches the BMC. A BMC whose UpdateService has
// #UpdateService.SimpleUpdate taking the image URL's scheme pulls the
// image itself; one without it (Supermicro X12+, OpenBMC), or whose
// SimpleUpdate turns out not to exist (404/405/501), is pushed the image
// by the controller through the standard MultipartHttpPushUri: a
// multipart/form-data POST with a part UpdateParameters (Targets,
// @Redfish.OperationApplyTime) and a part UpdateFile. The controller
// downloads the image from the URL and streams it to the BMC as it
// arrives, never holding it in memory. The BMC answers with a task,
// watched as SimpleUpdate's is.
//
// This is written here on the session's own transport and token rather
// than through bmclib v2.3.0's FirmwareInstall: its generic Redfish
// provider has no firmware install (only the vendor providers, which the
// session keeps out, have one), its upload needs an *os.File (a temporary
// copy of the image on disk), it answers a task id and not a task URI, and
// gofish's PostMultipart holds the whole body in memory.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"net/textproto"
	"net/url"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stmcginnis/gofish"
	"github.com/stmcginnis/gofish/common"
)

// How the BMC was asked, as Outcome.Provider and the log name it.
const (
	MethodSimpleUpdate = "SimpleUpdate"
	MethodPush         = "MultipartHttpPushUri"
)

const (
	// maxPushImage bounds an image the controller pushes (a BMC's
	// MaxImageSizeBytes may lower it): real images are tens to a few
	// hundred MiB.
	maxPushImage = 2 << 30
	// pushTimeout bounds downloading and uploading one image.
	pushTimeout = 30 * time.Minute
	// downloadHeaderTimeout bounds the wait for the image server's answer.
	downloadHeaderTimeout = time.Minute
)

// updateOffer is what a BMC's UpdateService offers.
type updateOffer struct {
	// simpleUpdate is the SimpleUpdate action's target ("": none).
	simpleUpdate string
	// protocols is its TransferProtocol@Redfish.AllowableValues, upper
	// case (nil: the BMC does not say, any is tried).
	protocols []string
	// multipartPush is MultipartHttpPushUri ("": none); httpPush is the
	// older unstructured HttpPushUri, which anvil does not use.
	multipartPush, httpPush string
	// maxImage is MaxImageSizeBytes (0: not said).
	maxImage int64
	disabled bool // ServiceEnabled false
}

// parseUpdateService decodes an UpdateService document. Properties of the
// wrong type count as absent.
func parseUpdateService(body []byte) (updateOffer, error) {
	obj, err := decodeObject(body)
	if err != nil {
		return updateOffer{}, fmt.Errorf("update service: %w", err)
	}
	o := updateOffer{multipartPush: redfishPath(str(obj["MultipartHttpPushUri"])), httpPush: redfishPath(str(obj["HttpPushUri"]))}
	if b, ok := obj["ServiceEnabled"].(bool); ok {
		o.disabled = !b
	}
	if n, ok := obj["MaxImageSizeBytes"].(json.Number); ok {
		if v, err := n.Int64(); err == nil && v > 0 {
			o.maxImage = v
		}
	}
	actions, _ := obj["Actions"].(map[string]any)
	action, _ := actions["#UpdateService.SimpleUpdate"].(map[string]any)
	o.simpleUpdate = redfishPath(str(action["target"]))
	if vals, ok := action["TransferProtocol@Redfish.AllowableValues"].([]any); ok {
		o.protocols = []string{}
		for _, v := range vals {
			if p := strings.ToUpper(str(v)); p != "" {
				o.protocols = append(o.protocols, p)
			}
		}
	}
	return o, nil
}

// redfishPath is a URI the BMC gave as a path on itself: an absolute URL
// is cut to its path (requests always go to the BMC's own address); what
// is neither is "".
func redfishPath(u string) string {
	switch {
	case strings.HasPrefix(u, "/"):
		return u
	case strings.Contains(u, "://"):
		if i := strings.Index(u, "/redfish/"); i > 0 {
			return u[i:]
		}
	}
	return ""
}

// urlScheme is a URL's scheme in upper case, as TransferProtocol names it.
func urlScheme(u string) string {
	scheme, _, ok := strings.Cut(u, "://")
	if !ok {
		return ""
	}
	return strings.ToUpper(scheme)
}

// pulls reports whether SimpleUpdate can take imageURL.
func (o updateOffer) pulls(imageURL string) bool {
	return o.simpleUpdate != "" && (o.protocols == nil || slices.Contains(o.protocols, urlScheme(imageURL)))
}

// choose picks how the BMC gets imageURL: SimpleUpdate when it pulls
// such URLs, else the push; neither is ErrUnsupported naming what the BMC
// offers.
func (o updateOffer) choose(imageURL string) (string, error) {
	switch {
	case o.pulls(imageURL):
		return MethodSimpleUpdate, nil
	case o.multipartPush != "":
		return MethodPush, nil
	}
	return "", fmt.Errorf("%w: the BMC's UpdateService offers %s; anvil needs SimpleUpdate taking %s URLs or a MultipartHttpPushUri",
		ErrUnsupported, o.describe(), urlScheme(imageURL))
}

// describe says what the BMC offers, for errors.
func (o updateOffer) describe() string {
	var parts []string
	if o.simpleUpdate != "" {
		p := "SimpleUpdate"
		if o.protocols != nil {
			p += " (TransferProtocol " + strings.Join(o.protocols, ", ") + ")"
		}
		parts = append(parts, p)
	}
	if o.httpPush != "" {
		parts = append(parts, "HttpPushUri "+o.httpPush+" (unstructured push, not used by anvil)")
	}
	if len(parts) == 0 {
		parts = append(parts, "no update method")
	}
	if o.disabled {
		parts = append(parts, "and says ServiceEnabled false")
	}
	return strings.Join(parts, ", ")
}

// startUpdate implements firmwareUpdater: it reads the UpdateService and
// asks the BMC to pull the image or pushes it. ctx bounds each request
// to the BMC; upload bounds the push, which takes as long as the image
// needs.
func (s *redfishSession) startUpdate(ctx, upload context.Context, imageURL, target string) (string, string, error) {
	s.tr.reset()
	c, err := s.gofish(ctx)
	if err != nil {
		return "", "", s.classify(ctx, err)
	}
	o, err := s.offer(c)
	if err != nil {
		return "", "", s.classify(ctx, err)
	}
	method, err := o.choose(imageURL)
	if err != nil {
		return "", "", err
	}
	if method == MethodSimpleUpdate {
		task, err := s.postSimpleUpdate(ctx, c, o.simpleUpdate, imageURL, target)
		if err == nil || o.multipartPush == "" || !actionMissing(err) {
			return task, method, err
		}
		// Listed but not there: some BMCs list SimpleUpdate and refuse
		// it (or URLs) at the HTTP level. Nothing was started.
		s.tr.reset()
	}
	task, err := s.push(upload, o, imageURL, target)
	return task, MethodPush, err
}

// actionMissing: the BMC answered that it has no such action (rather than
// refusing the request's content).
func actionMissing(err error) bool {
	switch httpStatus(err) {
	case http.StatusNotFound, http.StatusMethodNotAllowed, http.StatusNotImplemented:
		return true
	}
	return false
}

// push downloads imageURL and streams it to the BMC's MultipartHttpPushUri.
func (s *redfishSession) push(ctx context.Context, o updateOffer, imageURL, target string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, pushTimeout)
	defer cancel()
	limit := int64(maxPushImage)
	if o.maxImage > 0 && o.maxImage < limit {
		limit = o.maxImage
	}
	img, err := downloadImage(ctx, imageURL, limit)
	if err != nil {
		return "", err
	}
	defer img.close()
	params, err := json.Marshal(pushParameters(target))
	if err != nil {
		return "", err
	}
	body, ctype, length := pushBody(params, img.name, img, img.size)
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.endpoint+o.multipartPush, body)
	if err != nil {
		return "", fmt.Errorf("MultipartHttpPushUri %q: %w", o.multipartPush, err)
	}
	req.ContentLength = length // -1: chunked (some iDRACs want the length)
	req.Header.Set("Content-Type", ctype)
	req.Header.Set("Accept", "application/json")
	req.Header.Set("X-Auth-Token", s.tr.sessionToken())
	resp, err := (&http.Client{Transport: s.tr}).Do(req)
	if n, derr := img.failure(); derr != nil {
		if resp != nil {
			resp.Body.Close()
		}
		return "", fmt.Errorf("downloading the image %s failed after %d bytes, so its upload to the BMC (POST %s) was abandoned unfinished: %w",
			imageURL, n, o.multipartPush, derr)
	}
	if err != nil {
		return "", s.classify(ctx, fmt.Errorf("POST %s: %w", o.multipartPush, err))
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(io.LimitReader(resp.Body, maxDoc))
	if resp.StatusCode >= 300 {
		ce := common.ConstructError(resp.StatusCode, raw)
		return "", s.classify(ctx, &bmclibError{msg: fmt.Sprintf("POST %s: %s", o.multipartPush, redfishMessages(ce)), cause: ce})
	}
	task := taskLocation(resp.Header.Get("Location"), raw)
	if task == "" {
		return "", fmt.Errorf("POST %s: HTTP %d without a task to watch (no Location, no task in the body)", o.multipartPush, resp.StatusCode)
	}
	return task, nil
}

// updateParameters is the push's UpdateParameters part.
type updateParameters struct {
	Targets   []string `json:"Targets"`
	ApplyTime string   `json:"@Redfish.OperationApplyTime"`
}

// pushParameters aims the push at target (an inventory URI; "": none, the
// BMC picks by the image) and applies it at once, as SimpleUpdate does.
func pushParameters(target string) updateParameters {
	p := updateParameters{Targets: []string{}, ApplyTime: "Immediate"}
	if target != "" {
		p.Targets = []string{target}
	}
	return p
}

// pushBody is the multipart/form-data body of a push, UpdateParameters
// then UpdateFile, with image streamed between the parts' small head and
// tail. size is the image's length; the body's is then known too (-1:
// neither is).
func pushBody(params []byte, filename string, image io.Reader, size int64) (io.Reader, string, int64) {
	var buf bytes.Buffer
	w := multipart.NewWriter(&buf)
	h := textproto.MIMEHeader{}
	h.Set("Content-Disposition", `form-data; name="UpdateParameters"`)
	h.Set("Content-Type", "application/json")
	// Writes to a bytes.Buffer do not fail.
	p, _ := w.CreatePart(h)
	_, _ = p.Write(params)
	_, _ = w.CreateFormFile("UpdateFile", filename)
	head := bytes.Clone(buf.Bytes())
	buf.Reset()
	_ = w.Close()
	tail := bytes.Clone(buf.Bytes())
	length := int64(-1)
	if size >= 0 {
		length = int64(len(head)) + size + int64(len(tail))
	}
	return io.MultiReader(bytes.NewReader(head), image, bytes.NewReader(tail)), w.FormDataContentType(), length
}

// pushImage is an image being downloaded, read once as the upload's body.
// The HTTP client may still read it after Do returns (a BMC that answers
// before the upload ends), hence the lock.
type pushImage struct {
	name  string
	body  io.ReadCloser
	size  int64 // Content-Length; -1: not given
	limit int64

	mu  sync.Mutex
	n   int64
	err error // the download's own failure, not the upload's
}

// downloadImage starts downloading imageURL. Failing, it says the BMC
// was asked nothing; an image the BMC cannot take (larger than limit) is
// refused before it is read.
func downloadImage(ctx context.Context, imageURL string, limit int64) (*pushImage, error) {
	fail := func(err error) error {
		return fmt.Errorf("the controller could not download the image %s to push it to the BMC (the BMC was asked nothing): %w", imageURL, err)
	}
	u, err := url.Parse(imageURL)
	if err != nil {
		return nil, fail(err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, imageURL, nil)
	if err != nil {
		return nil, fail(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.ResponseHeaderTimeout, tr.DisableKeepAlives = downloadHeaderTimeout, true
	resp, err := (&http.Client{Transport: tr, CheckRedirect: NoDowngrade}).Do(req)
	if err != nil {
		return nil, fail(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fail(fmt.Errorf("HTTP %s", resp.Status))
	}
	if resp.ContentLength > limit {
		resp.Body.Close()
		return nil, fail(fmt.Errorf("the image is %d bytes, more than the %d bytes the BMC takes", resp.ContentLength, limit))
	}
	name := path.Base(u.Path)
	if name == "." || name == "/" {
		name = "firmware.bin"
	}
	return &pushImage{name: name, body: resp.Body, size: resp.ContentLength, limit: limit}, nil
}

func (p *pushImage) Read(b []byte) (int, error) {
	n, err := p.body.Read(b)
	p.mu.Lock()
	defer p.mu.Unlock()
	p.n += int64(n)
	switch {
	case p.n > p.limit:
		p.err = fmt.Errorf("the image is larger than the %d bytes the BMC takes", p.limit)
		return n, p.err
	case err != nil && !errors.Is(err, io.EOF):
		p.err = err
	}
	return n, err
}

// failure is the download's error and the bytes read so far.
func (p *pushImage) failure() (int64, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.n, p.err
}

func (p *pushImage) close() { _ = p.body.Close() }

// offer reads what the BMC's UpdateService offers.
func (s *redfishSession) offer(c *gofish.APIClient) (updateOffer, error) {
	body, err := updateServiceDoc(c)
	if err != nil {
		return updateOffer{}, err
	}
	if body == nil {
		return updateOffer{}, fmt.Errorf("%w: the BMC has no UpdateService", ErrUnsupported)
	}
	return parseUpdateService(body)
}

// NoDowngrade is an http.Client's CheckRedirect for firmware images: an
// image asked for over https is never fetched from a plain-http place a
// redirect names (it would be checked or flashed without the TLS the
// operator chose).
func NoDowngrade(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if len(via) > 0 && via[0].URL.Scheme == "https" && req.URL.Scheme != "https" {
		return fmt.Errorf("redirect from %s to %s refused: an https image is not fetched over plain http", via[0].URL.Redacted(), req.URL.Redacted())
	}
	return nil
}
