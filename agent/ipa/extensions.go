package ipa

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"time"

	"github.com/anvil-metal/anvil/hardware"
	"github.com/anvil-metal/anvil/protocol"
)

// Hardware is what the adapter needs of the step dispatcher
// (*hardware.Dispatcher): the same managers anvil's own protocol drives.
type Hardware interface {
	StepsByManager(ctx context.Context, kind hardware.Kind) map[string][]protocol.Step
	Versions() map[string]string
	Run(ctx context.Context, kind hardware.Kind, name string, args map[string]any, progress hardware.ProgressFunc) (any, error)
}

// Power switches the machine off or restarts it (agent.SystemPower).
type Power interface {
	PowerOff(ctx context.Context) error
	Reboot(ctx context.Context) error
}

// LogCollector returns the agent's logs as a gzip-compressed tar
// (agent.SystemLogs).
type LogCollector interface {
	Collect(ctx context.Context) ([]byte, error)
}

// Extensions maps IPA's commands onto the hardware managers and the
// machine. Nil Power or Logs fail their commands with a clear error.
type Extensions struct {
	Hardware Hardware
	Power    Power
	Logs     LogCollector
	Log      *slog.Logger
	// Sync flushes filesystem buffers (standby.sync); default syscall.Sync.
	Sync func()
	// Lockdown is called after system.lockdown answered.
	Lockdown func()
	// PowerDelay is how long power_off/run_image wait before acting, so
	// the answer reaches Ironic first; default 2 s.
	PowerDelay time.Duration

	mu   sync.Mutex
	node map[string]any // the latest node Ironic sent (IPA's cache_node)
}

// SetNode caches the node Ironic described (lookup, or any command's node
// parameter): its properties carry the root device hints.
func (x *Extensions) SetNode(node map[string]any) {
	if node == nil {
		return
	}
	x.mu.Lock()
	x.node = node
	x.mu.Unlock()
}

func (x *Extensions) cachedNode() map[string]any {
	x.mu.Lock()
	defer x.mu.Unlock()
	return x.node
}

// handlers is the command table: every command Ironic 21.4 sends for
// cleaning and direct deploy of whole-disk images.
func (x *Extensions) handlers() map[string]handler {
	return map[string]handler{
		"clean.get_clean_steps":       x.getSteps(hardware.KindClean),
		"clean.execute_clean_step":    x.executeStep(hardware.KindClean),
		"deploy.get_deploy_steps":     x.getSteps(hardware.KindDeploy),
		"deploy.execute_deploy_step":  x.executeStep(hardware.KindDeploy),
		"standby.prepare_image":       x.writeImageCommand("prepare_image"),
		"standby.cache_image":         x.writeImageCommand("cache_image"),
		"standby.get_partition_uuids": {run: x.partitionUUIDs},
		"standby.sync":                {run: x.sync},
		"standby.power_off":           x.power("power_off"),
		"standby.run_image":           x.power("run_image"),
		"image.install_bootloader":    {async: true, run: x.installBootloader},
		"log.collect_system_logs":     {run: x.collectLogs},
		"system.lockdown":             {run: x.lockdown},
	}
}

func (x *Extensions) getSteps(kind hardware.Kind) handler {
	return handler{run: func(ctx context.Context, params map[string]any) (any, error) {
		x.SetNode(mapParam(params, "node"))
		return map[string]any{
			string(kind) + "_steps":    x.Hardware.StepsByManager(ctx, kind),
			"hardware_manager_version": x.Hardware.Versions(),
		}, nil
	}}
}

func mapParam(params map[string]any, key string) map[string]any {
	m, _ := params[key].(map[string]any)
	return m
}

// versionMismatch is IPA's VersionMismatch: the managers changed since
// Ironic cached the steps. The command gets CLEAN_VERSION_MISMATCH.
type versionMismatch struct{ have, want any }

func (e *versionMismatch) Error() string {
	return fmt.Sprintf("Current versions: %v, versions used by ironic: %v", e.have, e.want)
}

// checkVersions compares the hardware_manager_version Ironic cached with
// ours; none sent means the first run, as in IPA.
func (x *Extensions) checkVersions(sent any) error {
	if sent == nil {
		return nil
	}
	have := x.Hardware.Versions()
	want, ok := sent.(map[string]any)
	same := ok && len(want) == len(have)
	for k, v := range want {
		if s, isStr := v.(string); !isStr || have[k] != s {
			same = false
		}
	}
	if !same {
		return &versionMismatch{have: have, want: sent}
	}
	return nil
}

func validateStep(kind hardware.Kind) func(map[string]any) error {
	return func(params map[string]any) error {
		step, ok := params["step"].(map[string]any)
		if !ok {
			return errBadParams("%s step must be an object", kind)
		}
		if name, _ := step["step"].(string); name == "" {
			return errBadParams("Malformed %s_step, no \"step\" key", kind)
		}
		if a, ok := step["args"]; ok && a != nil {
			if _, isMap := a.(map[string]any); !isMap {
				return errBadParams("%s step args must be an object", kind)
			}
		}
		return nil
	}
}

func (x *Extensions) executeStep(kind hardware.Kind) handler {
	versionKey := string(kind) + "_version"
	return handler{async: true, validate: validateStep(kind), run: func(ctx context.Context, params map[string]any) (any, error) {
		node := mapParam(params, "node")
		x.SetNode(node)
		if err := x.checkVersions(params[versionKey]); err != nil {
			return nil, err
		}
		step := mapParam(params, "step")
		name := step["step"].(string)
		// IPA passes the command's other keyword arguments and the step's
		// args to the step.
		args := map[string]any{}
		for k, v := range params {
			switch k {
			case "step", "node", "ports", versionKey:
			default:
				args[k] = v
			}
		}
		maps.Copy(args, mapParam(step, "args"))
		if kind == hardware.KindDeploy && name == "write_image" {
			var err error
			if args, err = x.writeImageArgs(args, node); err != nil {
				return nil, err
			}
		}
		args = x.nodeDefaults(ctx, kind, name, args, node)
		if name == "verify_hardware" {
			// It compares the machine with the node's properties, which
			// Ironic sends in the command's node. Ironic keeps the
			// inspection apart: that part of the check needs anvil.
			if _, given := args["properties"]; !given {
				if p := mapParam(node, "properties"); len(p) > 0 {
					args["properties"] = p
				}
			}
		}
		res, err := x.Hardware.Run(ctx, kind, name, nilIfEmpty(args), nil)
		if err != nil {
			return nil, err
		}
		return map[string]any{string(kind) + "_result": res, string(kind) + "_step": step}, nil
	}}
}

func nilIfEmpty(m map[string]any) map[string]any {
	if len(m) == 0 {
		return nil
	}
	return m
}

// nodeDefaults fills the arguments a step declares from the node's
// driver_internal_info, where Ironic puts the erase settings IPA reads
// (agent_erase_devices_iterations, agent_erase_devices_zeroize, ...), and
// the burn-in options IPA reads from driver_info (agent_burnin_*: only
// those, the rest of driver_info holds BMC credentials). Arguments the
// step was given win.
func (x *Extensions) nodeDefaults(ctx context.Context, kind hardware.Kind, name string, args, node map[string]any) map[string]any {
	dii := mapParam(node, "driver_internal_info")
	di := mapParam(node, "driver_info")
	if len(dii) == 0 && len(di) == 0 {
		return args
	}
	for _, steps := range x.Hardware.StepsByManager(ctx, kind) {
		for _, s := range steps {
			if s.Step != name {
				continue
			}
			for arg := range s.ArgsInfo {
				if _, given := args[arg]; given {
					continue
				}
				if v, ok := dii[arg]; ok && v != nil {
					args[arg] = v
				} else if v, ok := di[arg]; ok && v != nil && strings.HasPrefix(arg, "agent_burnin_") {
					args[arg] = v
				}
			}
		}
	}
	return args
}

// writeImageArgs turns Ironic's write_image deploy step arguments
// (image_info, configdrive) into the generic manager's.
func (x *Extensions) writeImageArgs(args, node map[string]any) (map[string]any, error) {
	info, ok := args["image_info"].(map[string]any)
	if !ok {
		return nil, &RESTError{Type: "InvalidCommandParamsError", Code: 400, Message: "Invalid command parameters",
			Details: "write_image needs an image_info object"}
	}
	if err := validateImageInfo(info); err != nil {
		return nil, err
	}
	out, err := imageArgs(info, args["configdrive"])
	if err != nil {
		return nil, err
	}
	if hints := rootDeviceHints(node, x.cachedNode()); hints != nil {
		out["root_device"] = hints
	}
	return out, nil
}

// rootDeviceHints are properties.root_device of the node in the command,
// else of the cached one.
func rootDeviceHints(nodes ...map[string]any) map[string]any {
	for _, n := range nodes {
		if h, ok := mapParam(n, "properties")["root_device"].(map[string]any); ok && len(h) > 0 {
			return h
		}
	}
	return nil
}

// writeImageCommand is standby.prepare_image and standby.cache_image: both
// write the whole-disk image to the root device in IPA (cache_image
// without the configdrive).
func (x *Extensions) writeImageCommand(method string) handler {
	return handler{
		async: true,
		validate: func(params map[string]any) error {
			info, _ := params["image_info"].(map[string]any)
			return validateImageInfo(info)
		},
		run: func(ctx context.Context, params map[string]any) (any, error) {
			info := mapParam(params, "image_info")
			cd := params["configdrive"]
			if method == "prepare_image" && cd == nil {
				cd = info["configdrive"] // IPA's backward compatibility
			}
			args, err := imageArgs(info, cd)
			if err != nil {
				return nil, err
			}
			if hints := rootDeviceHints(x.cachedNode()); hints != nil {
				args["root_device"] = hints
			}
			res, err := x.Hardware.Run(ctx, hardware.KindDeploy, "write_image", args, nil)
			if err != nil {
				return nil, err
			}
			dev := writtenDevice(res)
			if method == "cache_image" {
				return map[string]any{"result": fmt.Sprintf("cache_image: image (%v) cached to device %s ", info["id"], dev)}, nil
			}
			return map[string]any{"result": fmt.Sprintf("prepare_image: image (%v) written to device %s root_uuid=None", info["id"], dev)}, nil
		},
	}
}

// writtenDevice reads the device path out of write_image's result.
func writtenDevice(res any) string {
	b, err := json.Marshal(res)
	if err != nil {
		return "?"
	}
	var r struct {
		RootDevice struct {
			Path string `json:"path"`
		} `json:"root_device"`
	}
	if json.Unmarshal(b, &r) != nil || r.RootDevice.Path == "" {
		return "?"
	}
	return r.RootDevice.Path
}

// partitionUUIDs is standby.get_partition_uuids: whole-disk images (the
// only kind we write) have none, which IPA reports as {}.
func (x *Extensions) partitionUUIDs(context.Context, map[string]any) (any, error) {
	return map[string]any{}, nil
}

func (x *Extensions) sync(context.Context, map[string]any) (any, error) {
	if x.Sync != nil {
		x.Sync()
	}
	return nil, nil
}

// power is standby.power_off and standby.run_image (a reboot). IPA runs
// the shutdown inside the command; we answer first and act after
// PowerDelay, so Ironic's request does not fail with a dropped connection.
func (x *Extensions) power(method string) handler {
	return handler{async: true, run: func(ctx context.Context, _ map[string]any) (any, error) {
		if x.Power == nil {
			return nil, &RESTError{Type: "SystemRebootError", Code: 500, Message: "Command execution failed",
				Details: "power control is disabled in this agent (it runs outside its ramdisk)"}
		}
		delay := x.PowerDelay
		if delay <= 0 {
			delay = 2 * time.Second
		}
		go func() {
			select {
			case <-ctx.Done():
				return
			case <-time.After(delay):
			}
			if x.Sync != nil {
				x.Sync()
			}
			var err error
			if method == "power_off" {
				err = x.Power.PowerOff(ctx)
			} else {
				err = x.Power.Reboot(ctx)
			}
			if err != nil {
				x.Log.Error("ipa: power action failed", "command", method, "err", err)
			}
		}()
		return nil, nil
	}}
}

// installBootloader is IPA's image.install_bootloader for whole-disk
// images: they carry their own bootloader, and we write nothing else.
func (x *Extensions) installBootloader(_ context.Context, params map[string]any) (any, error) {
	x.Log.Info("ipa: install_bootloader is a no-op for whole-disk images", "target_boot_mode", params["target_boot_mode"])
	return nil, nil
}

func (x *Extensions) collectLogs(ctx context.Context, _ map[string]any) (any, error) {
	if x.Logs == nil {
		return nil, errors.New("log collection is not configured in this agent")
	}
	tgz, err := x.Logs.Collect(ctx)
	if err != nil {
		return nil, fmt.Errorf("collect logs: %w", err)
	}
	return map[string]any{"system_logs": base64.StdEncoding.EncodeToString(tgz)}, nil
}

func (x *Extensions) lockdown(context.Context, map[string]any) (any, error) {
	if x.Lockdown != nil {
		x.Lockdown()
	}
	return nil, nil
}

// toRESTError gives any command error IPA's serialised shape. Ironic puts
// details (else message) into last_error, so details carry our text.
func toRESTError(err error) *RESTError {
	var re *RESTError
	if errors.As(err, &re) {
		return re
	}
	var vm *versionMismatch
	if errors.As(err, &vm) {
		return &RESTError{Type: "VersionMismatch", Code: 409,
			Message: "Hardware managers version mismatch, reload agent with correct version", Details: vm.Error()}
	}
	var f *fault
	if errors.As(err, &f) {
		return &RESTError{Type: "InvalidCommandParamsError", Code: f.status, Message: "Invalid command parameters", Details: f.msg}
	}
	var pe *protocol.Error
	if errors.As(err, &pe) {
		details := pe.Message
		if pe.Details != "" {
			details += " (" + pe.Details + ")"
		}
		return &RESTError{Type: pe.Type, Code: pe.Code, Message: "Command execution failed", Details: details}
	}
	return &RESTError{Type: "CommandExecutionError", Code: 500, Message: "Command execution failed", Details: err.Error()}
}
