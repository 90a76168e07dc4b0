package kmod

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

func TestParseUevent(t *testing.T) {
	for _, tc := range []struct {
		name, msg string
		want      Uevent
		err       string
	}{
		{name: "pci device", msg: "add@/devices/pci0000:00/0000:00:03.0\x00ACTION=add\x00DEVPATH=/devices/pci0000:00/0000:00:03.0\x00SUBSYSTEM=pci\x00MODALIAS=pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00\x00SEQNUM=812\x00",
			want: Uevent{Action: "add", DevPath: "/devices/pci0000:00/0000:00:03.0", Modalias: "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00"}},
		{name: "module load has no modalias", msg: "add@/module/virtio_net\x00ACTION=add\x00DEVPATH=/module/virtio_net\x00SUBSYSTEM=module\x00SEQNUM=813",
			want: Uevent{Action: "add", DevPath: "/module/virtio_net"}},
		{name: "header only", msg: "bind@/devices/virtual/net/lo", want: Uevent{Action: "bind", DevPath: "/devices/virtual/net/lo"}},
		{name: "udev monitor message", msg: "libudev\x00\xfe\xed\xca\xfe", err: "not ACTION@DEVPATH"},
		{name: "empty", msg: "", err: "not ACTION@DEVPATH"},
		{name: "relative path", msg: "add@devices/x\x00MODALIAS=pci:x", err: "not ACTION@DEVPATH"},
		{name: "fields disagree", msg: "add@/devices/x\x00ACTION=remove\x00DEVPATH=/devices/x", err: "disagrees"},
		{name: "path climbs out", msg: "add@/devices/../../etc\x00MODALIAS=pci:x", err: "disagrees"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseUevent([]byte(tc.msg))
			if tc.err != "" {
				require.ErrorContains(t, err, tc.err)
				return
			}
			require.NoError(t, err)
			assert.Equal(t, tc.want, got)
		})
	}
}

// FuzzParseUevent: any datagram gives an event or an error, never a
// panic, and an accepted path stays inside /sys.
func FuzzParseUevent(f *testing.F) {
	f.Add([]byte("add@/devices/pci0000:00/0000:00:03.0\x00ACTION=add\x00MODALIAS=pci:v1\x00"))
	f.Add([]byte("libudev\x00"))
	f.Add([]byte("@/\x00=\x00"))
	f.Fuzz(func(t *testing.T, b []byte) {
		ev, err := ParseUevent(b)
		if err != nil {
			return
		}
		if !strings.HasPrefix(ev.DevPath, "/") || strings.Contains(ev.DevPath+"/", "/../") {
			t.Fatalf("accepted %q", ev.DevPath)
		}
	})
}

// eventSys is a fakeSys whose devices the "kernel" announces on events,
// except those added while silent.
func eventSys(t *testing.T) (*fakeSys, chan Uevent) {
	ev := make(chan Uevent, 64)
	f := &fakeSys{t: t, root: t.TempDir(), events: ev}
	return f, ev
}

const eventAliases = `alias pci:v00001000d0000005Bsv*sd*bc*sc*i* megaraid_sas
alias pci:v*d*sv*sd*bc0Csc03i30* xhci_pci
alias scsi:t-0x00* sd_mod
alias usb:v*p*d*dc*dsc*dp*ic08isc06ip50in* usb_storage
alias pci:v0000CAFEd*sv*sd*bc*sc*i* quiet_driver
`

// With events, sysfs is read twice (first, and to verify before
// returning) while the devices the drivers expose are handled as they are
// announced: the same modules load as when polling.
func TestColdplugFollowsEvents(t *testing.T) {
	aliases, err := ParseAliases(strings.NewReader(eventAliases))
	require.NoError(t, err)
	f, ev := eventSys(t)
	f.exposes = map[string][][2]string{
		"megaraid_sas": {{"pci0000:00/0000:00:05.0/host0/target0:2:0/0:2:0:0", "scsi:t-0x00"}},
		"xhci_pci":     {{"pci0000:00/0000:00:04.0/usb1/1-1/1-1:1.0", "usb:v0781p5567d0100dc00dsc00dp00ic08isc06ip50in00"}},
		"usb_storage":  {{"pci0000:00/0000:00:04.0/usb1/1-1/1-1:1.0/host2/target2:0:0/2:0:0:0", "scsi:t-0x00"}},
	}
	f.device("pci0000:00/0000:00:05.0", "pci:v00001000d0000005Bsv00001000sd00001000bc01sc04i00")
	f.device("pci0000:00/0000:00:04.0", "pci:v00001B36d0000000Dsv00001AF4sd00001100bc0Csc03i30")
	drain(ev) // there before coldplug starts: the first scan finds them

	c := &Coldplug{Sys: f.root, Aliases: aliases, Loader: f, Settle: 50 * time.Millisecond, Events: ev}
	res := c.Run(context.Background())
	assert.ElementsMatch(t, []string{"megaraid_sas", "xhci_pci", "sd_mod", "usb_storage"}, res.Loaded)
	assert.Equal(t, 2, res.Scans, "sysfs read first and once to verify; the rest came as events")
	assert.Equal(t, 5, res.Devices)
}

// A device nobody announced (a lost event) is found by the verifying
// scan.
func TestColdplugEventsMissed(t *testing.T) {
	aliases, err := ParseAliases(strings.NewReader(eventAliases))
	require.NoError(t, err)
	f, ev := eventSys(t)
	f.silent = map[string]bool{"megaraid_sas": true}
	f.exposes = map[string][][2]string{"megaraid_sas": {{"pci0000:00/0000:00:05.0/host0/target0:2:0/0:2:0:0", "scsi:t-0x00"}}}
	f.device("pci0000:00/0000:00:05.0", "pci:v00001000d0000005Bsv00001000sd00001000bc01sc04i00")
	drain(ev)
	c := &Coldplug{Sys: f.root, Aliases: aliases, Loader: f, Settle: 50 * time.Millisecond, Events: ev}
	res := c.Run(context.Background())
	assert.ElementsMatch(t, []string{"megaraid_sas", "sd_mod"}, res.Loaded, "the unannounced disk still gets sd_mod")
	assert.Equal(t, 3, res.Scans, "first, a verify that finds the disk, a verify that finds nothing new")
}

// A Lost event makes Run read sysfs at once: a device added silently
// while Run settles gets its driver well before the settle period ends,
// when the verifying scan would have found it.
func TestColdplugLostEventRescansAtOnce(t *testing.T) {
	aliases, err := ParseAliases(strings.NewReader(eventAliases))
	require.NoError(t, err)
	f, ev := eventSys(t)
	f.device("pci0000:00/0000:00:05.0", "pci:v00001000d0000005Bsv00001000sd00001000bc01sc04i00")
	drain(ev)
	const settle = 3 * time.Second
	c := &Coldplug{Sys: f.root, Aliases: aliases, Loader: f, Settle: settle, Events: ev}
	done := make(chan Result)
	go func() { done <- c.Run(context.Background()) }()
	loaded := func(m string) func() bool {
		return func() bool {
			f.mu.Lock()
			defer f.mu.Unlock()
			return slices.Contains(f.loaded, m)
		}
	}
	require.Eventually(t, loaded("megaraid_sas"), 5*time.Second, 5*time.Millisecond)
	f.silent = map[string]bool{"": true}
	f.device("pci0000:00/0000:00:09.0", "pci:v0000CAFEd00000001sv00000000sd00000000bc02sc00i00")
	ev <- Uevent{Lost: true}
	assert.Eventually(t, loaded("quiet_driver"), settle/2, 5*time.Millisecond, "loaded on the Lost event, not after the settle period")
	assert.ElementsMatch(t, []string{"megaraid_sas", "quiet_driver"}, (<-done).Loaded)
}

// After boot, Watch looks again when a device is announced, not on a
// timer: a late disk gets its driver long before the (here: hour-long)
// polling interval, and nothing reads sysfs while nothing happens.
func TestWatchFollowsEvents(t *testing.T) {
	aliases, err := ParseAliases(strings.NewReader(eventAliases))
	require.NoError(t, err)
	f, ev := eventSys(t)
	c := &Coldplug{Sys: f.root, Aliases: aliases, Loader: f, Settle: 20 * time.Millisecond, Events: ev}
	c.Run(context.Background())
	ctx, cancel := context.WithCancel(context.Background())
	stopped := make(chan struct{})
	go func() { c.Watch(ctx, time.Hour); close(stopped) }()
	f.device("pci0000:00/0000:00:05.0/host0/target0:2:0/0:2:0:0", "scsi:t-0x00")
	assert.Eventually(t, func() bool {
		f.mu.Lock()
		defer f.mu.Unlock()
		return len(f.loaded) == 1 && f.loaded[0] == "sd_mod"
	}, 5*time.Second, 10*time.Millisecond, "the announced disk got sd_mod")
	cancel()
	<-stopped
}

func drain(ev chan Uevent) {
	for {
		select {
		case <-ev:
		default:
			return
		}
	}
}

// TestListenUeventsInNetns listens in a network namespace of its own and
// sees the kernel announce a veth pair created there: the kernel sends a
// namespaced device's events only to that namespace's sockets, so the
// host's devices and udev see nothing of it.
func TestListenUeventsInNetns(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root for a network namespace")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	type opened struct {
		ev  <-chan Uevent
		err error
	}
	ready := make(chan opened, 1)
	made := make(chan error, 1)
	go func() {
		// This thread enters the namespace and never leaves it: the
		// goroutine ends locked, so Go discards the thread.
		runtime.LockOSThread()
		if err := unix.Unshare(unix.CLONE_NEWNET); err != nil {
			ready <- opened{err: err}
			return
		}
		ev, err := ListenUevents(ctx, slog.New(slog.DiscardHandler), func(ev Uevent) bool { return ev.Action == "add" })
		ready <- opened{ev, err}
		if err != nil {
			return
		}
		made <- netlink.LinkAdd(&netlink.Veth{LinkAttrs: netlink.LinkAttrs{Name: "anvtest0"}, PeerName: "anvtest1"})
	}()
	o := <-ready
	if o.err != nil && strings.Contains(o.err.Error(), "operation not permitted") {
		t.Skipf("cannot create a network namespace here: %v", o.err)
	}
	require.NoError(t, o.err)
	if err := <-made; err != nil {
		t.Skipf("no veth in this kernel: %v", err)
	}
	want := map[string]bool{"anvtest0": false, "anvtest1": false}
	deadline := time.After(10 * time.Second)
	for !want["anvtest0"] || !want["anvtest1"] {
		select {
		case ev := <-o.ev:
			if _, ok := want[filepath.Base(ev.DevPath)]; ok && strings.HasPrefix(ev.DevPath, "/devices/virtual/net/") {
				want[filepath.Base(ev.DevPath)] = true
			}
		case <-deadline:
			t.Fatalf("no add events for the veth pair: %v", want)
		}
	}
	cancel()
	for range o.ev {
		// Closed once the listener has stopped.
	}
}
