// Package ipmi reads the BMC's LAN configuration from inside the server,
// over the in-band IPMI system interface (/dev/ipmi0, the kernel's
// ipmi_devintf), as IPA does with ipmitool: the address, IPv6 address and
// MAC the BMC answers on, so that a discovered machine can be managed
// without anybody looking its BMC up.
package ipmi

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
)

// Requester sends one IPMI request to the local BMC and returns its
// response data, the completion code first. *Device implements it; tests
// replay captured answers.
type Requester interface {
	Request(ctx context.Context, netfn, cmd byte, data []byte) ([]byte, error)
}

// IPMI transport commands and LAN configuration parameters (IPMI 2.0,
// section 23.2, table 23-4).
const (
	NetFnTransport      = 0x0c
	CmdGetLANConfig     = 0x02
	ParamIPAddress      = 3
	ParamMACAddress     = 5
	ParamIPv6Support    = 50 // IPv6/IPv4 support
	ParamIPv6Status     = 55 // how many static and dynamic addresses
	ParamIPv6Static     = 56 // one static address per set selector
	ParamIPv6Dynamic    = 59 // one SLAAC/DHCPv6 address per set selector
	ccOK                = 0x00
	ccParamNotSupported = 0x80
	// MaxChannel is the last channel asked, as IPA (1..11): channel
	// numbers above are reserved or "this channel".
	MaxChannel = 11
	// maxIPv6Sets bounds the addresses asked per kind, whatever the BMC
	// claims to hold.
	maxIPv6Sets = 16
)

// CompletionError is a BMC's refusal of a request.
type CompletionError struct {
	Code byte
}

func (e *CompletionError) Error() string {
	switch e.Code {
	case ccParamNotSupported:
		return "parameter not supported (completion code 0x80)"
	case 0xcb:
		return "requested data not present (completion code 0xcb): not a LAN channel"
	case 0xcc:
		return "invalid data field in request (completion code 0xcc)"
	case 0xc1:
		return "invalid command (completion code 0xc1)"
	}
	return fmt.Sprintf("completion code 0x%02x", e.Code)
}

// ErrShort is an answer shorter than its parameter.
var ErrShort = errors.New("ipmi: answer too short")

// LAN is what the BMC says of its LAN channels. Empty fields were not
// found (no LAN channel has one, or it is unset: 0.0.0.0).
type LAN struct {
	Address   string // IPv4, e.g. 192.0.2.45
	V6Address string // IPv6, e.g. 2001:db8::45
	MAC       string // e.g. 52:54:00:aa:bb:01
	Channel   int    // the channel the IPv4 address (else the MAC) came from
}

// paramData strips the completion code and the parameter revision byte
// of a Get LAN Configuration Parameters answer and checks its length.
func paramData(resp []byte, want int) ([]byte, error) {
	if len(resp) == 0 {
		return nil, ErrShort
	}
	if resp[0] != ccOK {
		return nil, &CompletionError{Code: resp[0]}
	}
	if len(resp) < 2+want {
		return nil, fmt.Errorf("%w: %d bytes, want %d", ErrShort, len(resp), 2+want)
	}
	return resp[2 : 2+want], nil
}

// ParseIPv4 reads parameter 3 (IP address). An unset address (0.0.0.0)
// is returned as the zero Addr.
func ParseIPv4(resp []byte) (netip.Addr, error) {
	d, err := paramData(resp, 4)
	if err != nil {
		return netip.Addr{}, err
	}
	a := netip.AddrFrom4([4]byte(d))
	if a.IsUnspecified() {
		return netip.Addr{}, nil
	}
	return a, nil
}

// ParseMAC reads parameter 5 (MAC address); all zeros is "" (unset).
func ParseMAC(resp []byte) (string, error) {
	d, err := paramData(resp, 6)
	if err != nil {
		return "", err
	}
	zero := true
	for _, b := range d {
		zero = zero && b == 0
	}
	if zero {
		return "", nil
	}
	return net.HardwareAddr(d).String(), nil
}

// IPv6Status is parameter 55: how many static and dynamic addresses the
// BMC holds.
type IPv6Status struct {
	Static, Dynamic int
}

// ParseIPv6Status reads parameter 55.
func ParseIPv6Status(resp []byte) (IPv6Status, error) {
	d, err := paramData(resp, 2)
	if err != nil {
		return IPv6Status{}, err
	}
	return IPv6Status{Static: int(d[0]), Dynamic: int(d[1])}, nil
}

// IPv6 address states (the last byte of parameters 56 and 59).
const (
	v6Active = 0
)

// IPv6Addr is one set of parameter 56 (static) or 59 (dynamic).
type IPv6Addr struct {
	Addr    netip.Addr
	Prefix  int
	Enabled bool // static addresses: bit 7 of the source byte
	Active  bool // status 0
}

// ParseIPv6Addr reads one set of parameter 56 or 59: set selector,
// source/type, 16 address bytes, prefix length, status.
func ParseIPv6Addr(resp []byte, static bool) (IPv6Addr, error) {
	d, err := paramData(resp, 20)
	if err != nil {
		return IPv6Addr{}, err
	}
	a := IPv6Addr{Addr: netip.AddrFrom16([16]byte(d[2:18])), Prefix: int(d[18]), Active: d[19] == v6Active}
	a.Enabled = !static || d[1]&0x80 != 0
	if a.Prefix > 128 {
		return IPv6Addr{}, fmt.Errorf("ipmi: IPv6 prefix length %d", a.Prefix)
	}
	return a, nil
}

// usable is an address the BMC answers on: active, enabled, and neither
// unset nor link-local (IPA reports global addresses).
func (a IPv6Addr) usable() bool {
	return a.Active && a.Enabled && a.Addr.IsValid() && !a.Addr.IsUnspecified() && !a.Addr.IsLinkLocalUnicast()
}

// getParam asks parameter param (set selector set) of channel ch.
func getParam(ctx context.Context, r Requester, ch int, param, set byte) ([]byte, error) {
	return r.Request(ctx, NetFnTransport, CmdGetLANConfig, []byte{byte(ch), param, set, 0})
}

// ReadLAN asks channels 1..MaxChannel for their IPv4 address, MAC and
// IPv6 addresses and returns the first of each that is set, as IPA does.
// A channel that is not a LAN channel answers with an error code and is
// skipped; a transport failure (no answer at all) stops the walk, since
// every other channel would wait as long.
func ReadLAN(ctx context.Context, r Requester) (LAN, error) {
	var out LAN
	var errs []error
	for ch := 1; ch <= MaxChannel; ch++ {
		resp, err := getParam(ctx, r, ch, ParamIPAddress, 0)
		if err != nil {
			return out, fmt.Errorf("ipmi: channel %d: %w", ch, err)
		}
		ip, perr := ParseIPv4(resp)
		var ce *CompletionError
		if errors.As(perr, &ce) {
			continue // not a LAN channel
		}
		if perr != nil {
			errs = append(errs, fmt.Errorf("channel %d IP address: %w", ch, perr))
		}
		if ip.IsValid() && out.Address == "" {
			out.Address, out.Channel = ip.String(), ch
		}
		if out.MAC == "" {
			if resp, err := getParam(ctx, r, ch, ParamMACAddress, 0); err != nil {
				return out, fmt.Errorf("ipmi: channel %d: %w", ch, err)
			} else if mac, err := ParseMAC(resp); err != nil {
				errs = append(errs, fmt.Errorf("channel %d MAC address: %w", ch, err))
			} else if mac != "" {
				out.MAC = mac
				if out.Channel == 0 {
					out.Channel = ch
				}
			}
		}
		if out.V6Address == "" {
			v6, err := readIPv6(ctx, r, ch)
			if err != nil {
				return out, err
			}
			out.V6Address = v6
		}
		if out.Address != "" && out.MAC != "" && out.V6Address != "" {
			break
		}
	}
	return out, errors.Join(errs...)
}

// readIPv6 returns channel ch's first usable IPv6 address, dynamic
// (SLAAC, DHCPv6) first, as IPA; "" when the BMC has no IPv6 (parameter
// not supported) or none is usable.
func readIPv6(ctx context.Context, r Requester, ch int) (string, error) {
	resp, err := getParam(ctx, r, ch, ParamIPv6Status, 0)
	if err != nil {
		return "", fmt.Errorf("ipmi: channel %d: %w", ch, err)
	}
	st, err := ParseIPv6Status(resp)
	if err != nil {
		return "", nil // no IPv6 on this BMC or channel
	}
	for _, kind := range []struct {
		param  byte
		n      int
		static bool
	}{{ParamIPv6Dynamic, st.Dynamic, false}, {ParamIPv6Static, st.Static, true}} {
		for set := 0; set < min(kind.n, maxIPv6Sets); set++ {
			resp, err := getParam(ctx, r, ch, kind.param, byte(set))
			if err != nil {
				return "", fmt.Errorf("ipmi: channel %d: %w", ch, err)
			}
			if a, err := ParseIPv6Addr(resp, kind.static); err == nil && a.usable() {
				return a.Addr.String(), nil
			}
		}
	}
	return "", nil
}
