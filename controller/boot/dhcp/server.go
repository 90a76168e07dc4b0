package dhcp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"

	"github.com/insomniacslk/dhcp/dhcpv4"
	"github.com/insomniacslk/dhcp/dhcpv4/server4"
)

// maxInFlight bounds requests handled at once (each may read the store).
const maxInFlight = 32

// Listen opens the sockets mode needs on iface: port 67, and in proxy
// mode port 4011 too. They are bound to the interface (SO_BINDTODEVICE),
// so nothing is answered on any other network.
func Listen(iface string, mode Mode) ([]*net.UDPConn, error) {
	if iface == "" {
		return nil, errors.New("dhcp: no boot interface")
	}
	ports := []int{dhcpv4.ServerPort}
	if mode == ModeProxy {
		ports = append(ports, 4011)
	}
	var conns []*net.UDPConn
	for _, p := range ports {
		c, err := server4.NewIPv4UDPConn(iface, &net.UDPAddr{Port: p})
		if err != nil {
			for _, c := range conns {
				c.Close()
			}
			return nil, fmt.Errorf("dhcp: listen on %s port %d: %w", iface, p, err)
		}
		// A rack powering on at once sends a burst of DISCOVERs; the
		// default buffer (~200 KB) holds about a hundred.
		_ = c.SetReadBuffer(4 << 20)
		conns = append(conns, c)
	}
	return conns, nil
}

// ServeAll serves the sockets Listen opened until ctx ends.
func (r *Responder) ServeAll(ctx context.Context, conns []*net.UDPConn) error {
	errs := make(chan error, len(conns))
	for _, c := range conns {
		pxePort := c.LocalAddr().(*net.UDPAddr).Port == 4011
		go func() { errs <- r.Serve(ctx, c, pxePort) }()
	}
	var first error
	for range conns {
		if err := <-errs; err != nil && first == nil {
			first = err
		}
	}
	return first
}

// Serve answers requests read from conn until ctx ends; pxePort says conn
// is the proxyDHCP port 4011.
func (r *Responder) Serve(ctx context.Context, conn *net.UDPConn, pxePort bool) error {
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	sem := make(chan struct{}, maxInFlight)
	var wg sync.WaitGroup
	defer wg.Wait()
	for {
		buf := make([]byte, 1500)
		n, peer, err := conn.ReadFromUDP(buf)
		if err != nil {
			if ctx.Err() != nil || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return fmt.Errorf("dhcp: read: %w", err)
		}
		req, err := dhcpv4.FromBytes(buf[:n])
		if err != nil {
			r.drop("malformed")
			r.log.Debug("dhcp: unparsable packet", "from", peer, "err", err)
			continue
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			resp, err := r.Respond(ctx, req, pxePort)
			if err != nil {
				r.log.Warn("dhcp: cannot answer", "mac", req.ClientHWAddr, "err", err)
				return
			}
			if resp == nil {
				return
			}
			if _, err := conn.WriteToUDP(resp.ToBytes(), destination(req, resp, peer, pxePort)); err != nil {
				r.log.Warn("dhcp: send failed", "mac", req.ClientHWAddr, "err", err)
			}
		}()
	}
}

// destination is where a reply goes (RFC 2131 §4.1): to the relay, to a
// client that already has an address, or broadcast on the interface.
func destination(req, resp *dhcpv4.DHCPv4, peer *net.UDPAddr, pxePort bool) *net.UDPAddr {
	switch {
	case req.GatewayIPAddr != nil && !req.GatewayIPAddr.IsUnspecified():
		return &net.UDPAddr{IP: req.GatewayIPAddr, Port: dhcpv4.ServerPort}
	case pxePort:
		return peer // the PXE client asked from its own address and port
	case req.ClientIPAddr != nil && !req.ClientIPAddr.IsUnspecified() && resp.MessageType() != dhcpv4.MessageTypeNak:
		return &net.UDPAddr{IP: req.ClientIPAddr, Port: dhcpv4.ClientPort}
	}
	return &net.UDPAddr{IP: net.IPv4bcast, Port: dhcpv4.ClientPort}
}
