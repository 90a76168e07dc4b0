package vmedia

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/internal/redact"
)

const (
	nodeA = "11111111-1111-4111-8111-111111111111"
	nodeB = "22222222-2222-4222-8222-222222222222"
)

// imageServer serves body at any path.
func imageServer(t *testing.T, body string) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.WriteString(w, body)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func newData(t *testing.T, dir string, cfg DataConfig) *DataImages {
	cfg.Dir = dir
	cfg.PublicURL = func() string { return "http://192.0.2.1:6385" }
	d, err := NewDataImages(cfg)
	require.NoError(t, err)
	return d
}

// secretOf is the key and file a published URL names.
func secretOf(t *testing.T, u string) (string, string) {
	parts := strings.Split(u, "/")
	require.GreaterOrEqual(t, len(parts), 3, u)
	return parts[len(parts)-2], parts[len(parts)-1]
}

func read(t *testing.T, d *DataImages, node, u string) (string, error) {
	key, file := secretOf(t, u)
	f, err := d.Open(node, key, file)
	if err != nil {
		return "", err
	}
	defer f.Close()
	b, err := io.ReadAll(f)
	require.NoError(t, err)
	return string(b), nil
}

// TestDataImageSurvivesRestart: an attach's URL works after a restart
// (the images and the key stay in the directory), an unfinished download
// goes, attaching again replaces the image and its URL.
func TestDataImageSurvivesRestart(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := newData(t, dir, DataConfig{})
	u, err := d.Publish(ctx, nodeA, "cdrom", imageServer(t, "iso one").URL+"/a.iso", "")
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(u, "http://192.0.2.1:6385/v1/boot/"+nodeA+"/data/"), u)
	key, file := secretOf(t, u)
	assert.Len(t, key, 48, "the route takes 48 hex digits")
	assert.Equal(t, "cdrom.iso", file)
	require.NoError(t, os.WriteFile(filepath.Join(dir, tmpPrefix+"interrupted"), []byte("x"), 0o600))

	again := newData(t, dir, DataConfig{})
	got, err := read(t, again, nodeA, u)
	require.NoError(t, err)
	assert.Equal(t, "iso one", got)
	assert.NoFileExists(t, filepath.Join(dir, tmpPrefix+"interrupted"))

	u2, err := again.Publish(ctx, nodeA, "cdrom", imageServer(t, "iso two").URL, "http://198.51.100.7:8080/")
	require.NoError(t, err)
	assert.True(t, strings.HasPrefix(u2, "http://198.51.100.7:8080/v1/boot/"), u2)
	_, err = read(t, again, nodeA, u)
	assert.ErrorIs(t, err, ErrNotFound, "the first attach's URL is gone with its image")
	got, err = read(t, again, nodeA, u2)
	require.NoError(t, err)
	assert.Equal(t, "iso two", got)
	assert.Len(t, again.files(nodeA, "cdrom"), 1)
}

// TestDataImageOpenRefuses: a URL serves its node's image of its device
// only, with its own secret.
func TestDataImageOpenRefuses(t *testing.T) {
	d := newData(t, t.TempDir(), DataConfig{})
	u, err := d.Publish(context.Background(), nodeA, "disk", imageServer(t, "disk").URL, "")
	require.NoError(t, err)
	key, file := secretOf(t, u)
	require.Equal(t, "disk.img", file)
	flipped := key[:47] + "0"
	if key[47] == '0' {
		flipped = key[:47] + "1"
	}
	for name, c := range map[string]struct{ node, key, file string }{
		"another node":    {nodeB, key, file},
		"another device":  {nodeA, key, "cdrom.iso"},
		"a wrong secret":  {nodeA, flipped, file},
		"a short secret":  {nodeA, key[:40], file},
		"a path":          {nodeA, "../" + key[3:], file},
		"an unknown file": {nodeA, key, "disk.iso"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := d.Open(c.node, c.key, c.file)
			assert.ErrorIs(t, err, ErrNotFound)
		})
	}
}

// TestDataImageRemoveAndSweep: a deleted node's images go (RemoveNode),
// and at start those of nodes deleted meanwhile (Sweep); a node the store
// cannot answer for keeps its images.
func TestDataImageRemoveAndSweep(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	d := newData(t, dir, DataConfig{})
	src := imageServer(t, "img").URL
	ua, err := d.Publish(ctx, nodeA, "cdrom", src, "")
	require.NoError(t, err)
	_, err = d.Publish(ctx, nodeA, "floppy", src, "")
	require.NoError(t, err)
	ub, err := d.Publish(ctx, nodeB, "cdrom", src, "")
	require.NoError(t, err)

	d.RemoveNode(nodeA)
	_, err = read(t, d, nodeA, ua)
	assert.ErrorIs(t, err, ErrNotFound)
	assert.Empty(t, d.files(nodeA, "floppy"))

	d.Sweep(ctx, func(context.Context, string) (bool, error) { return false, assert.AnError })
	_, err = read(t, d, nodeB, ub)
	require.NoError(t, err, "the store did not answer: kept")
	d.Sweep(ctx, func(_ context.Context, uuid string) (bool, error) { return uuid != nodeB, nil })
	_, err = read(t, d, nodeB, ub)
	assert.ErrorIs(t, err, ErrNotFound)
	assert.FileExists(t, filepath.Join(dir, keyFile), "the key stays")
}

// TestDataImageTotalBound: the images of all nodes keep within
// MaxTotalBytes, whether the server announces the size or not; a
// replacement counts without the image it replaces.
func TestDataImageTotalBound(t *testing.T) {
	ctx := context.Background()
	d := newData(t, t.TempDir(), DataConfig{MaxTotalBytes: 100})
	sixty := imageServer(t, strings.Repeat("a", 60))
	_, err := d.Publish(ctx, nodeA, "cdrom", sixty.URL, "")
	require.NoError(t, err)

	_, err = d.Publish(ctx, nodeB, "cdrom", sixty.URL, "")
	require.ErrorIs(t, err, ErrDataFull, "announced")
	assert.Contains(t, err.Error(), "--vmedia-data-max-bytes")
	chunked := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		for range 6 {
			_, _ = io.WriteString(w, strings.Repeat("b", 10))
			w.(http.Flusher).Flush()
		}
	}))
	defer chunked.Close()
	_, err = d.Publish(ctx, nodeB, "cdrom", chunked.URL, "")
	require.ErrorIs(t, err, ErrDataFull, "counted while downloading")
	assert.Empty(t, d.files(nodeB, "cdrom"))

	_, err = d.Publish(ctx, nodeA, "cdrom", imageServer(t, strings.Repeat("c", 90)).URL, "")
	require.NoError(t, err, "90 bytes replacing 60 fit in 100")
	used, err := d.used()
	require.NoError(t, err)
	assert.Equal(t, int64(90), used)

	one := newData(t, t.TempDir(), DataConfig{MaxBytes: 10})
	_, err = one.Publish(ctx, nodeA, "cdrom", sixty.URL, "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "larger than 10 bytes")
}

func TestRedactURL(t *testing.T) {
	for in, want := range map[string]string{
		"https://user:pa55@images.example/a.iso":                             "https://images.example/a.iso",
		"https://s3.example/b/a.iso?X-Amz-Signature=abc&X-Amz-Credential=AK": "https://s3.example/b/a.iso",
		"http://images.example/a.iso#frag":                                   "http://images.example/a.iso",
		"http://images.example/a.iso":                                        "http://images.example/a.iso",
		"http://[::1/x?token=t":                                              "(unparseable URL)",
	} {
		assert.Equal(t, want, redact.URL(in), in)
	}
}

// TestDataImageRedacts: neither the log nor a download's error shows an
// image URL's user:password or query.
func TestDataImageRedacts(t *testing.T) {
	ctx := context.Background()
	var logs bytes.Buffer
	d := newData(t, t.TempDir(), DataConfig{Logger: slog.New(slog.NewTextHandler(&logs, nil))})
	ok := imageServer(t, "iso")
	secretURL := func(base string) string {
		return strings.Replace(base, "http://", "http://admin:pa55word@", 1) + "/a.iso?X-Amz-Signature=s1gnature"
	}
	_, err := d.Publish(ctx, nodeA, "cdrom", secretURL(ok.URL), "")
	require.NoError(t, err)
	assert.Contains(t, logs.String(), "data image published")

	missing := httptest.NewServer(http.NotFoundHandler())
	defer missing.Close()
	_, err = d.Publish(ctx, nodeA, "cdrom", secretURL(missing.URL), "")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "404")
	errs := []string{err.Error()}

	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // connection refused: the client's own error names the URL
	_, err = d.Publish(ctx, nodeA, "cdrom", secretURL(gone.URL), "")
	require.Error(t, err)
	errs = append(errs, err.Error())

	for _, s := range append(errs, logs.String()) {
		assert.NotContains(t, s, "pa55word")
		assert.NotContains(t, s, "s1gnature")
	}
}

// TestDataImageNoDowngrade: an https image is never fetched from plain
// http, even when its server redirects there.
func TestDataImageNoDowngrade(t *testing.T) {
	var plainHits atomic.Int32
	plain := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		plainHits.Add(1)
		_, _ = io.WriteString(w, "iso")
	}))
	defer plain.Close()
	secure := httptest.NewTLSServer(http.RedirectHandler(plain.URL+"/a.iso", http.StatusFound))
	defer secure.Close()
	d := newData(t, t.TempDir(), DataConfig{Client: secure.Client()})
	_, err := d.Publish(context.Background(), nodeA, "cdrom", secure.URL+"/a.iso", "")
	require.Error(t, err)
	assert.Zero(t, plainHits.Load(), "the plain-http URL was not fetched")
	assert.Empty(t, d.files(nodeA, "cdrom"))
}
