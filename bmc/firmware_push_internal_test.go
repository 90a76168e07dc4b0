package bmc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"mime"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseUpdateServiceAndChoose(t *testing.T) {
	tests := []struct {
		name    string
		doc     string
		url     string
		want    string // method, or "" for ErrUnsupported
		wantErr string
		offer   updateOffer
	}{
		{name: "SimpleUpdate over http, push too: pulled",
			doc: `{"Actions":{"#UpdateService.SimpleUpdate":{"target":"/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate","TransferProtocol@Redfish.AllowableValues":["HTTP","HTTPS"]}},"MultipartHttpPushUri":"/redfish/v1/UpdateService/MultipartUpload","MaxImageSizeBytes":1000}`,
			url: "http://c/fw.bin", want: MethodSimpleUpdate,
			offer: updateOffer{simpleUpdate: "/redfish/v1/UpdateService/Actions/UpdateService.SimpleUpdate", protocols: []string{"HTTP", "HTTPS"},
				multipartPush: "/redfish/v1/UpdateService/MultipartUpload", maxImage: 1000}},
		{name: "push only (Supermicro X12, OpenBMC)", doc: `{"MultipartHttpPushUri":"/redfish/v1/UpdateService/update-multipart","Actions":{}}`,
			url: "https://c/fw.bin", want: MethodPush, offer: updateOffer{multipartPush: "/redfish/v1/UpdateService/update-multipart"}},
		{name: "SimpleUpdate without http: pushed", url: "http://c/fw.bin", want: MethodPush,
			doc:   `{"Actions":{"#UpdateService.SimpleUpdate":{"target":"/a","TransferProtocol@Redfish.AllowableValues":["TFTP","sftp"]}},"MultipartHttpPushUri":"https://bmc:443/redfish/v1/up"}`,
			offer: updateOffer{simpleUpdate: "/a", protocols: []string{"TFTP", "SFTP"}, multipartPush: "/redfish/v1/up"}},
		{name: "SimpleUpdate saying nothing of protocols", doc: `{"Actions":{"#UpdateService.SimpleUpdate":{"target":"/a"}}}`,
			url: "https://c/x", want: MethodSimpleUpdate, offer: updateOffer{simpleUpdate: "/a"}},
		{name: "nothing usable", url: "http://c/x",
			doc:     `{"ServiceEnabled":false,"HttpPushUri":"/redfish/v1/UpdateService/push","Actions":{"#UpdateService.SimpleUpdate":{"target":"/a","TransferProtocol@Redfish.AllowableValues":["TFTP"]}}}`,
			wantErr: "offers SimpleUpdate (TransferProtocol TFTP), HttpPushUri /redfish/v1/UpdateService/push (unstructured push, not used by anvil), and says ServiceEnabled false; anvil needs SimpleUpdate taking HTTP URLs or a MultipartHttpPushUri",
			offer:   updateOffer{simpleUpdate: "/a", protocols: []string{"TFTP"}, httpPush: "/redfish/v1/UpdateService/push", disabled: true}},
		{name: "empty service", doc: `{}`, url: "http://c/x", wantErr: "offers no update method"},
		{name: "wrong types are absent", url: "http://c/x", wantErr: "offers no update method",
			doc: `{"MultipartHttpPushUri":7,"MaxImageSizeBytes":"big","Actions":{"#UpdateService.SimpleUpdate":"x"}}`},
		{name: "a relative push URI is not ours to guess", doc: `{"MultipartHttpPushUri":"upload"}`, url: "http://c/x", wantErr: "offers no update method"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			o, err := parseUpdateService([]byte(tt.doc))
			require.NoError(t, err)
			assert.Equal(t, tt.offer, o)
			m, err := o.choose(tt.url)
			if tt.wantErr != "" {
				require.ErrorIs(t, err, ErrUnsupported)
				assert.Contains(t, err.Error(), tt.wantErr)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tt.want, m)
		})
	}
	_, err := parseUpdateService([]byte(`[1]`))
	assert.ErrorContains(t, err, "update service: not a JSON object")
}

// readPushBody parses a push body as a BMC does.
func readPushBody(t *testing.T, body io.Reader, ctype string) (map[string]string, map[string][]byte) {
	t.Helper()
	mt, p, err := mime.ParseMediaType(ctype)
	require.NoError(t, err)
	require.Equal(t, "multipart/form-data", mt)
	mr := multipart.NewReader(body, p["boundary"])
	types, parts := map[string]string{}, map[string][]byte{}
	var order []string
	for {
		part, err := mr.NextPart()
		if errors.Is(err, io.EOF) {
			break
		}
		require.NoError(t, err)
		b, err := io.ReadAll(part)
		require.NoError(t, err)
		order = append(order, part.FormName())
		types[part.FormName()] = part.Header.Get("Content-Type")
		if part.FileName() != "" {
			types[part.FormName()+".filename"] = part.FileName()
		}
		parts[part.FormName()] = b
	}
	assert.Equal(t, []string{"UpdateParameters", "UpdateFile"}, order)
	return types, parts
}

func TestPushBody(t *testing.T) {
	for _, target := range []string{"/redfish/v1/UpdateService/FirmwareInventory/BMC", ""} {
		params, err := json.Marshal(pushParameters(target))
		require.NoError(t, err)
		img := []byte("ANVIL\r\n--not a boundary\r\n\x00\xff")
		for _, size := range []int64{int64(len(img)), -1} {
			body, ctype, length := pushBody(params, `we"ird.bin`, bytes.NewReader(img), size)
			raw, err := io.ReadAll(body)
			require.NoError(t, err)
			if size >= 0 {
				assert.Equal(t, int64(len(raw)), length, "the announced length is the body's")
			} else {
				assert.Equal(t, int64(-1), length)
			}
			types, parts := readPushBody(t, bytes.NewReader(raw), ctype)
			assert.Equal(t, "application/json", types["UpdateParameters"])
			assert.Equal(t, "application/octet-stream", types["UpdateFile"])
			assert.Equal(t, `we"ird.bin`, types["UpdateFile.filename"])
			assert.Equal(t, img, parts["UpdateFile"])
			var got map[string]any
			require.NoError(t, json.Unmarshal(parts["UpdateParameters"], &got))
			wantTargets := []any{}
			if target != "" {
				wantTargets = []any{target}
			}
			assert.Equal(t, map[string]any{"Targets": wantTargets, "@Redfish.OperationApplyTime": "Immediate"}, got)
		}
	}
}

// zeros is a reader of n zero bytes that holds none of them.
type zeros struct{ n int64 }

func (z *zeros) Read(p []byte) (int, error) {
	if z.n <= 0 {
		return 0, io.EOF
	}
	k := min(int64(len(p)), z.n)
	clear(p[:k])
	z.n -= k
	return int(k), nil
}

// TestPushBodyStreams: a 256 MiB image goes through the body without
// being held: what is allocated on the way is a small fraction of it.
func TestPushBodyStreams(t *testing.T) {
	const size = 256 << 20
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	body, _, length := pushBody([]byte(`{}`), "big.bin", &zeros{n: size}, size)
	n, err := io.Copy(io.Discard, body)
	runtime.ReadMemStats(&after)
	require.NoError(t, err)
	assert.Equal(t, length, n)
	alloc := after.TotalAlloc - before.TotalAlloc
	t.Logf("256 MiB image: %d bytes allocated building and reading the body", alloc)
	assert.Less(t, alloc, uint64(1<<20))
}

func TestDownloadImage(t *testing.T) {
	img := bytes.Repeat([]byte("x"), 1000)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/fw.bin":
			_, _ = w.Write(img)
		case "/chunked.bin":
			w.(http.Flusher).Flush() // no Content-Length
			_, _ = w.Write(img)
		case "/short.bin":
			w.Header().Set("Content-Length", strconv.Itoa(len(img)))
			_, _ = w.Write(img[:400]) // the server closes the connection short
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	ctx := context.Background()
	tests := []struct {
		name, path string
		limit      int64
		openErr    string // refused before anything is read
		readErr    string // fails while streaming
		size       int64
	}{
		{name: "whole", path: "/fw.bin", limit: 1000, size: 1000},
		{name: "chunked", path: "/chunked.bin", limit: 1000, size: -1},
		{name: "missing", path: "/none.bin", limit: 1000, openErr: "HTTP 404 Not Found"},
		{name: "announced larger than the BMC takes", path: "/fw.bin", limit: 999, openErr: "the image is 1000 bytes, more than the 999 bytes the BMC takes"},
		{name: "chunked larger than the BMC takes", path: "/chunked.bin", limit: 999, size: -1, readErr: "larger than the 999 bytes"},
		{name: "broken off", path: "/short.bin", limit: 1000, size: 1000, readErr: "unexpected EOF"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p, err := downloadImage(ctx, srv.URL+tt.path, tt.limit)
			if tt.openErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), "the BMC was asked nothing")
				assert.Contains(t, err.Error(), tt.openErr)
				return
			}
			require.NoError(t, err)
			defer p.close()
			assert.Equal(t, tt.size, p.size)
			_, err = io.Copy(io.Discard, p)
			n, derr := p.failure()
			if tt.readErr != "" {
				require.Error(t, err)
				require.Error(t, derr)
				assert.Contains(t, derr.Error(), tt.readErr)
				return
			}
			require.NoError(t, err)
			require.NoError(t, derr)
			assert.EqualValues(t, 1000, n)
			assert.Equal(t, tt.path[1:], p.name)
		})
	}
	_, err := downloadImage(ctx, "ftp://c/x", 10)
	assert.ErrorContains(t, err, "unsupported protocol scheme")
}
