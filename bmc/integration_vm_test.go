//go:build vm

package bmc_test

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/bmc/vbmc"
	"github.com/anvil-metal/anvil/bmc/vbmc/ipmisim"
)

// qemuVBMC serves anvil-vbmc with one QEMU (TCG) node on loopback.
func qemuVBMC(t *testing.T) (*vbmc.Server, *vbmc.QEMU, string) {
	t.Helper()
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skipf("qemu-system-x86_64 not installed (Debian package qemu-system-x86): %v", err)
	}
	q, err := vbmc.NewQEMU(nil, vbmc.QEMUConfig{
		StateDir:               t.TempDir(),
		MemoryMiB:              128,
		Disks:                  []vbmc.QEMUDisk{{Path: "nvme0.raw", SizeMiB: 16, Serial: "SN-VM-0001"}},
		NIC:                    &vbmc.QEMUNIC{},
		ShutdownTimeoutSeconds: 1, // SeaBIOS ignores ACPI: forced off quickly
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = q.Close() })
	srv := vbmc.NewServer(nil, testUser, testPass, vbmc.NewNode("vm-1", q))
	ts := httptest.NewServer(srv.Handler())
	t.Cleanup(ts.Close)
	return srv, q, ts.URL
}

// qmpStatus asks QEMU itself (query-status over QMP) whether it runs,
// waiting a little for the socket of a QEMU that is just starting.
func qmpStatus(t *testing.T, q *vbmc.QEMU) string {
	t.Helper()
	on, err := q.On(context.Background())
	require.NoError(t, err)
	if !on {
		return "no process"
	}
	var st string
	require.Eventually(t, func() bool {
		st, err = vbmc.QMPStatus(context.Background(), q.QMPSocket())
		return err == nil
	}, 10*time.Second, 20*time.Millisecond, "QMP never answered")
	return st
}

func vmConfig() bmc.Config {
	cfg := fastConfig(nil)
	cfg.MinInterval = 50 * time.Millisecond
	cfg.PollInterval = 100 * time.Millisecond
	cfg.VerifyTimeout = 10 * time.Second
	cfg.SoftPowerOffTimeout = 15 * time.Second // the backend forces off after 1 s
	return cfg
}

// bmclib's gofish provider → anvil-vbmc Redfish → a real QEMU process.
func TestVMRedfishDrivesQEMU(t *testing.T) {
	srv, q, url := qemuVBMC(t)
	ctx := context.Background()
	m := bmc.New(vmConfig())
	tg, err := bmc.ParseDriverInfo("redfish", map[string]any{
		"redfish_address": url, "redfish_system_id": "/redfish/v1/Systems/vm-1",
		"redfish_username": testUser, "redfish_password": testPass,
	})
	require.NoError(t, err)

	out, err := m.Verify(ctx, tg)
	require.NoError(t, err)
	t.Logf("redfish verify (login + status + logout): %s", out.Duration)

	out, err = m.SetBootDevice(ctx, tg, bmc.BootPXE, bmc.BootOptions{})
	require.NoError(t, err)
	t.Logf("redfish boot pxe verified: %s", out.Duration)

	steps := []struct {
		action bmc.PowerAction
		want   string
	}{
		{bmc.ActionOn, "running"},
		{bmc.ActionReboot, "running"},
		{bmc.ActionCycle, "running"},
		{bmc.ActionSoftOff, "no process"}, // ACPI ignored by SeaBIOS, forced off by the backend
		{bmc.ActionReboot, "running"},     // from off: power on
		{bmc.ActionOff, "no process"},
	}
	for _, s := range steps {
		out, err := m.SetPower(ctx, tg, s.action)
		require.NoError(t, err, s.action)
		assert.Equal(t, s.want, qmpStatus(t, q), s.action)
		t.Logf("redfish %s verified: %s (%d commands)", s.action, out.Duration, out.Attempts)
	}
	assert.Equal(t, "None", srv.Node("vm-1").Boot().Target, "one-time PXE override consumed by the first power on")

	st, out, err := m.PowerState(ctx, tg)
	require.NoError(t, err)
	assert.Equal(t, bmc.PowerOff, st)
	t.Logf("redfish power state: %s", out.Duration)
}

// bmclib with our ipmitool provider → ipmi_sim → anvil-vbmc chassis-control
// → the same kind of QEMU node.
func TestVMIPMIDrivesQEMU(t *testing.T) {
	srv, q, url := qemuVBMC(t)
	bin := ipmisim.BuildVBMC(t)
	sim := ipmisim.Start(t, ipmisim.Options{
		ChassisControl: fmt.Sprintf("%s chassis-control --url %s/control/vm-1 --username %s --password %s", bin, url, testUser, testPass),
		Password:       ipmiPass,
	})
	ctx := context.Background()
	m := bmc.New(vmConfig())
	tg := ipmiTarget(t, sim.Port, ipmiPass)

	st, out, err := m.PowerState(ctx, tg)
	require.NoError(t, err)
	assert.Equal(t, bmc.PowerOff, st)
	t.Logf("ipmitool power status: %s", out.Duration)

	out, err = m.SetBootDevice(ctx, tg, bmc.BootPXE, bmc.BootOptions{})
	require.NoError(t, err)
	assert.Equal(t, "Pxe", srv.Node("vm-1").Boot().Target)
	t.Logf("ipmitool bootdev pxe verified: %s", out.Duration)

	for _, s := range []struct {
		action bmc.PowerAction
		want   string
	}{
		{bmc.ActionOn, "running"},
		{bmc.ActionReboot, "running"},
		{bmc.ActionOff, "no process"},
	} {
		out, err := m.SetPower(ctx, tg, s.action)
		require.NoError(t, err, s.action)
		assert.Equal(t, s.want, qmpStatus(t, q), s.action)
		t.Logf("ipmitool %s verified: %s (%d commands)", s.action, out.Duration, out.Attempts)
	}
	assert.Equal(t, "None", srv.Node("vm-1").Boot().Target, "one-time PXE override consumed by power on")
}

// Boot device pxe set through the BMC makes the QEMU node network-boot:
// iPXE gets DHCP and a script over slirp's TFTP, and the script fetches a
// URL that guestfwd connects to an HTTP server in this test (the guest can
// reach nothing else: restrict=on). Both protocols: Redfish, and IPMI via
// ipmi_sim's chassis control.
func TestVMPXEBootReachesTheNetwork(t *testing.T) {
	if _, err := exec.LookPath("qemu-system-x86_64"); err != nil {
		t.Skipf("qemu-system-x86_64 not installed: %v", err)
	}
	for _, proto := range []string{"redfish", "ipmi"} {
		t.Run(proto, func(t *testing.T) {
			hit := make(chan string, 1)
			web := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				select {
				case hit <- r.URL.Path:
				default:
				}
				_, _ = io.WriteString(w, "#!ipxe\nshell\n")
			}))
			t.Cleanup(web.Close)
			webPort := web.Listener.Addr().(*net.TCPAddr).Port

			dir := t.TempDir()
			tftp := filepath.Join(dir, "tftp")
			require.NoError(t, os.MkdirAll(tftp, 0o755))
			require.NoError(t, os.WriteFile(filepath.Join(tftp, "boot.ipxe"), []byte("#!ipxe\nchain http://10.0.2.100/pxe-reached\n"), 0o644))
			q, err := vbmc.NewQEMU(nil, vbmc.QEMUConfig{
				StateDir:  filepath.Join(dir, "vm"),
				MemoryMiB: 128,
				Disks:     []vbmc.QEMUDisk{{Path: "nvme0.raw", SizeMiB: 16}},
				NIC: &vbmc.QEMUNIC{
					TFTP: tftp, BootFile: "boot.ipxe",
					GuestFwd: []string{fmt.Sprintf("tcp:10.0.2.100:80-tcp:127.0.0.1:%d", webPort)},
				},
			})
			require.NoError(t, err)
			t.Cleanup(func() { _ = q.Close() })
			srv := vbmc.NewServer(nil, testUser, testPass, vbmc.NewNode("vm-1", q))
			ts := httptest.NewServer(srv.Handler())
			t.Cleanup(ts.Close)

			var tg bmc.Target
			if proto == "redfish" {
				tg, err = bmc.ParseDriverInfo("redfish", map[string]any{"redfish_address": ts.URL, "redfish_username": testUser, "redfish_password": testPass})
				require.NoError(t, err)
			} else {
				sim := ipmisim.Start(t, ipmisim.Options{
					ChassisControl: fmt.Sprintf("%s chassis-control --url %s/control/vm-1 --username %s --password %s", ipmisim.BuildVBMC(t), ts.URL, testUser, testPass),
					Password:       ipmiPass,
				})
				tg = ipmiTarget(t, sim.Port, ipmiPass)
			}
			m := bmc.New(vmConfig())
			ctx := context.Background()
			_, err = m.SetBootDevice(ctx, tg, bmc.BootPXE, bmc.BootOptions{})
			require.NoError(t, err)
			start := time.Now()
			_, err = m.SetPower(ctx, tg, bmc.ActionOn)
			require.NoError(t, err)

			select {
			case path := <-hit:
				assert.Equal(t, "/pxe-reached", path)
				t.Logf("%s: power on → iPXE fetched its chained URL after %s", proto, time.Since(start))
			case <-time.After(90 * time.Second):
				b, _ := os.ReadFile(filepath.Join(dir, "vm", "qemu.log"))
				t.Fatalf("no PXE boot within 90s; qemu.log:\n%s", b)
			}
			_, err = m.SetPower(ctx, tg, bmc.ActionOff)
			require.NoError(t, err)
		})
	}
}
