package vmedia

// Data images: what the vmedia API (Ironic 1.89) attaches with
// image_download_source "local". The controller downloads the image and
// serves its copy to the node's BMC under a per-attach secret, as Ironic
// serves such images from its conductor's web server. One image per node
// and device type; attaching again replaces it, detaching removes it.

import (
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/anvil-metal/anvil/internal/regularfile"
)

// DataConfig configures DataImages.
type DataConfig struct {
	// Dir keeps the downloaded images.
	Dir string
	// PublicURL is how BMCs reach the controller.
	PublicURL func() string
	// PlainHTTP gives BMCs http:// URLs (see Config.PlainHTTP).
	PlainHTTP bool
	// MaxBytes bounds one image (default 8 GiB); Timeout one download
	// (default 30 minutes).
	MaxBytes int64
	Timeout  time.Duration
	// Client fetches images (default: a plain http.Client).
	Client *http.Client
	Logger *slog.Logger
}

// DataImages downloads and serves data images.
type DataImages struct {
	cfg  DataConfig
	mu   sync.Mutex
	keys map[string]string // node/device -> secret
}

// NewDataImages returns DataImages keeping its files in cfg.Dir, which it
// empties: the secrets of a previous run are gone, and with them the URLs
// of its images.
func NewDataImages(cfg DataConfig) (*DataImages, error) {
	if cfg.MaxBytes <= 0 {
		cfg.MaxBytes = 8 << 30
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 30 * time.Minute
	}
	if cfg.Client == nil {
		cfg.Client = &http.Client{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if err := os.RemoveAll(cfg.Dir); err != nil {
		return nil, fmt.Errorf("data images: %w", err)
	}
	if err := os.MkdirAll(cfg.Dir, 0o700); err != nil {
		return nil, fmt.Errorf("data images: %w", err)
	}
	return &DataImages{cfg: cfg, keys: map[string]string{}}, nil
}

func dataKey(nodeUUID, device string) string { return nodeUUID + "/" + device }

func (d *DataImages) path(nodeUUID, device string) string {
	return filepath.Join(d.cfg.Dir, filepath.Base(nodeUUID)+"-"+filepath.Base(device))
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
// size and time) and served at a new secret URL.
func (d *DataImages) Publish(ctx context.Context, nodeUUID, device, src, publicURL string) (string, error) {
	if publicURL == "" && d.cfg.PublicURL != nil {
		publicURL = d.cfg.PublicURL()
	}
	if publicURL == "" {
		return "", errors.New("serving the image needs the URL the BMC reaches the controller at: set --public-url or the node's driver_info external_http_url")
	}
	tmp, err := d.download(ctx, src)
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp)
	key := make([]byte, 24)
	if _, err := rand.Read(key); err != nil {
		return "", err
	}
	secret := hex.EncodeToString(key)
	d.mu.Lock()
	defer d.mu.Unlock()
	if err := os.Rename(tmp, d.path(nodeUUID, device)); err != nil {
		return "", fmt.Errorf("data image: %w", err)
	}
	d.keys[dataKey(nodeUUID, device)] = secret
	base := strings.TrimRight(publicURL, "/")
	if rest, ok := strings.CutPrefix(base, "https://"); ok && d.cfg.PlainHTTP {
		base = "http://" + rest
	}
	d.cfg.Logger.Info("data image published", "node", nodeUUID, "device", device, "source", src)
	return fmt.Sprintf("%s/v1/boot/%s/data/%s/%s", base, nodeUUID, secret, dataFileName(device)), nil
}

func (d *DataImages) download(ctx context.Context, src string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, d.cfg.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, src, nil)
	if err != nil {
		return "", fmt.Errorf("image %s: %w", src, err)
	}
	resp, err := d.cfg.Client.Do(req)
	if err != nil {
		return "", fmt.Errorf("cannot download image %s: %w", src, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("cannot download image %s: HTTP %s", src, resp.Status)
	}
	f, err := os.CreateTemp(d.cfg.Dir, ".tmp-*")
	if err != nil {
		return "", fmt.Errorf("data image: %w", err)
	}
	n, err := io.Copy(f, io.LimitReader(resp.Body, d.cfg.MaxBytes+1))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && n > d.cfg.MaxBytes {
		err = fmt.Errorf("larger than %d bytes", d.cfg.MaxBytes)
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("cannot download image %s: %w", src, err)
	}
	return f.Name(), nil
}

// Remove implements conductor.DataImages.
func (d *DataImages) Remove(nodeUUID, device string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.keys, dataKey(nodeUUID, device))
	if err := os.Remove(d.path(nodeUUID, device)); err != nil && !errors.Is(err, os.ErrNotExist) {
		d.cfg.Logger.Warn("data image: removing", "node", nodeUUID, "device", device, "err", err)
	}
}

// Open returns the node's image named file (cdrom.iso, disk.img,
// floppy.img) for its secret; ErrNotFound for anything else.
func (d *DataImages) Open(nodeUUID, secret, file string) (*os.File, error) {
	device := strings.TrimSuffix(strings.TrimSuffix(file, ".iso"), ".img")
	if dataFileName(device) != file {
		return nil, ErrNotFound
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	want, ok := d.keys[dataKey(nodeUUID, device)]
	if !ok || subtle.ConstantTimeCompare([]byte(want), []byte(secret)) != 1 {
		return nil, ErrNotFound
	}
	f, err := regularfile.Open(d.path(nodeUUID, device))
	if err != nil {
		return nil, ErrNotFound
	}
	return f, nil
}
