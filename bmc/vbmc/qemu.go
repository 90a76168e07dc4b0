package vbmc

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// QEMUConfig describes one QEMU virtual node. Paths that are relative are
// relative to StateDir.
type QEMUConfig struct {
	// Binary defaults to qemu-system-x86_64.
	Binary string `json:"binary,omitempty"`
	// StateDir holds the QMP socket, qemu.log (QEMU's stdout/stderr) and
	// serial.log (the guest console). Required.
	StateDir  string `json:"state_dir"`
	MemoryMiB int    `json:"memory_mib,omitempty"` // default 512
	CPUs      int    `json:"cpus,omitempty"`       // default 1
	// Disks are raw files, created sparse when missing, each on the
	// storage controller its Bus names (NVMe by default).
	Disks []QEMUDisk `json:"disks,omitempty"`
	// NIC is a virtio-net NIC on QEMU user networking (slirp) with
	// restrict=on, so the guest reaches only what is forwarded.
	NIC *QEMUNIC `json:"nic,omitempty"`
	// Kernel, Initrd and Append enable direct kernel boot: a "pxe" boot then
	// starts this kernel instead of the NIC's iPXE ROM. This stands in for
	// the network boot in ramdisk tests and is seconds faster.
	Kernel string `json:"kernel,omitempty"`
	Initrd string `json:"initrd,omitempty"`
	Append string `json:"append,omitempty"`
	// NoRNG drops virtio-rng-pci. Without an entropy source a TCG guest's
	// crng may never initialise and DHCP clients hang.
	NoRNG bool `json:"no_rng,omitempty"`
	// ShutdownTimeoutSeconds: after a graceful shutdown request (ACPI), the
	// power is forced off after this long. Default 60.
	ShutdownTimeoutSeconds float64 `json:"shutdown_timeout_seconds,omitempty"`
	// VirtualMedia adds a CD drive the BMC's Redfish VirtualMedia fills
	// (InsertMedia fetches the image into StateDir).
	VirtualMedia bool `json:"virtual_media,omitempty"`
	// SerialListen, when set, is a loopback TCP address ("127.0.0.1:9002")
	// serving the guest's serial port for ipmi_sim's Serial-over-LAN
	// (lan.conf: sol "tcp:127.0.0.1:9002" 115200). QEMU's serial becomes a
	// unix socket (serial.sock) that a SerialBridge re-dials across power
	// cycles; serial.log still records everything.
	SerialListen string `json:"serial_listen,omitempty"`
	// ExtraArgs are appended to the command line.
	ExtraArgs []string `json:"extra_args,omitempty"`
}

// QEMUDisk is one disk.
type QEMUDisk struct {
	Path    string `json:"path"`
	SizeMiB int64  `json:"size_mib,omitempty"` // used when creating the file; default 1024
	Serial  string `json:"serial,omitempty"`   // default ANVIL-DISK-<index>
	// Bus is the storage controller the disk hangs off, one of QEMUBuses:
	// "nvme" (the default; a controller per disk) or a host adapter that
	// the node's disks of that bus share: "ahci" (SATA), "megasas-gen2"
	// (MegaRAID SAS), "lsi53c895a" (LSI SCSI), "mptsas1068" (LSI SAS),
	// "virtio-scsi". Servers differ most in this, and a ramdisk without the
	// adapter's driver sees none of its disks.
	Bus string `json:"bus,omitempty"`
	// Blkdebug, when set, is a QEMU blkdebug configuration file the disk
	// is opened through: its [inject-error] rules make chosen requests
	// fail, as a dying disk's do (tests of the disk burn-in).
	Blkdebug string `json:"blkdebug,omitempty"`
}

// QEMUNIC is the node's NIC.
type QEMUNIC struct {
	MAC string `json:"mac,omitempty"`
	// HostFwd entries like "tcp:127.0.0.1:19999-:9999" (host → guest).
	HostFwd []string `json:"hostfwd,omitempty"`
	// GuestFwd entries like "tcp:10.0.2.100:8080-tcp:127.0.0.1:18080".
	GuestFwd []string `json:"guestfwd,omitempty"`
	// TFTP root and BootFile for slirp's built-in PXE server.
	TFTP     string `json:"tftp,omitempty"`
	BootFile string `json:"bootfile,omitempty"`
	// MoreMACs are further NICs on the same network, as a bond's second
	// link on the same switch: a QEMU hub (-netdev hubport) joins every
	// NIC and the user network. The NICs are QEMU devices nic0, nic1...
	// (in this order, MAC first), so QMP set_link can pull a cable.
	MoreMACs []string `json:"more_macs,omitempty"`
}

// QEMU is a Backend running qemu-system-x86_64 (TCG: KVM hangs on the
// development machines) as a child process controlled over QMP. QEMU is not
// daemonized: as a child it is reaped by us, whereas a daemonized QEMU
// lingers as a zombie under a container's PID 1 and looks alive.
type QEMU struct {
	cfg QEMUConfig
	log *slog.Logger

	mu         sync.Mutex
	cmd        *exec.Cmd
	exited     chan struct{} // closed when the current process has exited
	bootedFrom string
	generation int    // increments per start, so a stale shutdown timer does nothing
	media      string // the image file in the CD drive ("": empty)

	serial *SerialBridge // nil unless cfg.SerialListen is set
}

// NewQEMU validates cfg, creates the state dir and missing disks, and
// returns a powered-off backend.
func NewQEMU(log *slog.Logger, cfg QEMUConfig) (*QEMU, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.StateDir == "" {
		return nil, errors.New("qemu: state_dir is required")
	}
	if cfg.Binary == "" {
		cfg.Binary = "qemu-system-x86_64"
	}
	if cfg.MemoryMiB <= 0 {
		cfg.MemoryMiB = 512
	}
	if cfg.CPUs <= 0 {
		cfg.CPUs = 1
	}
	if cfg.ShutdownTimeoutSeconds <= 0 {
		cfg.ShutdownTimeoutSeconds = 60
	}
	if err := os.MkdirAll(cfg.StateDir, 0o750); err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	for i := range cfg.Disks {
		d := &cfg.Disks[i]
		d.Path = cfg.abs(d.Path)
		if d.SizeMiB <= 0 {
			d.SizeMiB = 1024
		}
		if d.Serial == "" {
			d.Serial = fmt.Sprintf("ANVIL-DISK-%d", i) // QEMU's nvme device requires one
		}
		if d.Bus == "" {
			d.Bus = BusNVMe
		}
		if _, err := os.Stat(d.Path); errors.Is(err, os.ErrNotExist) {
			f, err := os.OpenFile(d.Path, os.O_CREATE|os.O_WRONLY, 0o640)
			if err != nil {
				return nil, fmt.Errorf("qemu: disk: %w", err)
			}
			err = f.Truncate(d.SizeMiB << 20) // sparse
			f.Close()
			if err != nil {
				return nil, fmt.Errorf("qemu: disk: %w", err)
			}
		}
	}
	if _, err := DiskArgs(cfg.Disks, false); err != nil {
		return nil, fmt.Errorf("qemu: %w", err)
	}
	q := &QEMU{cfg: cfg, log: log}
	if cfg.SerialListen != "" {
		b, err := NewSerialBridge(log, cfg.SerialListen, q.serialSocket())
		if err != nil {
			return nil, fmt.Errorf("qemu: %w", err)
		}
		q.serial = b
	}
	return q, nil
}

// serialSocket is QEMU's serial chardev socket when SerialListen is set.
func (q *QEMU) serialSocket() string { return filepath.Join(q.cfg.StateDir, "serial.sock") }

// SerialAddr is the TCP address serving the guest's serial port for SOL
// ("" without SerialListen); with port 0 in SerialListen, the port chosen.
func (q *QEMU) SerialAddr() string {
	if q.serial == nil {
		return ""
	}
	return q.serial.Addr()
}

func (c QEMUConfig) abs(p string) string {
	if p == "" || filepath.IsAbs(p) {
		return p
	}
	return filepath.Join(c.StateDir, p)
}

// QMPSocket is the path of the node's QMP socket.
func (q *QEMU) QMPSocket() string { return filepath.Join(q.cfg.StateDir, "qmp.sock") }

// SerialLog is the path of the guest console log.
func (q *QEMU) SerialLog() string { return filepath.Join(q.cfg.StateDir, "serial.log") }

// Args returns QEMU's command line for a boot from dev.
func (q *QEMU) Args(dev string) []string {
	c := q.cfg
	serial := "file,id=serial0,path=" + q.SerialLog() + ",append=on"
	if c.SerialListen != "" {
		serial = "socket,id=serial0,path=" + q.serialSocket() + ",server=on,wait=off,logfile=" + q.SerialLog() + ",logappend=on"
	}
	a := []string{
		"-accel", "tcg", "-machine", "pc",
		"-m", strconv.Itoa(c.MemoryMiB), "-smp", strconv.Itoa(c.CPUs),
		"-nodefaults", "-no-user-config", "-display", "none",
		"-qmp", "unix:" + q.QMPSocket() + ",server=on,wait=off",
		"-chardev", serial,
		"-serial", "chardev:serial0",
	}

	if !c.NoRNG {
		a = append(a, "-device", "virtio-rng-pci")
	}
	direct := dev == BootPXE && c.Kernel != ""
	// bootindex decides what SeaBIOS tries first; devices without one come
	// after those with one.
	nextIndex := 1
	if c.NIC != nil {
		netdev := "user,id=net0,restrict=on"
		for _, f := range c.NIC.HostFwd {
			netdev += ",hostfwd=" + f
		}
		for _, f := range c.NIC.GuestFwd {
			netdev += ",guestfwd=" + f
		}
		if c.NIC.TFTP != "" {
			netdev += ",tftp=" + c.abs(c.NIC.TFTP)
		}
		if c.NIC.BootFile != "" {
			netdev += ",bootfile=" + c.NIC.BootFile
		}
		nic := "virtio-net-pci,netdev=net0,id=nic0"
		if c.NIC.MAC != "" {
			nic += ",mac=" + c.NIC.MAC
		}
		if dev == BootPXE && !direct {
			nic += ",bootindex=" + strconv.Itoa(nextIndex)
			nextIndex++
		}
		if len(c.NIC.MoreMACs) == 0 {
			a = append(a, "-netdev", netdev, "-device", nic)
		} else {
			// The user network becomes a port of hub 0; every NIC is another.
			a = append(a, "-netdev", strings.Replace(netdev, "id=net0", "id=uplink0", 1),
				"-netdev", "hubport,id=hub0uplink,hubid=0,netdev=uplink0",
				"-netdev", "hubport,id=net0,hubid=0", "-device", nic)
			for i, mac := range c.NIC.MoreMACs {
				id := strconv.Itoa(i + 1)
				a = append(a, "-netdev", "hubport,id=net"+id+",hubid=0",
					"-device", "virtio-net-pci,netdev=net"+id+",id=nic"+id+",mac="+mac)
			}
		}
	}
	// Checked by NewQEMU.
	disks, _ := diskArgs(c.Disks, dev == BootDisk, nextIndex)
	a = append(a, disks...)
	a = append(a, q.cdArgs(dev)...)
	switch {
	case direct:
		a = append(a, "-kernel", c.abs(c.Kernel))
		if c.Initrd != "" {
			a = append(a, "-initrd", c.abs(c.Initrd))
		}
		if c.Append != "" {
			a = append(a, "-append", c.Append)
		}
	case dev == BootCDROM:
		a = append(a, "-boot", "order=d")
	case dev == BootBIOS:
		a = append(a, "-boot", "menu=on")
	}
	return append(a, c.ExtraArgs...)
}

func (q *QEMU) running() bool {
	if q.exited == nil {
		return false
	}
	select {
	case <-q.exited:
		return false
	default:
		return true
	}
}

// PowerOn implements Backend.
func (q *QEMU) PowerOn(ctx context.Context, dev string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.start(ctx, dev)
}

func (q *QEMU) start(ctx context.Context, dev string) error {
	if q.running() {
		return nil
	}
	_ = os.Remove(q.QMPSocket())
	logf, err := os.OpenFile(filepath.Join(q.cfg.StateDir, "qemu.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o640)
	if err != nil {
		return fmt.Errorf("qemu: %w", err)
	}
	args := q.Args(dev)
	// Not CommandContext: the VM outlives the request that powered it on.
	cmd := exec.Command(q.cfg.Binary, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	fmt.Fprintf(logf, "=== %s start (boot %s): %s %s\n", time.Now().Format(time.RFC3339), dev, q.cfg.Binary, strings.Join(args, " "))
	if err := cmd.Start(); err != nil {
		logf.Close()
		return fmt.Errorf("qemu: start: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		err := cmd.Wait() // reaps the child: no zombie
		fmt.Fprintf(logf, "=== %s exit: %v\n", time.Now().Format(time.RFC3339), err)
		logf.Close()
		close(exited)
	}()
	q.cmd, q.exited, q.bootedFrom = cmd, exited, dev
	q.generation++
	q.log.Info("qemu: started", "pid", cmd.Process.Pid, "boot", dev, "state_dir", q.cfg.StateDir)

	// Return quickly: chassis-control calls from ipmi_sim must finish well
	// under ipmitool's ~1 s retransmit. Only catch a QEMU that dies at once
	// (bad arguments); commands that need QMP wait for it themselves.
	select {
	case <-exited:
		return fmt.Errorf("qemu: exited during start; see %s", filepath.Join(q.cfg.StateDir, "qemu.log"))
	case <-time.After(100 * time.Millisecond):
		return nil
	}
}

// qmp runs a QMP command, waiting for the socket of a QEMU that is still
// starting. Called with q.mu held and the process running.
func (q *QEMU) qmp(ctx context.Context, command string) error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := QMP(ctx, q.QMPSocket(), command, nil)
		if err == nil {
			return nil
		}
		var opErr *net.OpError
		if !errors.As(err, &opErr) || time.Now().After(deadline) {
			return fmt.Errorf("qemu: %w", err)
		}
		// Socket not there yet: QEMU is still starting.
		select {
		case <-q.exited:
			return fmt.Errorf("qemu: exited: %w", err)
		case <-ctx.Done():
			return fmt.Errorf("qemu: %w", ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// kill stops the process: QMP quit, then SIGKILL. Called with q.mu held.
func (q *QEMU) kill() {
	if !q.running() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := q.qmp(ctx, "quit"); err != nil {
		q.log.Warn("qemu: quit failed, killing", "error", err)
		_ = q.cmd.Process.Kill()
	}
	select {
	case <-q.exited:
	case <-time.After(5 * time.Second):
		_ = q.cmd.Process.Kill()
		<-q.exited
	}
	q.log.Info("qemu: stopped", "pid", q.cmd.Process.Pid)
}

// PowerOff implements Backend.
func (q *QEMU) PowerOff(context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.kill()
	return nil
}

// Shutdown implements Backend: ACPI power button, then a forced power off
// if the guest has not gone away after ShutdownTimeoutSeconds.
func (q *QEMU) Shutdown(ctx context.Context) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.running() {
		return nil
	}
	if err := q.qmp(ctx, "system_powerdown"); err != nil {
		return err
	}
	gen, exited := q.generation, q.exited
	timeout := time.Duration(q.cfg.ShutdownTimeoutSeconds * float64(time.Second))
	go func() {
		select {
		case <-exited:
		case <-time.After(timeout):
			q.mu.Lock()
			defer q.mu.Unlock()
			if q.generation == gen && q.running() {
				q.log.Info("qemu: guest ignored ACPI shutdown; forcing off", "timeout", timeout)
				q.kill()
			}
		}
	}()
	return nil
}

// Reset implements Backend. A reset keeps the process (QMP system_reset)
// unless the boot device changed: QEMU's boot order is fixed at start, so
// then the process is restarted.
func (q *QEMU) Reset(ctx context.Context, dev string) error {
	q.mu.Lock()
	defer q.mu.Unlock()
	if !q.running() {
		return q.start(ctx, dev)
	}
	if dev != q.bootedFrom {
		q.kill()
		return q.start(ctx, dev)
	}
	if err := q.qmp(ctx, "system_reset"); err != nil {
		return err
	}
	return nil
}

// On implements Backend: the machine is on while the process runs (QEMU
// exits when the guest powers off).
func (q *QEMU) On(context.Context) (bool, error) {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.running(), nil
}

// Close implements Backend.
func (q *QEMU) Close() error {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.kill()
	if q.serial != nil {
		return q.serial.Close()
	}
	return nil
}
