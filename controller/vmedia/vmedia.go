// Package vmedia makes the per-node ISOs of nodes that boot the agent
// ramdisk through Redfish virtual media (boot_interface
// redfish-virtual-media): a copy of the common ISO (make image:
// anvil.iso) whose node slot holds the node's protocol.BootConfig. No ISO
// tool runs: the slot is a fixed-size file at an offset the image's
// manifest records, so a per-node ISO is a file copy plus a 64 KiB write.
//
// The URL of a node's ISO carries a per-boot secret that only the
// controller and (through the BMC's authenticated Redfish) the BMC know:
// the ISO holds the boot nonce, and a stranger must not fetch it.
//
// The secrets and ISOs of boots under way are files in the cache
// directory, so a restarted controller (on the same directory: by default
// the data directory's vmedia/) serves the same ISO under the same URL: a
// BMC reads the medium on demand all through the node's boot, and the
// boot nonce in the ISO is minted only once per boot.
package vmedia

import (
	"bytes"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"

	"github.com/anvil-metal/anvil/internal/regularfile"
	"github.com/anvil-metal/anvil/protocol"
)

// ISOName is the common ISO in the boot directory; manifest.json beside
// it locates the node slot.
const ISOName = "anvil.iso"

// ErrNotFound: no ISO for this node and secret (unknown, stale or
// released); the API answers 404 and says no more.
var ErrNotFound = errors.New("no virtual media for this node and key")

// Config configures a Builder.
type Config struct {
	// BootDir holds anvil.iso and manifest.json (make image: out/image).
	BootDir string
	// CacheDir keeps the per-node ISOs, and the secrets of their URLs,
	// while their nodes boot from them; a Builder on the same directory
	// takes them over.
	CacheDir string
	// PublicURL is how BMCs reach the controller (called per boot: the
	// listener's address may be known only after start).
	PublicURL func() string
	Logger    *slog.Logger
	// RemoveDir: Close removes CacheDir (a temporary one) and with it
	// the boots under way; otherwise they outlive the Builder.
	RemoveDir bool
	// PlainHTTP gives BMCs http:// URLs although the controller serves
	// HTTPS: like boot loaders, a BMC cannot be told to trust the
	// controller's (usually self-signed) certificate, and the controller
	// serves /v1/boot/ in plain HTTP on the same port.
	PlainHTTP bool
}

// Builder makes, serves and removes per-node ISOs.
type Builder struct {
	cfg  Config
	iso  string
	slot slot

	mu    sync.Mutex
	boots map[string]string // node UUID -> secret of its current boot
}

type slot struct {
	Path   string `json:"path"`
	Offset int64  `json:"offset"`
	Bytes  int64  `json:"bytes"`
}

// New checks the common ISO: the manifest must locate its node slot, and
// the slot must hold the empty placeholder.
func New(cfg Config) (*Builder, error) {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	b := &Builder{cfg: cfg, iso: filepath.Join(cfg.BootDir, ISOName), boots: map[string]string{}}
	raw, err := readRegular(filepath.Join(cfg.BootDir, "manifest.json"))
	if err != nil {
		return nil, fmt.Errorf("virtual media: %w", err)
	}
	var m struct {
		ISO *struct {
			Path string `json:"path"`
			Slot slot   `json:"node_slot"`
		} `json:"iso"`
	}
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, fmt.Errorf("virtual media: manifest.json: %w", err)
	}
	if m.ISO == nil {
		return nil, fmt.Errorf("virtual media: %s lists no ISO: rebuild the image (make image)", cfg.BootDir)
	}
	b.slot = m.ISO.Slot
	want, err := protocol.BootConfig{Placeholder: true}.Slot()
	if err != nil {
		return nil, err
	}
	if b.slot.Bytes != int64(len(want)) {
		return nil, fmt.Errorf("virtual media: the ISO's node slot is %d bytes, this controller writes %d: rebuild the image", b.slot.Bytes, len(want))
	}
	// Only a regular file: a FIFO in --boot-dir would block the start.
	f, err := regularfile.Open(b.iso)
	if err != nil {
		return nil, fmt.Errorf("virtual media: %w", err)
	}
	defer f.Close()
	got := make([]byte, len(want))
	if _, err := f.ReadAt(got, b.slot.Offset); err != nil || !bytes.Equal(got, want) {
		return nil, fmt.Errorf("virtual media: %s has no empty node slot at byte %d (manifest and ISO from different builds?)", b.iso, b.slot.Offset)
	}
	if err := os.MkdirAll(cfg.CacheDir, 0o700); err != nil {
		return nil, fmt.Errorf("virtual media: %w", err)
	}
	if err := b.resume(); err != nil {
		return nil, err
	}
	return b, nil
}

// keySuffix names the file that holds a boot's secret: <node>.key.
const keySuffix = ".key"

// resume takes over the boots a previous Builder on CacheDir left under
// way (a controller restart).
func (b *Builder) resume() error {
	ents, err := os.ReadDir(b.cfg.CacheDir)
	if err != nil {
		return fmt.Errorf("virtual media: %w", err)
	}
	for _, e := range ents {
		node, ok := strings.CutSuffix(e.Name(), keySuffix)
		if !ok || !e.Type().IsRegular() || strings.HasPrefix(e.Name(), ".") { // .tmp-*: a write a crash cut short
			continue
		}
		raw, err := os.ReadFile(filepath.Join(b.cfg.CacheDir, e.Name()))
		if err != nil {
			return fmt.Errorf("virtual media: %w", err)
		}
		secret := strings.TrimSpace(string(raw))
		if _, err := hex.DecodeString(secret); err != nil || len(secret) != 2*keyBytes {
			b.cfg.Logger.Warn("virtual media: ignoring a malformed key file", "file", e.Name())
			continue
		}
		b.boots[node] = secret
		b.cfg.Logger.Info("virtual media: boot under way taken over", "node", node)
	}
	return nil
}

// Close ends the Builder. With RemoveDir it removes CacheDir, and with it
// every per-node ISO; otherwise boots under way stay on disk for the next
// Builder (the controller's next start).
func (b *Builder) Close() {
	if b.cfg.RemoveDir {
		os.RemoveAll(b.cfg.CacheDir)
	}
}

// keyBytes is the size of a boot's secret.
const keyBytes = 24

// Prepare starts a new virtual-media boot of the node and returns the
// URL its BMC fetches the ISO from. The ISO itself is built when first
// fetched, so the boot nonce in it is minted by that fetch, as the iPXE
// script's is. The previous boot's ISO is removed. publicURL overrides
// Config.PublicURL (a node's driver_info anvil_public_url).
func (b *Builder) Prepare(nodeUUID, publicURL string) (string, error) {
	if publicURL == "" && b.cfg.PublicURL != nil {
		publicURL = b.cfg.PublicURL()
	}
	if publicURL == "" {
		return "", errors.New("virtual media needs the URL the BMC reaches the controller at: set --public-url or the node's driver_info anvil_public_url")
	}
	key := make([]byte, keyBytes)
	if _, err := rand.Read(key); err != nil {
		return "", fmt.Errorf("virtual media: %w", err)
	}
	secret := hex.EncodeToString(key)
	b.mu.Lock()
	defer b.mu.Unlock()
	b.remove(nodeUUID)
	if err := writeFile(b.keyFile(nodeUUID), []byte(secret+"\n")); err != nil {
		// The previous boot ends here too, also for a later restart.
		delete(b.boots, nodeUUID)
		os.Remove(b.keyFile(nodeUUID))
		return "", fmt.Errorf("virtual media: keep the boot's key: %w", err)
	}
	b.boots[nodeUUID] = secret
	base := strings.TrimRight(publicURL, "/")
	if rest, ok := strings.CutPrefix(base, "https://"); ok && b.cfg.PlainHTTP {
		base = "http://" + rest
	}
	return fmt.Sprintf("%s/v1/boot/%s/vmedia/%s.iso", base, nodeUUID, secret), nil
}

// Active reports whether the node has a prepared boot not yet released.
func (b *Builder) Active(nodeUUID string) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	_, ok := b.boots[nodeUUID]
	return ok
}

// Discard removes the node's ISO file; its boot stays active (a later
// fetch with its key builds the ISO again).
func (b *Builder) Discard(nodeUUID string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.remove(nodeUUID)
}

// Release forgets the node's virtual-media boot and removes its ISO.
func (b *Builder) Release(nodeUUID string) {
	b.mu.Lock()
	_, had := b.boots[nodeUUID]
	delete(b.boots, nodeUUID)
	b.remove(nodeUUID)
	if err := os.Remove(b.keyFile(nodeUUID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		b.cfg.Logger.Warn("virtual media: removing a boot's key", "node", nodeUUID, "err", err)
	}
	b.mu.Unlock()
	if had {
		b.cfg.Logger.Info("virtual media: per-node ISO removed", "node", nodeUUID)
	}
}

func (b *Builder) file(nodeUUID string) string {
	return filepath.Join(b.cfg.CacheDir, filepath.Base(nodeUUID)+".iso")
}

func (b *Builder) keyFile(nodeUUID string) string {
	return filepath.Join(b.cfg.CacheDir, filepath.Base(nodeUUID)+keySuffix)
}

// writeFile replaces path with data (0600) at once: a crash leaves the old
// or the new file, never half of one.
func writeFile(path string, data []byte) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*"+keySuffix)
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(data)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	return err
}

func (b *Builder) remove(nodeUUID string) {
	if err := os.Remove(b.file(nodeUUID)); err != nil && !errors.Is(err, os.ErrNotExist) {
		b.cfg.Logger.Warn("virtual media: removing a per-node ISO", "node", nodeUUID, "err", err)
	}
}

// Open returns the node's ISO for the secret of its current boot,
// building it with config() at the first fetch. ErrNotFound for any other
// secret.
func (b *Builder) Open(nodeUUID, secret string, config func() (protocol.BootConfig, error)) (*os.File, error) {
	b.mu.Lock()
	defer b.mu.Unlock() // one build per node at a time; builds take milliseconds
	want, ok := b.boots[nodeUUID]
	if !ok || subtle.ConstantTimeCompare([]byte(want), []byte(secret)) != 1 {
		return nil, ErrNotFound
	}
	path := b.file(nodeUUID)
	if f, err := regularfile.Open(path); err == nil {
		return f, nil
	}
	cfg, err := config()
	if err != nil {
		return nil, err
	}
	if err := b.Build(path, cfg); err != nil {
		return nil, err
	}
	return regularfile.Open(path)
}

// readRegular reads a small file of --boot-dir that must be a regular
// file (a FIFO there would block the controller's start).
func readRegular(path string) ([]byte, error) {
	f, err := regularfile.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return io.ReadAll(io.LimitReader(f, 1<<20))
}

// Build writes the common ISO with cfg in its node slot to path.
func (b *Builder) Build(path string, cfg protocol.BootConfig) error {
	data, err := cfg.Slot()
	if err != nil {
		return fmt.Errorf("virtual media: %w", err)
	}
	src, err := regularfile.Open(b.iso)
	if err != nil {
		return fmt.Errorf("virtual media: %w", err)
	}
	defer src.Close()
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*.iso")
	if err != nil {
		return fmt.Errorf("virtual media: %w", err)
	}
	defer os.Remove(tmp.Name())
	_, err = io.Copy(tmp, src)
	if err == nil {
		_, err = tmp.WriteAt(data, b.slot.Offset)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("virtual media: build %s: %w", path, err)
	}
	return nil
}
