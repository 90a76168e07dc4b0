package agent

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/protocol"
)

// tlsController answers lookups over HTTPS with httptest's certificate
// and counts the requests that got through the handshake.
func tlsController(t *testing.T) (*httptest.Server, *atomic.Int32) {
	var served atomic.Int32
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"node":{"uuid":"9a2b1c7e-0000-4000-8000-000000000001"},"config":{"agent_token":"t","heartbeat_interval":5}}`))
	}))
	t.Cleanup(srv.Close)
	return srv, &served
}

func TestClientPinnedCertificate(t *testing.T) {
	srv, served := tlsController(t)
	right := protocol.FingerprintOf(srv.Certificate().Raw)
	wrong := right
	wrong[0] ^= 0xff

	for _, tc := range []struct {
		name    string
		api     string
		pin     string
		newErr  string // NewClient refuses
		untrust bool   // the lookup is refused as untrusted
	}{
		{name: "the pinned certificate", api: srv.URL, pin: right.String()},
		{name: "the pin in openssl's spelling", api: srv.URL, pin: strings.ToUpper(strings.TrimPrefix(right.String(), "sha256:"))},
		{name: "another certificate", api: srv.URL, pin: wrong.String(), untrust: true},
		{name: "no pin: system roots do not know httptest's CA", api: srv.URL, untrust: true},
		{name: "plain http with a pin", api: strings.Replace(srv.URL, "https://", "http://", 1), pin: right.String(), newErr: "needs https://"},
		{name: "a malformed pin is not ignored", api: srv.URL, pin: "sha256:1234", newErr: protocol.CmdlineFingerprint},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := served.Load()
			c, err := NewClient(ClientConfig{API: tc.api, Version: "test", Fingerprint: tc.pin})
			if tc.newErr != "" {
				require.Error(t, err)
				assert.Contains(t, err.Error(), tc.newErr)
				return
			}
			require.NoError(t, err)
			lr, err := c.Lookup(context.Background(), []string{"52:54:00:12:34:56"}, "boot-1")
			if tc.untrust {
				require.Error(t, err)
				assert.True(t, errors.Is(err, ErrUntrusted), "%v", err)
				assert.False(t, errors.Is(err, ErrUnreachable), "a refused certificate is not a network problem")
				assert.Equal(t, before, served.Load(), "the request never reached the server")
				_, err = c.Heartbeat(context.Background(), "9a2b1c7e-0000-4000-8000-000000000001", &protocol.Heartbeat{})
				assert.True(t, errors.Is(err, ErrUntrusted), "%v", err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, "t", lr.Config.AgentToken)
			assert.Equal(t, before+1, served.Load())
		})
	}
}

func TestClientUnreachableIsNotUntrusted(t *testing.T) {
	srv, _ := tlsController(t)
	url := srv.URL
	srv.Close()
	c, err := NewClient(ClientConfig{API: url, Version: "test", Fingerprint: protocol.FingerprintOf(srv.Certificate().Raw).String()})
	require.NoError(t, err)
	_, err = c.Lookup(context.Background(), nil, "b")
	assert.True(t, errors.Is(err, ErrUnreachable), "%v", err)
	assert.False(t, errors.Is(err, ErrUntrusted), "%v", err)
}

func TestParseCmdlineFingerprint(t *testing.T) {
	fp := "sha256:" + strings.Repeat("0f", 32)
	c := ParseCmdline("console=ttyS0 anvil.api=https://10.0.0.1:6385 anvil.api_fingerprint=" + fp + " anvil.node=n1")
	assert.Equal(t, "https://10.0.0.1:6385", c.API)
	assert.Equal(t, fp, c.Fingerprint)
	assert.Empty(t, ParseCmdline("anvil.api=https://10.0.0.1:6385").Fingerprint)
}

// TestAgentRefusesARogueControllerThenTalksToThePinnedOne: a rogue server
// answering at the controller's address, with the same (fake) controller
// behind it but another certificate, gets no lookup; once the address
// leads to the real controller the agent looks up and heartbeats.
func TestAgentRefusesARogueControllerThenTalksToThePinnedOne(t *testing.T) {
	ctrl := newFakeController(t)
	var rogueServed atomic.Int32
	rogue := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rogueServed.Add(1)
		ctrl.serve(w, r)
	}))
	t.Cleanup(rogue.Close)
	real := httptest.NewUnstartedServer(http.HandlerFunc(ctrl.serve))
	real.TLS = &tls.Config{Certificates: []tls.Certificate{otherCertificate(t)}}
	real.StartTLS()
	t.Cleanup(real.Close)
	pin := protocol.FingerprintOf(real.TLS.Certificates[0].Certificate[0])

	fwd := newSwitchableForward(t, rogue.Listener.Addr().String())
	h := startAgent(t, ctrl, func(a *Agent) {
		c, err := NewClient(ClientConfig{API: "https://" + fwd.addr(), Version: Version, Timeout: 5 * time.Second, Fingerprint: pin.String()})
		require.NoError(t, err)
		a.Controller = c
	})
	require.Eventually(t, func() bool { return strings.Count(h.logs.String(), "REFUSING the server") >= 2 }, waitFor, poll)
	assert.Contains(t, h.logs.String(), pin.String(), "the refusal names the pinned fingerprint")
	assert.Zero(t, rogueServed.Load(), "no request reached the rogue server")
	assert.Zero(t, ctrl.lookupCount())

	fwd.to(real.Listener.Addr().String())
	require.Eventually(t, func() bool { return len(ctrl.hbs()) >= 2 }, waitFor, poll)
	assert.Zero(t, rogueServed.Load())
}

// otherCertificate is a throwaway self-signed certificate, not httptest's.
func otherCertificate(t *testing.T) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "real controller"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// switchableForward forwards TCP connections to a target that can change,
// as a rogue server on the controller's address and then the real one.
type switchableForward struct {
	ln     net.Listener
	target atomic.Value // string
}

func newSwitchableForward(t *testing.T, target string) *switchableForward {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	f := &switchableForward{ln: ln}
	f.target.Store(target)
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				u, err := net.Dial("tcp", f.target.Load().(string))
				if err != nil {
					return
				}
				defer u.Close()
				go func() { _, _ = io.Copy(u, c) }()
				_, _ = io.Copy(c, u)
			}()
		}
	}()
	return f
}

func (f *switchableForward) addr() string     { return f.ln.Addr().String() }
func (f *switchableForward) to(target string) { f.target.Store(target) }
