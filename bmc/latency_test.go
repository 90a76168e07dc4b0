//go:build latency

package bmc_test

import (
	"context"
	"fmt"
	"sort"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/bmc/vbmc/ipmisim"
)

func med(d []time.Duration) string {
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return fmt.Sprintf("median %s min %s max %s (n=%d)", d[len(d)/2].Round(100*time.Microsecond), d[0].Round(100*time.Microsecond), d[len(d)-1].Round(100*time.Microsecond), len(d))
}

// TestLatency measures per-call latency of both paths with pacing off:
// go test -tags latency -run TestLatency -v ./bmc/
func TestLatency(t *testing.T) {
	env := startVBMC(t, "node-1")
	cfg := fastConfig(nil)
	cfg.MinInterval = -1
	cfg.PollInterval = time.Millisecond
	m := bmc.New(cfg)
	ctx := context.Background()
	rf := env.target(t, "node-1", testPass)
	bin := ipmisim.BuildVBMC(t)
	sim := ipmisim.Start(t, ipmisim.Options{ChassisControl: fmt.Sprintf("%s chassis-control --url %s/control/node-1 --username %s --password %s", bin, env.url, testUser, testPass), Password: ipmiPass})
	ip := ipmiTarget(t, sim.Port, ipmiPass)
	for _, tg := range []bmc.Target{rf, ip} {
		var get, on, off, boot []time.Duration
		for range 10 {
			_, o, err := m.PowerState(ctx, tg)
			require.NoError(t, err)
			get = append(get, o.Duration)
			o, err = m.SetPower(ctx, tg, bmc.ActionOn)
			require.NoError(t, err)
			on = append(on, o.Duration)
			o, err = m.SetPower(ctx, tg, bmc.ActionOff)
			require.NoError(t, err)
			off = append(off, o.Duration)
			o, err = m.SetBootDevice(ctx, tg, bmc.BootPXE, bmc.BootOptions{})
			require.NoError(t, err)
			boot = append(boot, o.Duration)
		}
		t.Logf("%s PowerState: %s", tg.HardwareType, med(get))
		t.Logf("%s SetPower on (read+send+verify): %s", tg.HardwareType, med(on))
		t.Logf("%s SetPower off: %s", tg.HardwareType, med(off))
		t.Logf("%s SetBootDevice pxe (+read-back): %s", tg.HardwareType, med(boot))
	}
}
