//go:build vm

package image

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/vishvananda/netlink"
)

// strangerIP is a host on the provisioning network with no business
// there (issue #30): an address of the namespace the network-boot tests
// run in, so its requests reach the controller from an address no node
// has.
const strangerIP = "10.88.0.250"

// stranger polls the unauthenticated agent endpoints as an attacker on
// the provisioning network would.
type stranger struct {
	c  *controller
	hc *http.Client
	// tokens counts lookups that were answered with a token, nonces boot
	// scripts that carried one; polls counts lookups sent.
	tokens, nonces, polls atomic.Int64
}

func newStranger(t *testing.T, c *controller) *stranger {
	t.Helper()
	lo, err := netlink.LinkByName("lo")
	must(t, err)
	must(t, netlink.AddrAdd(lo, &netlink.Addr{IPNet: &net.IPNet{IP: net.ParseIP(strangerIP), Mask: net.CIDRMask(32, 32)}}))
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(strangerIP)}, Timeout: 5 * time.Second}
	return &stranger{c: c, hc: &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}}
}

func (s *stranger) get(path string) (int, string) {
	req, err := http.NewRequest(http.MethodGet, s.c.url+path, nil)
	if err != nil {
		return 0, err.Error()
	}
	req.Header.Set("X-OpenStack-Ironic-API-Version", "1.82")
	res, err := s.hc.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(res.Body, 1<<20))
	return res.StatusCode, string(b)
}

// lookup asks for the agent token of the node with mac, as an agent would.
func (s *stranger) lookup(mac string) {
	s.polls.Add(1)
	code, body := s.get("/v1/lookup?addresses=" + url.QueryEscape(mac) + "&boot_id=stranger-boot")
	if code == http.StatusOK && strings.Contains(body, `"agent_token":"`) && !strings.Contains(body, `"agent_token":""`) {
		s.tokens.Add(1)
	}
}

// script fetches the node's iPXE script, as its firmware would, and
// reports whether it carried the boot's nonce.
func (s *stranger) script(mac string) (int, bool) {
	code, body := s.get("/v1/boot/" + mac + "/ipxe")
	carried := code == http.StatusOK && strings.Contains(body, "anvil.token=")
	if carried {
		s.nonces.Add(1)
	}
	return code, carried
}

// poll looks up every 10 ms and fetches the boot script every 200 ms
// for each mac until the returned stop is called.
func (s *stranger) poll(macs ...string) (stop func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	for _, mac := range macs {
		wg.Go(func() {
			tick := time.NewTicker(10 * time.Millisecond)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-ctx.Done():
					return
				case <-tick.C:
				}
				s.lookup(mac)
				if i%20 == 0 {
					s.script(mac)
				}
			}
		})
	}
	return func() { cancel(); wg.Wait() }
}

// refusedLines counts the node's history lines about refused agent
// requests.
func refusedLines(hist string) int {
	return strings.Count(hist, "refused: it carried no nonce") + strings.Count(hist, "refused: the boot service leased")
}
