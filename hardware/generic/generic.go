// Package generic is the GenericManager: the default clean and deploy steps
// (IPA's GenericHardwareManager equivalents) wired to disk discovery, erase,
// software RAID and image writing. More specific managers can override any
// step by name and fall back here with hardware.ErrNotSupported.
package generic

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/hardware/burnin"
	"github.com/anvil-metal/anvil/hardware/disk"
	"github.com/anvil-metal/anvil/hardware/erase"
	"github.com/anvil-metal/anvil/hardware/health"
	"github.com/anvil-metal/anvil/hardware/imagewrite"
	"github.com/anvil-metal/anvil/hardware/raid"
	"github.com/anvil-metal/anvil/protocol"
)

// Name and Version of the manager. Bump Version whenever a step's
// behaviour or arguments change: the controller caches the catalogue by it.
const (
	Name    = "generic_hardware_manager"
	Version = "1.2"
)

// Config wires the manager to the machine. Guard is required: without it
// every destructive step fails.
type Config struct {
	Root            string            // sysfs/dev root; "/" on the node
	Guard           *hardware.Guard   // every write goes through it
	Prober          erase.Prober      // NVMe/ATA identify; defaults to erase.SysProber
	Policy          *erase.Policy     // erase defaults pushed by the controller; nil = IPA defaults
	Mdadm           string            // mdadm path; "" = look up in PATH
	HTTPClient      *http.Client      // for write_image; nil = imagewrite.NewClient (connect, TLS and header timeouts)
	ImageStall      time.Duration     // write_image fails after receiving nothing this long; 0 = imagewrite.DefaultStallTimeout
	RootDeviceHints map[string]any    // node properties.root_device, used when write_image has none
	Health          health.Reader     // SMART reads for verify_hardware; defaults to health.SysReader
	Links           health.LinkReader // NIC link modes for verify_hardware; defaults to health.SysLinkReader
	Logger          *slog.Logger
}

// Manager is the generic hardware manager.
type Manager struct {
	cfg    Config
	writer *imagewrite.Writer // one for the agent's life: it keeps its buffers
}

// New returns a Manager.
func New(cfg Config) *Manager {
	if cfg.Root == "" {
		cfg.Root = "/"
	}
	if cfg.Prober == nil {
		cfg.Prober = erase.SysProber{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Health == nil {
		cfg.Health = health.SysReader{}
	}
	if cfg.Links == nil {
		cfg.Links = health.SysLinkReader{}
	}
	if cfg.HTTPClient == nil {
		// Not http.DefaultClient: it has no timeouts, and a server that
		// never answers would hold the agent until the step timeout.
		cfg.HTTPClient = imagewrite.NewClient()
	}
	m := &Manager{cfg: cfg}
	m.writer = &imagewrite.Writer{Client: cfg.HTTPClient, Opener: m.opener(), StallTimeout: cfg.ImageStall}
	return m
}

var _ hardware.Manager = (*Manager)(nil)

// Name implements hardware.Manager.
func (m *Manager) Name() string { return Name }

// Version implements hardware.Manager.
func (m *Manager) Version() string { return Version }

// Support implements hardware.Manager: generic fits every machine.
func (m *Manager) Support(context.Context) hardware.SupportLevel { return hardware.SupportGeneric }

func policyArgsInfo() map[string]protocol.ArgInfo {
	out := map[string]protocol.ArgInfo{}
	for k, v := range erase.PolicyArgNames() {
		out[k] = protocol.ArgInfo{Description: v}
	}
	return out
}

// Steps implements hardware.Manager. Priorities are IPA's, so a default
// automated clean is erase_devices_metadata (99) then erase_devices (10).
func (m *Manager) Steps(context.Context) hardware.Catalogue {
	shared := map[string]protocol.ArgInfo{"erase_shared_filesystems": {Description: erase.SharedArgInfo}}
	burn := burnin.StepArgs()
	metadata := protocol.Step{Interface: protocol.InterfaceDeploy, Step: "erase_devices_metadata", Priority: 99, Abortable: true, ArgsInfo: shared}
	return hardware.Catalogue{
		Clean: []protocol.Step{
			metadata,
			{Interface: protocol.InterfaceDeploy, Step: "erase_devices", Priority: 10, Abortable: true, ArgsInfo: policyArgsInfo()},
			{Interface: protocol.InterfaceDeploy, Step: "erase_devices_express", Priority: 0, ArgsInfo: shared},
			verifyStep(),
			{Interface: protocol.InterfaceRAID, Step: "delete_configuration", Priority: 0},
			{Interface: protocol.InterfaceRAID, Step: "create_configuration", Priority: 0, ArgsInfo: map[string]protocol.ArgInfo{
				"target_raid_config": {Description: `Ironic target_raid_config: {"logical_disks": [{"size_gb": N|"MAX", "raid_level": "0|1|1+0", "controller": "software", "physical_disks": [...]}]}`, Required: true},
			}},
			// Burn-in: manual cleaning only (priority 0), as Ironic's.
			{Interface: protocol.InterfaceDeploy, Step: "burnin_cpu", Priority: 0, Abortable: true, ArgsInfo: burn["burnin_cpu"]},
			{Interface: protocol.InterfaceDeploy, Step: "burnin_memory", Priority: 0, Abortable: true, ArgsInfo: burn["burnin_memory"]},
			{Interface: protocol.InterfaceDeploy, Step: "burnin_disk", Priority: 0, Abortable: true, ArgsInfo: burn["burnin_disk"]},
			{Interface: protocol.InterfaceDeploy, Step: "burnin_network", Priority: 0, Abortable: true, ArgsInfo: burn["burnin_network"]},
		},
		Deploy: []protocol.Step{
			{Interface: protocol.InterfaceDeploy, Step: "erase_devices_metadata", Priority: 0, Abortable: true, ArgsInfo: shared},
			{Interface: protocol.InterfaceDeploy, Step: "write_image", Priority: 0, ArgsInfo: map[string]protocol.ArgInfo{
				"image_url":             {Description: "HTTP(S) URL of the image", Required: true},
				"image_checksum":        {Description: "sha256:<hex> or sha512:<hex> of the image as downloaded", Required: true},
				"image_disk_format":     {Description: "raw, qcow2, gzip, zstd or auto (default: detected from the image's first bytes)"},
				"root_device":           {Description: "root device hints (size, model, serial, wwn, name, rotational, vendor, by_path)"},
				protocol.ConfigDriveArg: {Description: "configdrive written after the image, into its config-2 partition or a new one at the end of the disk (at most 64 MiB): a base64 gzipped ISO9660 image or an HTTP(S) URL of one"},
			}},
			verifyStep(),
		},
	}
}

// destructive reports whether a step writes to disks; those refuse to
// start unless the guard can allow something.
func destructive(step string) bool {
	switch step {
	case "erase_devices", "erase_devices_metadata", "erase_devices_express",
		"delete_configuration", "create_configuration", "write_image",
		"burnin_disk":
		return true
	}
	return false
}

// Run implements hardware.Manager.
func (m *Manager) Run(ctx context.Context, kind hardware.Kind, step protocol.Step, args map[string]any, progress hardware.ProgressFunc) (any, error) {
	log := m.cfg.Logger.With("step", step.Step, "kind", string(kind))
	log.InfoContext(ctx, "running step")
	if destructive(step.Step) {
		if err := m.cfg.Guard.Ready(); err != nil {
			return nil, &protocol.Error{Type: protocol.ErrTypeProtectedDevice, Code: 403, Message: err.Error()}
		}
	}
	switch step.Step {
	case "erase_devices":
		return m.eraseDevices(ctx, args, progress)
	case "erase_devices_metadata":
		return m.eraseMetadata(ctx, args, progress)
	case "erase_devices_express":
		return m.eraseExpress(ctx, args, progress)
	case "delete_configuration":
		return m.raid().DeleteConfiguration(ctx, progress)
	case "create_configuration":
		cfg, err := raid.ParseTargetConfig(args["target_raid_config"])
		if err != nil {
			return nil, &protocol.Error{Type: protocol.ErrTypeInvalidArgs, Code: 400, Message: err.Error()}
		}
		return m.raid().CreateConfiguration(ctx, cfg, progress)
	case "write_image":
		return m.writeImage(ctx, args, progress)
	case "verify_hardware":
		return m.verifyHardware(ctx, args, progress)
	case "burnin_cpu", "burnin_memory", "burnin_disk", "burnin_network":
		return m.burnin(ctx, step.Step, args, progress)
	}
	return nil, fmt.Errorf("%s: %w", step.Step, hardware.ErrNotSupported)
}

func (m *Manager) opener() erase.Opener {
	if m.cfg.Guard == nil {
		// A nil *Guard refuses everything with a clear error.
		return (*hardware.Guard)(nil)
	}
	return m.cfg.Guard
}

func (m *Manager) raid() *raid.Manager {
	return &raid.Manager{Mdadm: m.cfg.Mdadm, Root: m.cfg.Root, Opener: m.opener()}
}

func (m *Manager) policy(args map[string]any) (erase.Policy, error) {
	base := erase.DefaultPolicy()
	if m.cfg.Policy != nil {
		base = *m.cfg.Policy
	}
	p, err := base.WithArgs(args)
	if err != nil {
		return p, &protocol.Error{Type: protocol.ErrTypeInvalidArgs, Code: 400, Message: err.Error()}
	}
	return p, nil
}

// eraseTarget is what every erase step starts from: the policy its
// arguments make and the disks there are now.
func (m *Manager) eraseTarget(ctx context.Context, args map[string]any) (erase.Policy, []disk.Disk, error) {
	pol, err := m.policy(args)
	if err != nil {
		return pol, nil, err
	}
	disks, err := m.disks(ctx)
	return pol, disks, err
}

// shared is the shared-storage filesystem check of the metadata wipes
// (erase_devices plans it per device instead).
func (m *Manager) shared(pol erase.Policy) erase.SharedCheck {
	return erase.SharedCheck{Prober: m.cfg.Prober, Allow: pol.EraseSharedFilesystems}
}

func (m *Manager) disks(ctx context.Context) ([]disk.Disk, error) {
	l, err := disk.Discover(ctx, m.cfg.Root)
	if err != nil {
		return nil, &protocol.Error{Type: protocol.ErrTypeBlockDeviceErase, Code: 500, Message: err.Error()}
	}
	return l.Disks, nil
}

// EraseResult is the result of erase_devices: the plan per device (inside
// each device result), the method used and its verification.
type EraseResult = erase.Result

func (m *Manager) eraseDevices(ctx context.Context, args map[string]any, progress hardware.ProgressFunc) (any, error) {
	pol, disks, err := m.eraseTarget(ctx, args)
	if err != nil {
		return nil, err
	}
	plans := erase.Plan(ctx, disks, pol, m.cfg.Prober, m.opener())
	e := &erase.Eraser{Opener: m.opener(), Prober: m.cfg.Prober}
	return e.Erase(ctx, plans, pol, progress)
}

func (m *Manager) eraseMetadata(ctx context.Context, args map[string]any, progress hardware.ProgressFunc) (any, error) {
	pol, disks, err := m.eraseTarget(ctx, args)
	if err != nil {
		return nil, err
	}
	return erase.EraseMetadata(ctx, disks, m.opener(), erase.MetadataOptions{Shared: m.shared(pol), SkipRemovable: pol.SkipRemovable}, progress)
}

// ExpressResult is the result of erase_devices_express.
type ExpressResult struct {
	NVMe     *erase.Result         `json:"nvme,omitempty"`
	Metadata *erase.MetadataResult `json:"metadata,omitempty"`
}

// eraseExpress: NVMe devices that support Format get a secure format; every
// other device, and any NVMe whose format failed, gets a metadata wipe
// (IPA's erase_devices_express).
func (m *Manager) eraseExpress(ctx context.Context, args map[string]any, progress hardware.ProgressFunc) (any, error) {
	pol, disks, err := m.eraseTarget(ctx, args)
	if err != nil {
		return nil, err
	}
	pol.EnableATASecureErase, pol.ContinueIfSecureEraseFailed = false, false
	var res ExpressResult
	var nvmePlans []erase.DevicePlan
	formatted := map[string]bool{}
	for _, p := range erase.Plan(ctx, disks, pol, m.cfg.Prober, m.opener()) {
		if p.Action == erase.ActionErase && len(p.Methods) > 0 && p.NVMe != nil {
			nvmePlans = append(nvmePlans, p)
		}
	}
	if len(nvmePlans) > 0 {
		r, _ := (&erase.Eraser{Opener: m.opener(), Prober: m.cfg.Prober}).Erase(ctx, nvmePlans, pol, progress)
		res.NVMe = &r
		for _, d := range r.Devices {
			if d.Status == erase.StatusErased {
				formatted[d.Plan.Device] = true
			}
		}
	}
	var rest []disk.Disk
	for _, d := range disks {
		if !formatted[d.Path] {
			rest = append(rest, d)
		}
	}
	mr, err := erase.EraseMetadata(ctx, rest, m.opener(), erase.MetadataOptions{Shared: m.shared(pol), SkipRemovable: pol.SkipRemovable}, progress)
	res.Metadata = &mr
	return res, err
}

// WriteImageResult is the result of write_image.
type WriteImageResult struct {
	RootDevice disk.Disk         `json:"root_device"`
	Image      imagewrite.Result `json:"image"`
	// ConfigDrive is where the configdrive went, when one was given.
	ConfigDrive *imagewrite.ConfigDriveResult `json:"configdrive,omitempty"`
}

func (m *Manager) writeImage(ctx context.Context, args map[string]any, progress hardware.ProgressFunc) (any, error) {
	str := func(k string) string { s, _ := args[k].(string); return s }
	hints := m.cfg.RootDeviceHints
	if h, ok := args["root_device"]; ok {
		hm, ok := h.(map[string]any)
		if !ok {
			return nil, &protocol.Error{Type: protocol.ErrTypeInvalidArgs, Code: 400, Message: fmt.Sprintf("root_device must be an object of hints, got %T", h)}
		}
		hints = hm
	}
	disks, err := m.disks(ctx)
	if err != nil {
		return nil, err
	}
	root, err := disk.SelectRootDevice(disks, hints)
	if err != nil {
		typ := protocol.ErrTypeImageWrite
		if !errors.Is(err, disk.ErrNoMatch) {
			typ = protocol.ErrTypeInvalidArgs
		}
		return nil, &protocol.Error{Type: typ, Code: 400, Message: err.Error()}
	}
	cd, isStr := args[protocol.ConfigDriveArg].(string)
	if v, ok := args[protocol.ConfigDriveArg]; ok && v != nil && !isStr {
		return nil, &protocol.Error{Type: protocol.ErrTypeInvalidArgs, Code: 400, Message: fmt.Sprintf("configdrive must be a base64 gzipped ISO or a URL, got %T (the controller builds an object into an ISO)", v)}
	}
	img, err := m.writer.Write(ctx, imagewrite.Request{URL: str("image_url"), Checksum: str("image_checksum"), Format: str("image_disk_format"), Device: root.Path}, progress)
	res := WriteImageResult{RootDevice: root, Image: img}
	if err != nil || cd == "" {
		return res, err
	}
	// After the image, as ironic-python-agent does: the configdrive's
	// partition is found or made in the image's partition table.
	cdr, err := m.writer.WriteConfigDrive(ctx, root.Path, cd, progress)
	res.ConfigDrive = &cdr
	if err != nil {
		return res, err
	}
	return res, nil
}
