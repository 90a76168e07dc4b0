package kmod

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// fakeSys is a /sys/devices tree whose fake loader behaves like the
// kernel: loading a driver binds its devices, and some drivers expose new
// devices when they bind (an HBA its disks).
type fakeSys struct {
	t    *testing.T
	root string

	mu        sync.Mutex
	loaded    []string
	inFlight  int
	maxFlight int
	// exposes: module -> devices (relative dir, modalias) it creates
	exposes map[string][][2]string
	// binds: module -> modalias prefixes it binds
	binds map[string]string
	fail  map[string]bool
	// events, if set, gets an add event for each device, except those a
	// module in silent exposes ("" silences devices added by the test).
	events  chan Uevent
	silent  map[string]bool
	loading string
}

// device adds a device under devices/ and links it from its bus (named
// by the modalias prefix), as the kernel does.
func (f *fakeSys) device(dir, modalias string) {
	f.t.Helper()
	p := filepath.Join(f.root, "devices", dir)
	require.NoError(f.t, os.MkdirAll(p, 0o755))
	require.NoError(f.t, os.WriteFile(filepath.Join(p, "modalias"), []byte(modalias+"\n"), 0o444))
	bus, _, _ := strings.Cut(modalias, ":")
	busDir := filepath.Join(f.root, "bus", bus, "devices")
	require.NoError(f.t, os.MkdirAll(busDir, 0o755))
	require.NoError(f.t, os.Symlink(p, filepath.Join(busDir, filepath.Base(dir)+"-"+strings.ReplaceAll(dir, "/", "_"))))
	if f.events != nil && !f.silent[f.loading] {
		f.events <- Uevent{Action: "add", DevPath: "/devices/" + dir, Modalias: modalias}
	}
}

func (f *fakeSys) Load(name string) error {
	f.mu.Lock()
	f.inFlight++
	f.maxFlight = max(f.maxFlight, f.inFlight)
	f.mu.Unlock()
	time.Sleep(20 * time.Millisecond) // a driver probe takes time
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inFlight--
	if f.fail[name] {
		return errors.New("Unknown symbol in module")
	}
	f.loaded = append(f.loaded, name)
	devs, _ := ScanModaliases(f.root)
	for _, d := range devs {
		if prefix, ok := f.binds[name]; ok && strings.HasPrefix(d.Modalias, prefix) {
			_ = os.Symlink("/sys/bus/x/drivers/"+name, filepath.Join(d.Path, "driver"))
		}
	}
	f.loading = name
	for _, dev := range f.exposes[name] {
		f.device(dev[0], dev[1])
	}
	f.loading = ""
	return nil
}

func TestColdplugLoadsUntilNoNewDevices(t *testing.T) {
	aliases, err := ParseAliases(strings.NewReader(`alias pci:v00001000d0000005Bsv*sd*bc*sc*i* megaraid_sas
alias pci:v00008086d000010D3sv*sd*bc*sc*i* e1000e
alias pci:v*d*sv*sd*bc01sc06i01* ahci
alias pci:v00008086d00002922sv*sd*bc*sc*i* ahci
alias pci:v0000BEEFd*sv*sd*bc*sc*i* broken_driver
alias scsi:t-0x00* sd_mod
alias scsi:t-0x05* sr_mod
alias usb:v*p*d*dc*dsc*dp*ic08isc06ip50in* usb_storage
alias usb:v*p*d*dc*dsc*dp*ic08isc06ip50in* uas
alias pci:v*d*sv*sd*bc0Csc03i30* xhci_pci
`))
	require.NoError(t, err)
	f := &fakeSys{t: t, root: t.TempDir(),
		exposes: map[string][][2]string{
			"megaraid_sas": {{"pci0000:00/0000:00:05.0/host0/target0:2:0/0:2:0:0", "scsi:t-0x00"}},
			"ahci":         {{"pci0000:00/0000:00:1f.2/ata1/host1/target1:0:0/1:0:0:0", "scsi:t-0x05"}},
			"xhci_pci":     {{"pci0000:00/0000:00:04.0/usb1/1-1/1-1:1.0", "usb:v0781p5567d0100dc00dsc00dp00ic08isc06ip50in00"}},
			"usb_storage":  {{"pci0000:00/0000:00:04.0/usb1/1-1/1-1:1.0/host2/target2:0:0/2:0:0:0", "scsi:t-0x00"}},
		},
		binds: map[string]string{"megaraid_sas": "pci:v00001000", "e1000e": "pci:v00008086d000010D3", "ahci": "pci:v00008086d00002922",
			"xhci_pci": "pci:v00001B36", "sd_mod": "scsi:t-0x00", "sr_mod": "scsi:t-0x05", "usb_storage": "usb:"},
		fail: map[string]bool{"broken_driver": true},
	}
	f.device("pci0000:00/0000:00:02.0", "pci:v00008086d000010D3sv00008086sd00000000bc02sc00i00")
	f.device("pci0000:00/0000:00:05.0", "pci:v00001000d0000005Bsv00001000sd00001000bc01sc04i00")
	f.device("pci0000:00/0000:00:1f.2", "pci:v00008086d00002922sv00001AF4sd00001100bc01sc06i01")
	f.device("pci0000:00/0000:00:04.0", "pci:v00001B36d0000000Dsv00001AF4sd00001100bc0Csc03i30")
	f.device("pci0000:00/0000:00:06.0", "pci:v0000BEEFd00000001sv00000000sd00000000bc02sc00i00")
	f.device("pci0000:00/0000:00:00.0", "pci:v00008086d00001237sv00001AF4sd00001100bc06sc00i00") // host bridge: no driver
	f.device("pci0000:00/0000:00:01.0", "pci:v00008086d00007000sv00001AF4sd00001100bc06sc01i00")
	require.NoError(t, os.Symlink("/sys/bus/pci/drivers/builtin", filepath.Join(f.root, "devices/pci0000:00/0000:00:01.0/driver"))) // bound already

	c := &Coldplug{Sys: f.root, Aliases: aliases, Loader: f, Settle: 100 * time.Millisecond}
	res := c.Run(context.Background())

	assert.ElementsMatch(t, []string{"e1000e", "megaraid_sas", "ahci", "xhci_pci", "sd_mod", "sr_mod", "usb_storage", "uas"}, res.Loaded)
	assert.Equal(t, map[string]string{"broken_driver": "Unknown symbol in module"}, res.Failed, "a failing module is reported and skipped")
	assert.Equal(t, []string{"pci:v00008086d00001237sv00001AF4sd00001100bc06sc00i00"}, res.Unmatched, "the bound device is not looked at, the host bridge has no module")
	// Round 1: PCI drivers; later rounds: what they exposed (disks, a CD,
	// a USB stick), looked at as each PCI driver finishes.
	assert.GreaterOrEqual(t, res.Rounds, 2)
	assert.Greater(t, f.maxFlight, 1, "modules of one round load concurrently")
	assert.ElementsMatch(t, f.loaded, res.Loaded, "each module loaded once")

	// Nothing new: a second run loads nothing and returns at once.
	again := c.Run(context.Background())
	assert.Empty(t, again.Loaded)
	assert.Less(t, again.Took, 100*time.Millisecond)

	// A device that shows up later (hotplug) is picked up by the next run.
	f.device("pci0000:00/0000:00:07.0", "pci:v00001000d0000005Bsv00001000sd00001000bc01sc04i00")
	late := c.Run(context.Background())
	assert.Empty(t, late.Loaded, "megaraid_sas is loaded already")
	assert.Equal(t, 1, late.Devices)
}

// A slow driver probe (legacy ATA on QEMU's PIIX takes about a second
// under TCG) must not hold back a module another driver's devices need:
// virtio_net loads as soon as virtio_pci has exposed the NIC.
func TestColdplugPipelinesPastSlowProbe(t *testing.T) {
	aliases, err := ParseAliases(strings.NewReader(`alias pci:v00008086d00007010sv*sd*bc*sc*i* ata_piix
alias pci:v00001AF4d00001000sv*sd*bc*sc*i* virtio_pci
alias virtio:d00000001v* virtio_net
`))
	require.NoError(t, err)
	f := &fakeSys{t: t, root: t.TempDir()}
	f.device("pci0000:00/0000:00:01.1", "pci:v00008086d00007010sv00001AF4sd00001100bc01sc01i80")
	f.device("pci0000:00/0000:00:03.0", "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00")
	var mu sync.Mutex
	var order []string
	loader := loaderFunc(func(name string) error {
		switch name {
		case "ata_piix":
			time.Sleep(400 * time.Millisecond)
		case "virtio_pci":
			time.Sleep(10 * time.Millisecond)
			_ = os.Symlink("/sys/bus/pci/drivers/virtio-pci", filepath.Join(f.root, "devices/pci0000:00/0000:00:03.0/driver"))
			f.device("pci0000:00/0000:00:03.0/virtio0", "virtio:d00000001v00001AF4")
		}
		mu.Lock()
		order = append(order, name)
		mu.Unlock()
		return nil
	})
	c := &Coldplug{Sys: f.root, Aliases: aliases, Loader: loader, Settle: 50 * time.Millisecond}
	res := c.Run(context.Background())
	assert.ElementsMatch(t, []string{"ata_piix", "virtio_pci", "virtio_net"}, res.Loaded)
	assert.Equal(t, []string{"virtio_pci", "virtio_net", "ata_piix"}, order, "virtio_net does not wait for the ATA probe")
	assert.Less(t, res.Took, 400*time.Millisecond+time.Second, "Run ends once the slow probe and settling are done")
}

func TestColdplugNoSysfs(t *testing.T) {
	c := &Coldplug{Sys: filepath.Join(t.TempDir(), "missing"), Aliases: &AliasTable{}, Loader: &fakeSys{t: t}}
	res := c.Run(context.Background())
	assert.Empty(t, res.Loaded, "no sysfs is logged, never fatal")
}

func TestColdplugStopsAtLimit(t *testing.T) {
	aliases, err := ParseAliases(strings.NewReader("alias x:* grow\n"))
	require.NoError(t, err)
	f := &fakeSys{t: t, root: t.TempDir()}
	f.device("d0", "x:0")
	// A driver that keeps exposing devices must not hold the boot.
	n := 0
	grow := loaderFunc(func(string) error {
		n++
		return nil
	})
	c := &Coldplug{Sys: f.root, Aliases: aliases, Loader: grow, Limit: 200 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan Result)
	go func() { done <- c.Run(ctx) }()
	stop := time.After(2 * time.Second)
	for i := 1; ; i++ {
		select {
		case r := <-done:
			cancel()
			assert.Equal(t, []string{"grow"}, r.Loaded)
			assert.GreaterOrEqual(t, r.Devices, 2)
			return
		case <-stop:
			t.Fatal("Run did not stop at its limit")
		case <-time.After(10 * time.Millisecond):
			f.device(filepath.Join("d0", "c", strings.Repeat("x", i%50+1)), "x:new")
		}
	}
}

type loaderFunc func(string) error

func (l loaderFunc) Load(n string) error { return l(n) }

// The host's own sysfs: every device found has the modalias its
// /sys/devices directory shows, and bus links are resolved.
func TestScanModaliasesHostSysfs(t *testing.T) {
	if _, err := os.Stat("/sys/bus"); err != nil {
		t.Skip("no sysfs")
	}
	devs, err := ScanModaliases("/sys")
	require.NoError(t, err)
	for _, d := range devs {
		assert.True(t, strings.HasPrefix(d.Path, "/sys/devices/"), d.Path)
		raw, err := os.ReadFile(filepath.Join(d.Path, "modalias"))
		if err == nil {
			assert.Equal(t, strings.TrimSpace(string(raw)), d.Modalias)
		}
	}
	t.Logf("%d devices with a modalias", len(devs))
}
