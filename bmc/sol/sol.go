// Package sol is anvil's IPMI 2.0 Serial-over-LAN client: it opens an
// RMCP+ session to a BMC, activates the SOL payload and streams the
// server's serial console in both directions until the context ends or the
// BMC drops the session.
//
// The RMCP+ session (RAKP with HMAC-SHA1/SHA256, integrity, AES-CBC-128
// confidentiality, cipher suites 3 and 17) and the SOL data plane (sequence
// numbers, acknowledgements, retransmission of refused characters) come from
// github.com/bougou/go-ipmi, which since v0.9 streams the SOL payload
// (client.SOLStream); bmclib, which anvil uses for everything else, can only
// deactivate SOL. This package adds what a long-lived, unattended console
// needs on top: deactivating a stale payload left by a crashed viewer,
// a bounded poll interval (the poll is also the session keepalive), and
// closing the payload and session on the way out.
package sol

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	ipmi "github.com/bougou/go-ipmi/pkg/client"
	"github.com/bougou/go-ipmi/pkg/command/transport"
	"github.com/bougou/go-ipmi/pkg/types"
)

// Target is a BMC reachable over IPMI 2.0 (lanplus).
type Target struct {
	Host     string
	Port     int // 623 when zero
	Username string
	Password string
	// CipherSuite is the RMCP+ cipher suite (3 or 17); zero lets the
	// client pick the strongest one the BMC offers.
	CipherSuite int
	// Timeout bounds each IPMI request (5 s when zero).
	Timeout time.Duration
	// PollInterval is how often an empty SOL packet asks the BMC for output
	// (and keeps the session alive); 200 ms when zero.
	PollInterval time.Duration
}

// Session is one activated SOL payload on an RMCP+ session.
type Session struct {
	c    *ipmi.Client
	poll time.Duration
}

// payloadInstance is the SOL instance ipmitool and Ironic use.
const payloadInstance = 1

// Open logs in to the BMC and activates SOL. A payload left active by an
// earlier viewer (completion code 0x80, "payload already active") is
// deactivated and activation tried once more, as Ironic's ipmitool-socat
// console does with "sol deactivate" before "sol activate".
func Open(ctx context.Context, t Target) (*Session, error) {
	if t.Port == 0 {
		t.Port = 623
	}
	if t.Timeout == 0 {
		t.Timeout = 5 * time.Second
	}
	if t.PollInterval == 0 {
		t.PollInterval = 200 * time.Millisecond
	}
	c, err := ipmi.NewClient(t.Host, t.Port, t.Username, t.Password)
	if err != nil {
		return nil, fmt.Errorf("sol: %w", err)
	}
	c.WithInterface(ipmi.InterfaceLanplus).WithTimeout(t.Timeout).WithRetry(1).
		WithMaxPrivilegeLevel(types.PrivilegeLevelAdministrator)
	if t.CipherSuite != 0 {
		c.WithCipherSuiteID(types.CipherSuiteID(t.CipherSuite))
	}
	if err := c.Connect(ctx); err != nil {
		return nil, fmt.Errorf("sol: opening an RMCP+ session to %s:%d: %w", t.Host, t.Port, err)
	}
	s := &Session{c: c, poll: t.PollInterval}
	if err := s.activate(ctx); err != nil {
		_ = c.Close(context.WithoutCancel(ctx))
		return nil, err
	}
	return s, nil
}

func (s *Session) activate(ctx context.Context) error {
	req := &transport.ActivatePayloadRequest{PayloadType: types.PayloadTypeSOL, PayloadInstance: payloadInstance,
		EnableEncryption: true, EnableAuthentication: true}
	_, err := s.c.ActivatePayload(ctx, req)
	if err != nil && isAlreadyActive(err) {
		_, _ = s.c.DeactivatePayload(ctx, &transport.DeactivatePayloadRequest{PayloadType: types.PayloadTypeSOL, PayloadInstance: payloadInstance})
		_, err = s.c.ActivatePayload(ctx, req)
	}
	if err != nil {
		return fmt.Errorf("sol: activating the SOL payload: %w", err)
	}
	return nil
}

// isAlreadyActive reports the Activate Payload completion code 0x80
// (payload already active on another session).
func isAlreadyActive(err error) bool {
	var rerr *types.ResponseError
	if errors.As(err, &rerr) {
		return uint8(rerr.CompletionCode()) == 0x80
	}
	return false
}

// Run streams the console: what the server prints is written to out, what
// is read from in is sent to the server. It returns when ctx ends (nil),
// in reaches EOF (nil) or the BMC stops answering or deactivates SOL (the
// error). Run does not deactivate the payload; Close does.
func (s *Session) Run(ctx context.Context, in io.Reader, out io.Writer) error {
	err := s.c.SOLStream(ctx, in, out, &ipmi.SOLStreamOptions{PollInterval: s.poll})
	if err != nil && ctx.Err() != nil {
		return nil
	}
	if err != nil {
		return fmt.Errorf("sol: %w", err)
	}
	return nil
}

// Close deactivates the SOL payload and closes the RMCP+ session, with a
// few seconds' bound even when ctx has ended (a BMC keeps a payload active
// until told otherwise or its session times out).
func (s *Session) Close(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	_, derr := s.c.DeactivatePayload(ctx, &transport.DeactivatePayloadRequest{PayloadType: types.PayloadTypeSOL, PayloadInstance: payloadInstance})
	cerr := s.c.Close(ctx)
	if derr != nil {
		return fmt.Errorf("sol: deactivating: %w", derr)
	}
	if cerr != nil {
		return fmt.Errorf("sol: closing the session: %w", cerr)
	}
	return nil
}
