package kmod

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestStorageOnly(t *testing.T) {
	deps, paths := parseModulesDep(`kernel/drivers/ata/ata_piix.ko.zst: kernel/drivers/ata/libata.ko.zst kernel/drivers/scsi/scsi_mod.ko.zst
kernel/drivers/ata/libata.ko.zst: kernel/drivers/scsi/scsi_mod.ko.zst
kernel/drivers/scsi/scsi_mod.ko.zst:
kernel/drivers/scsi/sd_mod.ko.zst: kernel/drivers/scsi/scsi_mod.ko.zst
kernel/drivers/nvme/host/nvme.ko.zst: kernel/drivers/nvme/host/nvme-core.ko.zst
kernel/drivers/nvme/host/nvme-core.ko.zst:
kernel/drivers/block/virtio_blk.ko.zst: kernel/drivers/virtio/virtio.ko.zst
kernel/drivers/md/raid1.ko.zst: kernel/drivers/md/md-mod.ko.zst
kernel/drivers/md/md-mod.ko.zst:
kernel/drivers/message/fusion/mptsas.ko.zst: kernel/drivers/scsi/scsi_mod.ko.zst
kernel/drivers/usb/storage/usb-storage.ko.zst: kernel/drivers/usb/core/usbcore.ko.zst
kernel/drivers/scsi/bnx2i/bnx2i.ko.zst: kernel/drivers/net/ethernet/broadcom/cnic.ko.zst kernel/drivers/scsi/scsi_mod.ko.zst
kernel/drivers/scsi/libfcoe.ko.zst: kernel/net/8021q/8021q.ko.zst
kernel/drivers/net/ethernet/broadcom/cnic.ko.zst:
kernel/net/8021q/8021q.ko.zst:
kernel/drivers/net/ethernet/intel/e1000e/e1000e.ko.zst:
kernel/drivers/virtio/virtio_pci.ko.zst: kernel/drivers/virtio/virtio.ko.zst
kernel/drivers/virtio/virtio.ko.zst:
kernel/drivers/usb/host/xhci-pci.ko.zst: kernel/drivers/usb/core/usbcore.ko.zst
kernel/drivers/infiniband/ulp/srp/ib_srp.ko.zst: kernel/drivers/scsi/scsi_mod.ko.zst
kernel/drivers/scsi/ib_like.ko.zst: kernel/drivers/infiniband/core/ib_core.ko.zst
kernel/drivers/infiniband/core/ib_core.ko.zst:
`)
	assert.Equal(t, []string{"nvme_core"}, deps["nvme"])
	k := &KernelLoader{deps: deps, paths: paths}
	for _, tc := range []struct {
		module string
		want   bool
	}{
		{"ata_piix", true},
		{"sd_mod", true},
		{"nvme", true},
		{"virtio_blk", true}, // depends on virtio, which is not network
		{"raid1", true},
		{"md-mod", true}, // dashes as modprobe takes them
		{"mptsas", true},
		{"usb_storage", true},
		{"bnx2i", false},      // iSCSI offload needs the NIC's cnic
		{"libfcoe", false},    // FCoE needs net/
		{"ib_like", false},    // needs InfiniBand
		{"ib_srp", false},     // not under a storage tree
		{"e1000e", false},     // the network's
		{"virtio_pci", false}, // the bus the NIC sits on
		{"xhci_pci", false},   // USB NICs and the keyboard
		{"unknown", false},    // built in or absent: never held back
	} {
		assert.Equal(t, tc.want, k.StorageOnly(tc.module), tc.module)
	}
}

// The network's drivers are loaded, and Foreground called, while a slow
// storage probe still runs; Run itself waits for the storage.
func TestColdplugForegroundBeforeSlowStorage(t *testing.T) {
	aliases, err := ParseAliases(strings.NewReader(`alias pci:v00008086d00007010sv*sd*bc*sc*i* ata_piix
alias pci:v00001AF4d00001000sv*sd*bc*sc*i* virtio_pci
alias virtio:d00000001v* virtio_net
alias scsi:t-0x00* sd_mod
`))
	require.NoError(t, err)
	f := &fakeSys{t: t, root: t.TempDir()}
	f.device("pci0000:00/0000:00:01.1", "pci:v00008086d00007010sv00001AF4sd00001100bc01sc01i80")
	f.device("pci0000:00/0000:00:03.0", "pci:v00001AF4d00001000sv00001AF4sd00000001bc02sc00i00")
	var mu sync.Mutex
	var loaded []string
	var started []string
	loader := loaderFunc(func(name string) error {
		mu.Lock()
		started = append(started, name)
		mu.Unlock()
		switch name {
		case "ata_piix": // the slow probe, which exposes a disk
			time.Sleep(600 * time.Millisecond)
			f.device("pci0000:00/0000:00:01.1/host0/0:0:0:0", "scsi:t-0x00")
		case "virtio_pci":
			time.Sleep(10 * time.Millisecond)
			f.device("pci0000:00/0000:00:03.0/virtio0", "virtio:d00000001v00001AF4")
		}
		mu.Lock()
		loaded = append(loaded, name)
		mu.Unlock()
		return nil
	})
	var atForeground []string
	calls := 0
	c := &Coldplug{Sys: f.root, Aliases: aliases, Loader: loader, Settle: 50 * time.Millisecond,
		Background: func(m string) bool { return m == "ata_piix" || m == "sd_mod" },
		Foreground: func() {
			calls++
			mu.Lock()
			atForeground = append([]string(nil), loaded...)
			mu.Unlock()
		}}
	res := c.Run(context.Background())
	assert.Equal(t, 1, calls)
	assert.Equal(t, []string{"virtio_pci", "virtio_net"}, atForeground, "the NIC's drivers, not the disks'")
	assert.Less(t, res.ForegroundAt, 500*time.Millisecond, "Foreground does not wait for the ATA probe")
	assert.Equal(t, []string{"virtio_pci", "virtio_net", "ata_piix", "sd_mod"}, started,
		"storage loads wait for the network's, with which they would share a CPU")
	assert.ElementsMatch(t, []string{"virtio_pci", "virtio_net", "ata_piix", "sd_mod"}, res.Loaded, "Run waits for the storage and what it exposes")
	assert.GreaterOrEqual(t, res.Took, 600*time.Millisecond)
	assert.Positive(t, res.Scans)

	// A later Run (Watch) never calls Foreground again.
	c.Run(context.Background())
	assert.Equal(t, 1, calls)
}

func TestColdplugForegroundFallbacks(t *testing.T) {
	t.Run("no sysfs", func(t *testing.T) {
		calls := 0
		c := &Coldplug{Sys: filepath.Join(t.TempDir(), "missing"), Aliases: &AliasTable{}, Loader: &fakeSys{t: t},
			Foreground: func() { calls++ }}
		c.Run(context.Background())
		assert.Equal(t, 1, calls, "a caller waiting for the network's drivers is released")
	})
	t.Run("a foreground load hangs past ctx", func(t *testing.T) {
		aliases, err := ParseAliases(strings.NewReader("alias pci:* hang\n"))
		require.NoError(t, err)
		f := &fakeSys{t: t, root: t.TempDir()}
		f.device("d0", "pci:v1")
		release := make(chan struct{})
		defer close(release)
		calls := 0
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		defer cancel()
		c := &Coldplug{Sys: f.root, Aliases: aliases, Settle: 10 * time.Millisecond,
			Loader:     loaderFunc(func(string) error { <-release; return nil }),
			Foreground: func() { calls++ }}
		res := c.Run(ctx)
		assert.Equal(t, 1, calls)
		assert.Empty(t, res.Loaded)
	})
	t.Run("nothing to load", func(t *testing.T) {
		f := &fakeSys{t: t, root: t.TempDir()}
		f.device("d0", "pci:v1")
		calls := 0
		c := &Coldplug{Sys: f.root, Aliases: &AliasTable{}, Loader: f, Foreground: func() { calls++ }}
		res := c.Run(context.Background())
		assert.Equal(t, 1, calls)
		assert.Equal(t, []string{"pci:v1"}, res.Unmatched)
	})
}

// Rescans skip devices already handled and resolve sysfs's relative bus
// links with one readlink.
func TestScanModaliasesSkipsHandled(t *testing.T) {
	root := t.TempDir()
	mk := func(dev, alias string) {
		p := filepath.Join(root, "devices", dev)
		require.NoError(t, os.MkdirAll(p, 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(p, "modalias"), []byte(alias+"\n"), 0o444))
		bus := filepath.Join(root, "bus", "pci", "devices")
		require.NoError(t, os.MkdirAll(bus, 0o755))
		require.NoError(t, os.Symlink(filepath.Join("..", "..", "..", "devices", dev), filepath.Join(bus, filepath.Base(dev))))
	}
	mk("pci0000:00/0000:00:01.0", "pci:a")
	mk("pci0000:00/0000:00:02.0", "pci:b")
	devs, err := scanModaliases(root, nil)
	require.NoError(t, err)
	require.Len(t, devs, 2)
	assert.Equal(t, filepath.Join(root, "devices", "pci0000:00/0000:00:01.0"), devs[0].Path)
	devs, err = scanModaliases(root, func(p string) bool { return strings.HasSuffix(p, "01.0") })
	require.NoError(t, err)
	require.Len(t, devs, 1)
	assert.Equal(t, "pci:b", devs[0].Modalias)
}
