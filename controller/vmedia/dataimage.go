package vmedia

// Data images: what the vmedia API (Ironic 1.89) attaches with
// image_download_source "local". The controller downloads the image and
// serves its copy to the node's BMC under a per-attach secret, as Ironic
// serves such images from its conductor's web server. One image per node
// and device type; attaching again replaces it, detaching, tearing the
// instance down or deleting the node removes it.
//
// The images and the key their URLs are derived from live in the data
// directory and survive a restart, so a BMC's slot pointing at one keeps
// working: the URL's secret is the attach's id with an HMAC of node,
// device and id under that key, not a table in memory. The key is kept
// beside the files rather than with the node in the database because the
// file is what a controller needs to answer: controllers sharing a
// --public-url serve each other's attaches only when they share the
// directory (--data-dir on shared storage), and then they share the key.

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/internal/regularfile"

	"github.com/anvil-metal/anvil/internal/redact"
)

// DataConfig configures DataImages.
type DataConfig struct {
	// Dir keeps the downloaded images and the key of their URLs.
	Dir string
	// PublicURL is how BMCs reach the controller.
	PublicURL func() string
	// PlainHTTP gives BMCs http:// URLs (see Config.PlainHTTP).
	PlainHTTP bool
	// MaxBytes bounds one image (default 8 GiB), MaxTotalBytes all of
	// them together (default DefaultDataMaxTotal); Timeout one download
	// (default 30 minutes).
	MaxBytes      int64
	MaxTotalBytes int64
	Timeout       time.Duration
	// Client fetches images (default: an http.Client that never follows
	// an https URL's redirect to plain http, bmc.NoDowngrade; a client
	// given without a CheckRedirect gets that one too).
	Client *http.Client
	Logger *slog.Logger
}

// DefaultDataMaxTotal bounds the data images of all nodes together: three
// devices of 8 GiB per node, unbounded, would fill the database's disk.
const DefaultDataMaxTotal = 64 << 30

// ErrDataFull refuses an image that would take the data images past
// their total bound.
var ErrDataFull = errors.New("the controller's data images are at their size bound")

const (
	keyFile   = "url-key"
	tmpPrefix = ".tmp-"
)

// DataImages downloads and serves data images.
type DataImages struct {
	cfg DataConfig
	key []byte
	mu  sync.Mutex // file names: publish, remove
}

// NewDataImages returns DataImages keeping its files in cfg.Dir: the
// images of a previous run stay served (Sweep removes those of nodes that
// are gone), the downloads it left unfinished go.
func NewDataImages(cfg DataConfig) (*DataImages, error) {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 8 << 30
	}
	if cfg.MaxTotalBytes <= 0 {
		cfg.MaxTotalBytes = DefaultDataMaxTotal
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Minute
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.Client.CheckRedirect == nil {
		c := *cfg.Client
		c.CheckRedirect = bmc.NoDowngrade
		cfg.Client = &c
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("data images: %w", err)
	}
	key, err := loadKey(filepath.Join(cfg.Dir, keyFile))
	if err != nil {
		return nil, fmt.Errorf("data images: %w", err)
	}
	d := &DataImages{cfg: cfg, key: key}
	stale, _ := filepath.Glob(filepath.Join(cfg.Dir, tmpPrefix+"*"))
	for _, f := range stale {
		_ = os.Remove(f)
	}
	return d, nil
}

// loadKey reads the URL key at path, creating it on first start.
func loadKey(path string) ([]byte, error) {
	b, err := os.ReadFile(path)
	if err == nil && len(b) == 32 {
		return b, nil
	}
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	b = make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if errors.Is(err, fs.ErrExist) { // another controller on the shared directory won
		return loadKey(path)
	}
	if err != nil {
		return nil, err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return nil, err
	}
	return b, f.Close()
}

// prefix starts the names of the node's image files of device.
func prefix(nodeUUID, device string) string {
	return filepath.Base(nodeUUID) + "-" + filepath.Base(device) + "-"
}

func (d *DataImages) path(nodeUUID, device, attach string) string {
	return filepath.Join(d.cfg.Dir, prefix(nodeUUID, device)+attach)
}

// mac is the URL's proof for an attach: the URL's secret is the attach's
// id (16 hex digits) and this (32), the 48 the route takes.
func (d *DataImages) mac(nodeUUID, device, attach string) string {
	h := hmac.New(sha256.New, d.key)
	h.Write([]byte(nodeUUID + "\x00" + device + "\x00" + attach))
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// dataFileName is the name the BMC sees: .iso for a CD, as Ironic names
// them.
func dataFileName(device string) string {
	if device == "cdrom" {
		return "cdrom.iso"
	}
	return device + ".img"
}

// Publish implements conductor.DataImages: src is downloaded (bounded in
// size, time and the total of the images) and served at a new secret URL.
func (d *DataImages) Publish(ctx context.Context, nodeUUID, device, src, publicURL string) (string, error) {
	if publicURL == "" && d.cfg.PublicURL != nil {
		publicURL = d.cfg.PublicURL()
	}
	if publicURL == "" {
		return "", errors.New("serving the image needs the URL the BMC reaches the controller at: set --public-url or the node's driver_info external_http_url")
	}
	tmp, err := d.download(ctx, nodeUUID, device, src)
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp)
	id := make([]byte, 8)
	if _, err := rand.Read(id); err != nil {
		return "", err
	}
	attach := hex.EncodeToString(id)
	d.mu.Lock()
	defer d.mu.Unlock()
	st, err := os.Stat(tmp)
	if err != nil {
		return "", fmt.Errorf("data image: %w", err)
	}
	if err := d.fits(nodeUUID, device, tmp, st.Size()); err != nil {
		return "", err
	}
	old := d.files(nodeUUID, device)
	if err := os.Rename(tmp, d.path(nodeUUID, device, attach)); err != nil {
		return "", fmt.Errorf("data image: %w", err)
	}
	for _, f := range old {
		_ = os.Remove(f)
	}
	base := strings.TrimRight(publicURL, "/")
	if rest, ok := strings.CutPrefix(base, "https://"); ok && d.cfg.PlainHTTP {
		base = "http://" + rest
	}
	d.cfg.Logger.Info("data image published", "node", nodeUUID, "device", device, "source", redact.URL(src), "bytes", st.Size())
	return fmt.Sprintf("%s/v1/boot/%s/data/%s%s/%s", base, nodeUUID, attach, d.mac(nodeUUID, device, attach), dataFileName(device)), nil
}

// fits checks that size more bytes keep the images within MaxTotalBytes,
// counting every file of the directory (downloads under way too) but the
// image it replaces and tmp itself. Under d.mu.
func (d *DataImages) fits(nodeUUID, device, tmp string, size int64) error {
	used, err := d.used(append(d.files(nodeUUID, device), tmp)...)
	if err != nil {
		return fmt.Errorf("data image: %w", err)
	}
	if used+size > d.cfg.MaxTotalBytes {
		return fmt.Errorf("%w: %d bytes held, this image has %d, the bound is %d (--vmedia-data-max-bytes); detach images no longer needed",
			ErrDataFull, used, size, d.cfg.MaxTotalBytes)
	}
	return nil
}

// used is the bytes of the directory's files but those named.
func (d *DataImages) used(except ...string) (int64, error) {
	ents, err := os.ReadDir(d.cfg.Dir)
	if err != nil {
		return 0, err
	}
	var n int64
	for _, e := range ents {
		p := filepath.Join(d.cfg.Dir, e.Name())
		if e.Name() == keyFile || slices.Contains(except, p) {
			continue
		}
		if fi, err := e.Info(); err == nil && fi.Mode().IsRegular() {
			n += fi.Size()
		}
	}
	return n, nil
}

// files are the node's image files of device (one, unless a crash came
// between a publish's rename and its removal of the old one).
func (d *DataImages) files(nodeUUID, device string) []string {
	m, _ := filepath.Glob(filepath.Join(d.cfg.Dir, globEscape(prefix(nodeUUID, device))+"*"))
	return m
}

func globEscape(s string) string {
	r := strings.NewReplacer(`\`, `\\`, "*", `\*`, "?", `\?`, "[", `\[`)
	return r.Replace(s)
}

func (d *DataImages) download(ctx context.Context, nodeUUID, device, src string) (string, error) {
	shown := redact.URL(src)
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return "", fmt.Errorf("image %s: not a URL that can be fetched", shown)
	}
	d.mu.Lock()
	used, err := d.used(d.files(nodeUUID, device)...)
	d.mu.Unlock()
	if err != nil {
		return "", fmt.Errorf("data image: %w", err)
	}
	limit := min(d.cfg.MaxBytes, d.cfg.MaxTotalBytes-used)
	if limit <= 0 {
		return "", fmt.Errorf("cannot download image %s: %w: %d bytes held, the bound is %d (--vmedia-data-max-bytes); detach images no longer needed",
			shown, ErrDataFull, used, d.cfg.MaxTotalBytes)
	}
	resp, err := d.cfg.Client.Do(req)
	if err != nil {
		redact.Errors(err)
		return "", fmt.Errorf("cannot download image %s: %w", shown, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("cannot download image %s: HTTP %s", shown, resp.Status)
	}
	if resp.ContentLength > limit {
		return "", fmt.Errorf("cannot download image %s: %w", shown, d.tooLarge(resp.ContentLength, limit))
	}
	f, err := os.CreateTemp(d.cfg.Dir, tmpPrefix+"*")
	if err != nil {
		return "", fmt.Errorf("data image: %w", err)
	}
	n, err := io.Copy(f, io.LimitReader(resp.Body, limit+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > limit {
		err = d.tooLarge(n, limit)
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("cannot download image %s: %w", shown, err)
	}
	return f.Name(), nil
}

// tooLarge says why n bytes (at least) exceed limit.
func (d *DataImages) tooLarge(n, limit int64) error {
	if limit < d.cfg.MaxBytes {
		return fmt.Errorf("%w: %d bytes or more, %d left under the bound of %d (--vmedia-data-max-bytes)", ErrDataFull, n, limit, d.cfg.MaxTotalBytes)
	}
	return fmt.Errorf("larger than %d bytes", d.cfg.MaxBytes)
}

// Remove implements conductor.DataImages.
func (d *DataImages) Remove(nodeUUID, device string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, f := range d.files(nodeUUID, device) {
		if err := os.Remove(f); err != nil && !errors.Is(err, fs.ErrNotExist) {
			d.cfg.Logger.Warn("data image: removing", "node", nodeUUID, "device", device, "err", err)
		}
	}
}

// RemoveNode removes every image of the node (it was deleted).
func (d *DataImages) RemoveNode(nodeUUID string) {
	for _, dev := range []string{"cdrom", "disk", "floppy"} {
		d.Remove(nodeUUID, dev)
	}
}

// Sweep removes the images of nodes exists says are gone (deleted while
// this controller was down, or by a controller that does not share the
// directory); an error of exists keeps the image.
func (d *DataImages) Sweep(ctx context.Context, exists func(ctx context.Context, nodeUUID string) (bool, error)) {
	ents, err := os.ReadDir(d.cfg.Dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		name := e.Name()
		if name == keyFile || strings.HasPrefix(name, tmpPrefix) || len(name) < 36 {
			continue
		}
		node := name[:36]
		ok, err := exists(ctx, node)
		if err != nil || ok {
			continue
		}
		d.mu.Lock()
		_ = os.Remove(filepath.Join(d.cfg.Dir, name))
		d.mu.Unlock()
		d.cfg.Logger.Info("data image of a deleted node removed", "node", node, "file", name)
	}
}

// Open returns the node's image named file (cdrom.iso, disk.img,
// floppy.img) for its secret; ErrNotFound for anything else.
func (d *DataImages) Open(nodeUUID, secret, file string) (*os.File, error) {
	device := strings.TrimSuffix(strings.TrimSuffix(file, ".iso"), ".img")
	if dataFileName(device) != file {
		return nil, ErrNotFound
	}
	if len(secret) != 48 || strings.ContainsAny(secret, `/\.`) {
		return nil, ErrNotFound
	}
	attach, mac := secret[:16], secret[16:]
	if !hmac.Equal([]byte(mac), []byte(d.mac(nodeUUID, device, attach))) {
		return nil, ErrNotFound
	}
	f, err := regularfile.Open(d.path(nodeUUID, device, attach))
	if err != nil {
		return nil, ErrNotFound
	}
	return f, nil
}
