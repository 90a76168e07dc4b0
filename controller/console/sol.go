package console

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/bmc/sol"
	"github.com/anvil-metal/anvil/controller/store"
)

// SOL opens consoles as IPMI 2.0 Serial-over-LAN sessions to the address
// and credentials in the node's ipmi_* driver_info (the ipmi hardware
// type's, and a redfish node's when it has them: Ironic's ipmitool-socat).
type SOL struct {
	// PollInterval of the SOL stream (bmc/sol's default when zero).
	PollInterval time.Duration
}

// Open implements Opener.
func (o SOL) Open(ctx context.Context, n *store.Node) (Session, error) {
	t, err := bmc.ParseDriverInfo(bmc.HardwareIPMI, n.DriverInfo)
	if err != nil {
		return nil, fmt.Errorf("console: %w", err)
	}
	// As the power interface: ipmi_cipher_suite, else 3 and then 17 (some
	// BMCs, ipmi_sim among them, do not list their suites).
	suites := []int{3, 17}
	if t.CipherSuite != "" {
		cs, err := strconv.Atoi(t.CipherSuite)
		if err != nil {
			return nil, fmt.Errorf("console: ipmi_cipher_suite %q: %w", t.CipherSuite, err)
		}
		suites = []int{cs}
	}
	var lastErr error
	for _, cs := range suites {
		s, err := sol.Open(ctx, sol.Target{Host: t.Host, Port: t.Port, Username: t.Username, Password: t.Password,
			CipherSuite: cs, PollInterval: o.PollInterval})
		if err == nil {
			return s, nil
		}
		lastErr = err
		if ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}
