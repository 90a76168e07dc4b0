package agent

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/anvil-metal/anvil/protocol"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestParseCmdline(t *testing.T) {
	tests := []struct {
		file string
		want BootConfig
	}{
		{"ipxe-full.txt", BootConfig{API: "http://10.0.0.1:6385", anvilAPI: true, Token: "Zk3u9Qm2xv",
			Node: "fe5d8075-6b0d-4b5e-9d1c-4b7c1b2d9e01", Interfaces: []string{"eno1", "eno2"}}},
		{"minimal-debug.txt", BootConfig{API: "https://controller.example.net:6385/", anvilAPI: true, Debug: true}},
		{"ipa-compat.txt", BootConfig{API: "http://192.168.122.1:6385", BootIF: "52:54:00:12:34:56", IPA: IPAArgs{APIURL: "http://192.168.122.1:6385", Insecure: true}}},
		{"devices-quoted.txt", BootConfig{API: "http://10.0.0.1:6385", anvilAPI: true, Devices: []string{"/dev/loop3", "/dev/loop4"}, DevicesSet: true,
			Interfaces: []string{"eth0", "eth1"}}},
		{"none.txt", BootConfig{}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join("..", "testdata", "cmdline", tt.file))
			require.NoError(t, err)
			assert.Equal(t, tt.want, ParseCmdline(string(raw)))
		})
	}
}

func TestIPAMode(t *testing.T) {
	assert.True(t, ParseCmdline("ipa-api-url=http://i:6385").IPAMode())
	assert.False(t, ParseCmdline("ipa-api-url=http://i:6385 anvil.api=http://i:6385").IPAMode(), "anvil's own arguments keep anvil's protocol")
	assert.False(t, ParseCmdline("anvil.api=http://a:6385").IPAMode())
	assert.False(t, ParseCmdline("ipa-advertise-host=10.0.0.1").IPAMode())
}

func TestParseCmdlineEdgeCases(t *testing.T) {
	tests := []struct {
		name string
		line string
		want BootConfig
	}{
		{"empty", "", BootConfig{}},
		{"anvil wins over ipa", "ipa-api-url=http://a:1 anvil.api=http://b:2 ipa-api-url=http://c:3", BootConfig{API: "http://b:2", anvilAPI: true, IPA: IPAArgs{APIURL: "http://c:3"}}},
		{"ipa arguments", "ipa-api-url=http://i:6385 ipa-advertise-host=10.0.2.15 ipa-advertise-port=19999 ipa-listen-host=:: ipa-listen-port=9998 ipa-global-request-id=req-1 ipa-lookup-timeout=60 ipa-debug=1 ipa-insecure=0",
			BootConfig{API: "http://i:6385", IPA: IPAArgs{APIURL: "http://i:6385", AdvertiseHost: "10.0.2.15", AdvertisePort: "19999", ListenHost: "::", ListenPort: "9998", GlobalRequestID: "req-1", LookupTimeout: "60", Debug: true}}},
		{"debug off", "anvil.debug=off", BootConfig{}},
		{"debug on", "anvil.debug=1", BootConfig{Debug: true}},
		{"empty devices: a list that allows nothing", "anvil.devices=", BootConfig{DevicesSet: true}},
		{"bare devices: the same", "anvil.devices", BootConfig{DevicesSet: true}},
		{"quoted value with spaces", `anvil.node="abc def" x`, BootConfig{Node: "abc def"}},
		{"discovery marker", "anvil.api=http://x:1 anvil.discovery console=tty0", BootConfig{API: "http://x:1", anvilAPI: true, Discovery: true}},
		{"discovery off", "anvil.discovery=0", BootConfig{}},
		{"lldp wait", "anvil.lldp_wait=5", BootConfig{LLDPWait: 5 * time.Second, LLDPWaitSet: true}},
		{"lldp off", "anvil.lldp_wait=0", BootConfig{LLDPWaitSet: true}},
		{"lldp wait not a number", "anvil.lldp_wait=soon", BootConfig{Problems: []string{"anvil.lldp_wait=soon: not a number of seconds from 0 to 600"}}},
		{"tabs and newline", "anvil.api=http://x:1\tanvil.node=n\n", BootConfig{API: "http://x:1", anvilAPI: true, Node: "n"}},
		{"after -- belongs to init", "quiet -- anvil.api=http://x:1", BootConfig{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			assert.Equal(t, tt.want, ParseCmdline(tt.line))
		})
	}
}

func TestClientErrors(t *testing.T) {
	tests := []struct {
		name    string
		status  int
		body    string
		is      error
		message string
	}{
		{"not found", 404, `{"error_message": "{\"faultcode\": \"Client\", \"faultstring\": \"Resource could not be found.\", \"debuginfo\": null}"}`, ErrNotFound, "Resource could not be found."},
		{"unauthorized", 401, `{"error_message": "{\"faultcode\": \"Client\", \"faultstring\": \"Invalid or missing agent token received.\", \"debuginfo\": null}"}`, ErrUnauthorized, "Invalid or missing agent token received."},
		{"forbidden", 403, `{}`, ErrUnauthorized, "{}"},
		{"conflict", 409, `{"error_message": {"faultstring": "Node is locked"}}`, ErrConflict, "Node is locked"},
		{"bad request", 400, `{"error_message": "not json inside"}`, ErrBadRequest, "not json inside"},
		{"server error, plain body", 500, "boom", nil, "boom"},
		{"empty body", 503, "", nil, "(empty body)"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(tt.status)
				fmt.Fprint(w, tt.body)
			}))
			defer srv.Close()
			c, err := NewClient(ClientConfig{API: srv.URL})
			require.NoError(t, err)
			for _, call := range []func() error{
				func() error { _, err := c.Lookup(context.Background(), []string{"52:54:00:12:34:56"}, "b"); return err },
				func() error {
					_, err := c.Heartbeat(context.Background(), "n", &protocol.Heartbeat{AgentToken: "t", AgentVersion: "v", BootID: "b"})
					return err
				},
			} {
				err := call()
				var he *HTTPError
				require.ErrorAs(t, err, &he)
				assert.Equal(t, tt.status, he.StatusCode)
				assert.Equal(t, tt.message, he.Message)
				if tt.is != nil {
					assert.ErrorIs(t, err, tt.is)
				}
				for _, other := range []error{ErrNotFound, ErrUnauthorized, ErrConflict, ErrBadRequest} {
					if other != tt.is {
						assert.NotErrorIs(t, err, other)
					}
				}
			}
		})
	}
}

func TestClientRequests(t *testing.T) {
	var got *http.Request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r.Clone(context.Background())
		switch r.URL.Path {
		case protocol.LookupPath:
			raw, _ := os.ReadFile("../testdata/protocol/lookup-response.json")
			w.Write(raw)
		case protocol.HeartbeatPath + "node-1":
			w.WriteHeader(http.StatusAccepted) // Ironic's answer: no body
		}
	}))
	defer srv.Close()
	c, err := NewClient(ClientConfig{API: srv.URL + "/", Version: "1.2.3", NodeUUID: "uuid-hint"})
	require.NoError(t, err)
	lr, err := c.Lookup(context.Background(), []string{"52:54:00:12:34:56", "52:54:00:12:34:57"}, "boot-1")
	require.NoError(t, err)
	assert.Equal(t, "fe5d8075-6b0d-4b5e-9d1c-4b7c1b2d9e01", lr.Node.UUID)
	require.NotNil(t, lr.Config.Erase)
	assert.Equal(t, protocol.LookupPath, got.URL.Path, "no double slash from the trailing / of the API URL")
	q := got.URL.Query()
	assert.Equal(t, "52:54:00:12:34:56,52:54:00:12:34:57", q.Get("addresses"))
	assert.Equal(t, "boot-1", q.Get("boot_id"))
	assert.Equal(t, "uuid-hint", q.Get("node_uuid"))
	assert.Equal(t, []string{"addresses", "boot_id", "node_uuid"}, sortedKeys(q), "the controller refuses unknown query parameters")
	assert.Equal(t, "1.82", got.Header.Get("X-OpenStack-Ironic-API-Version"))
	assert.Equal(t, "anvil-agent/1.2.3 (anvil/1)", got.Header.Get("User-Agent"))

	resp, err := c.Heartbeat(context.Background(), "node-1", &protocol.Heartbeat{AgentToken: "t", AgentVersion: "v", BootID: "b"})
	require.NoError(t, err)
	assert.Zero(t, resp.HeartbeatInterval, "202: keep the current interval")
	assert.Nil(t, resp.Command)
	assert.Equal(t, "application/json", got.Header.Get("Content-Type"))
}

func TestClientRejectsBadReplies(t *testing.T) {
	tests := []struct{ name, path, body string }{
		{"lookup without token", protocol.LookupPath, `{"node":{"uuid":"u"},"config":{"heartbeat_timeout":300,"agent_token":"******"}}`},
		{"heartbeat without interval", protocol.HeartbeatPath + "n", `{"ack":"x"}`},
		{"heartbeat with trailing data", protocol.HeartbeatPath + "n", `{"heartbeat_interval":1} {}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { fmt.Fprint(w, tt.body) }))
			defer srv.Close()
			c, err := NewClient(ClientConfig{API: srv.URL})
			require.NoError(t, err)
			if tt.path == protocol.LookupPath {
				_, err = c.Lookup(context.Background(), []string{"m"}, "b")
			} else {
				_, err = c.Heartbeat(context.Background(), "n", &protocol.Heartbeat{})
			}
			require.Error(t, err)
			var he *HTTPError
			assert.False(t, errors.As(err, &he), "a malformed 200 is not an HTTP error")
		})
	}
}

// TestClientToleratesNewReplyFields: a ramdisk outlives controller
// upgrades, so a field a newer controller adds to its heartbeat reply is
// ignored, not fatal.
func TestClientToleratesNewReplyFields(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"heartbeat_interval":7,"surprise":{"added":"later"}}`)
	}))
	defer srv.Close()
	c, err := NewClient(ClientConfig{API: srv.URL})
	require.NoError(t, err)
	resp, err := c.Heartbeat(context.Background(), "n", &protocol.Heartbeat{})
	require.NoError(t, err)
	assert.InDelta(t, 7, resp.HeartbeatInterval, 0)
}

func TestNewClientValidatesURL(t *testing.T) {
	for _, bad := range []string{"", "10.0.0.1:6385", "ftp://x", "http://"} {
		_, err := NewClient(ClientConfig{API: bad})
		assert.Error(t, err, bad)
	}
}

func TestBackoffIsBoundedAndJittered(t *testing.T) {
	r := newRetrier(Backoff{Initial: 100 * time.Millisecond, Max: time.Second})
	for i := 0; i < 20; i++ {
		d := r.next()
		ceil := min(100*time.Millisecond<<i, time.Second)
		assert.GreaterOrEqual(t, d, ceil/2, "attempt %d", i)
		assert.LessOrEqual(t, d, ceil, "attempt %d", i)
	}
	r.reset()
	assert.LessOrEqual(t, r.next(), 100*time.Millisecond)
	def := newRetrier(Backoff{})
	for i := 0; i < 30; i++ {
		def.next()
	}
	assert.LessOrEqual(t, def.next(), 30*time.Second, "default cap")
	for i := 0; i < 100; i++ {
		j := jitter(10 * time.Second)
		assert.GreaterOrEqual(t, j, 9*time.Second)
		assert.LessOrEqual(t, j, 11*time.Second)
	}
}

func TestBootIDAndUptime(t *testing.T) {
	a, b := NewBootID(), NewBootID()
	assert.NotEqual(t, a, b)
	assert.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-4[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, a)

	dir := t.TempDir()
	p := filepath.Join(dir, "uptime")
	require.NoError(t, os.WriteFile(p, []byte("2689.02 4238.07\n"), 0o644))
	d, err := ReadUptime(p)
	require.NoError(t, err)
	assert.Equal(t, 2689020*time.Millisecond, d)
	for _, bad := range []string{"", "x 1", "-3 1"} {
		require.NoError(t, os.WriteFile(p, []byte(bad), 0o644))
		_, err := ReadUptime(p)
		assert.Error(t, err, bad)
	}
	_, err = ReadUptime(filepath.Join(dir, "missing"))
	assert.Error(t, err)
}

func TestBootTimerMarksOnce(t *testing.T) {
	start := time.Unix(1000, 0)
	bt := newBootTimer(start, 2*time.Second)
	bt.mark(start.Add(500*time.Millisecond), "network")
	bt.mark(start.Add(time.Second), "lookup")
	bt.mark(start.Add(time.Hour), "lookup") // a re-lookup later does not move it
	assert.Equal(t, []protocol.BootPhase{{Phase: "kernel", Seconds: 2}, {Phase: "network", Seconds: 2.5}, {Phase: "lookup", Seconds: 3}}, bt.phases())
}

type fakeLinks []Link

func (f fakeLinks) Links(context.Context) ([]Link, error) { return f, nil }

type fakeDHCP struct {
	leases []string
	err    error
	asked  [][]string
}

func (f *fakeDHCP) Configure(_ context.Context, names []string) ([]string, error) {
	f.asked = append(f.asked, names)
	return f.leases, f.err
}

func TestInterfacesUp(t *testing.T) {
	lo := Link{Name: "lo", MAC: "00:00:00:00:00:00", Loopback: true, HasIPv4: true}
	eno1 := Link{Name: "eno1", MAC: "3c:ec:ef:12:34:56", Physical: true, Carrier: true}
	eno2 := Link{Name: "eno2", MAC: "3c:ec:ef:12:34:57", Physical: true}
	docker := Link{Name: "docker0", MAC: "02:42:ac:11:00:01", HasIPv4: true}
	withIP := func(l Link) Link { l.HasIPv4 = true; return l }
	tests := []struct {
		name      string
		links     []Link
		hints     []string
		dhcp      *fakeDHCP
		wantMACs  []string
		wantAsked [][]string
		wantErr   bool
	}{
		{"outside the ramdisk: MACs only, physical first", []Link{lo, docker, eno2, eno1}, nil, nil,
			[]string{"3c:ec:ef:12:34:56", "3c:ec:ef:12:34:57"}, nil, false},
		{"no physical link: every non-loopback one", []Link{lo, docker}, nil, nil, []string{"02:42:ac:11:00:01"}, nil, false},
		{"hints restrict", []Link{eno1, eno2}, []string{"eno2"}, nil, []string{"3c:ec:ef:12:34:57"}, nil, false},
		{"hint matches nothing", []Link{eno1}, []string{"eth9"}, nil, nil, nil, true},
		{"DHCP on links without an address", []Link{lo, eno1, eno2}, nil, &fakeDHCP{leases: []string{"eno1"}},
			[]string{"3c:ec:ef:12:34:56", "3c:ec:ef:12:34:57"}, [][]string{{"eno1", "eno2"}}, false},
		{"already addressed: no DHCP", []Link{withIP(eno1)}, nil, &fakeDHCP{}, []string{"3c:ec:ef:12:34:56"}, nil, false},
		{"partly addressed: DHCP on the rest, failure tolerated", []Link{withIP(eno1), eno2}, nil, &fakeDHCP{err: errors.New("timeout")},
			[]string{"3c:ec:ef:12:34:56", "3c:ec:ef:12:34:57"}, [][]string{{"eno2"}}, false},
		{"no lease anywhere: retry later", []Link{eno1, eno2}, nil, &fakeDHCP{err: errors.New("timeout")}, nil, [][]string{{"eno1", "eno2"}}, true},
		{"no interfaces", []Link{lo}, nil, nil, nil, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			n := &Interfaces{Links: fakeLinks(tt.links), Hints: tt.hints}
			if tt.dhcp != nil {
				n.DHCP = tt.dhcp
			}
			macs, err := n.Up(context.Background())
			if tt.wantErr {
				assert.Error(t, err)
			} else {
				require.NoError(t, err)
			}
			assert.Equal(t, tt.wantMACs, macs)
			if tt.dhcp != nil {
				assert.Equal(t, tt.wantAsked, tt.dhcp.asked)
			}
		})
	}
}

func TestSysfsLinksFromSnapshot(t *testing.T) {
	root := filepath.Join("..", "testdata", "hardware", "nvme-sata")
	links, err := SysfsLinks{Root: root, Addrs: func(name string) ([]net.Addr, error) {
		if name == "eno1" {
			return []net.Addr{&net.IPNet{IP: net.IPv4(10, 0, 0, 5), Mask: net.CIDRMask(24, 32)}}, nil
		}
		return []net.Addr{&net.IPNet{IP: net.IPv4(127, 0, 0, 1), Mask: net.CIDRMask(8, 32)}}, nil
	}}.Links(context.Background())
	require.NoError(t, err)
	byName := map[string]Link{}
	for _, l := range links {
		byName[l.Name] = l
	}
	require.Contains(t, byName, "eno1")
	assert.Equal(t, "3c:ec:ef:12:34:56", byName["eno1"].MAC)
	assert.True(t, byName["eno1"].Carrier)
	assert.True(t, byName["eno1"].HasIPv4)
	assert.True(t, byName["lo"].Loopback)
	assert.False(t, byName["lo"].HasIPv4, "loopback addresses do not count")

	macs, err := (&Interfaces{Links: SysfsLinks{Root: root}}).Up(context.Background())
	require.NoError(t, err)
	assert.Equal(t, []string{"3c:ec:ef:12:34:56"}, macs)
}

func TestFormatKmsg(t *testing.T) {
	tests := []struct{ in, want string }{
		{"6,1234,5678901,-;usb 1-1: new device\n", "[    5.678901] usb 1-1: new device\n"},
		{"4,1,0,-;first\n SUBSYSTEM=pci\n", "[    0.000000] first\n"},
		{"no separator", "no separator"},
		{"6,1,abc,-;odd time\n", "odd time\n"},
	}
	for _, tt := range tests {
		assert.Equal(t, tt.want, formatKmsg([]byte(tt.in)))
	}
}

func TestSystemLogsNotesMissingSources(t *testing.T) {
	dir := t.TempDir()
	tgz, err := SystemLogs{LogFile: filepath.Join(dir, "missing.log"), Kmsg: filepath.Join(dir, "no-kmsg"), Dmesg: filepath.Join(dir, "no-dmesg")}.Collect(context.Background())
	require.NoError(t, err, "missing sources are reported inside the archive, not as a failure")
	files := untar(t, encodeB64(tgz))
	assert.Contains(t, files["errors.txt"], "missing.log")
	assert.Contains(t, files["errors.txt"], "no-dmesg")
}

func TestSystemLogsKeepsTheTailWithinTheHeartbeatLimit(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "agent.log")
	// Random-looking, poorly compressible content, 8 MiB, ending in a marker.
	big := make([]byte, 8<<20)
	x := uint32(1)
	for i := range big {
		x = x*1664525 + 1013904223
		big[i] = 'a' + byte(x>>24)%26
	}
	big = append(big, []byte("\nTHE END\n")...)
	require.NoError(t, os.WriteFile(p, big, 0o644))
	dmesg := filepath.Join(dir, "dmesg")
	require.NoError(t, os.WriteFile(dmesg, []byte("#!/bin/sh\necho kernel\n"), 0o755))
	tgz, err := SystemLogs{LogFile: p, Dmesg: dmesg}.Collect(context.Background())
	require.NoError(t, err)
	assert.LessOrEqual(t, len(tgz), maxLogsBytes)
	files := untar(t, encodeB64(tgz))
	assert.Contains(t, files["anvil-agent.log"], "THE END")
	assert.Less(t, len(files["anvil-agent.log"]), len(big))
}

func TestReadKmsgFromThisKernel(t *testing.T) {
	b, err := readKmsg("/dev/kmsg")
	if err != nil {
		t.Skipf("no readable /dev/kmsg here: %v", err)
	}
	// Non-blocking: it returned at all, with formatted records.
	if len(b) > 0 {
		assert.Regexp(t, `^\[\s*\d+\.\d{6}\] `, string(b))
	}
}

func encodeB64(b []byte) string { return base64.StdEncoding.EncodeToString(b) }

func sortedKeys(v map[string][]string) []string {
	out := make([]string, 0, len(v))
	for k := range v {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestClientUnreachable(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	url := srv.URL
	srv.Close()
	c, err := NewClient(ClientConfig{API: url, Timeout: time.Second})
	require.NoError(t, err)
	_, err = c.Lookup(context.Background(), []string{"m"}, "b")
	assert.ErrorIs(t, err, ErrUnreachable)
	_, err = c.Heartbeat(context.Background(), "n", &protocol.Heartbeat{})
	assert.ErrorIs(t, err, ErrUnreachable)
	var he *HTTPError
	assert.False(t, errors.As(err, &he))
}

func TestTruncateKeepsValidUTF8(t *testing.T) {
	tests := []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly10!", 10, "exactly10!"},
		{"abcdefghijkl", 10, "abcdef …"}, // " …" is 4 bytes
		{"ééééé", 9, "éé …"},             // the third é would be cut in half
	}
	for _, tt := range tests {
		got := truncate(tt.in, tt.n)
		assert.Equal(t, tt.want, got, "truncate(%q, %d)", tt.in, tt.n)
		assert.LessOrEqual(t, len(got), tt.n)
		assert.True(t, utf8.ValidString(got))
	}
}

func TestRenewAfter(t *testing.T) {
	const floor = 30 * time.Second
	tests := []struct {
		name             string
		lease, remaining time.Duration
		want             time.Duration
		wantOK           bool
	}{
		{"fresh one-hour lease: T1", time.Hour, time.Hour, 30 * time.Minute, true},
		{"failed renewal: half of what is left", time.Hour, 30 * time.Minute, 15 * time.Minute, true},
		{"never more often than the floor", time.Hour, 10 * time.Second, floor, true},
		{"expired: every floor", time.Hour, -time.Minute, floor, true},
		{"short lease", 20 * time.Second, 20 * time.Second, floor, true},
		{"no lease time: nothing to renew", 0, 0, 0, false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := renewAfter(tt.lease, tt.remaining, floor)
			assert.Equal(t, tt.wantOK, ok)
			if ok {
				assert.Equal(t, tt.want, got)
			}
		})
	}
}
