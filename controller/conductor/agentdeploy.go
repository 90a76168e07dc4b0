package conductor

// The direct deploy interface (Ironic's AgentDeploy), which the controller
// implements itself: its steps boot the ramdisk, write the image in band,
// make the disk boot, leave the ramdisk and power the instance on.

import (
	"context"
	"fmt"
	"strings"

	"github.com/anvil-metal/anvil/controller/configdrive"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/protocol"
)

// The direct deploy interface's steps (Ironic's AgentDeploy): boot the
// ramdisk, write the image in-band, make the disk boot, power the instance.
var agentDeploySteps = []protocol.Step{
	{Interface: protocol.InterfaceDeploy, Step: "deploy", Priority: 100},
	// abortable: an anvil extension (abort in wait call-back); the agent
	// stops the write between chunks and zeroes the disk's first MiB.
	{Interface: protocol.InterfaceDeploy, Step: "write_image", Priority: 80, Abortable: true},
	{Interface: protocol.InterfaceDeploy, Step: "prepare_instance_boot", Priority: 60},
	{Interface: protocol.InterfaceDeploy, Step: "tear_down_agent", Priority: 40},
	{Interface: protocol.InterfaceDeploy, Step: "boot_instance", Priority: 20},
}

func isAgentDeployStep(key string) bool {
	for _, s := range agentDeploySteps {
		if s.Key() == key {
			return true
		}
	}
	return false
}

// directDeployStep runs a step of the direct deploy interface.
func (c *agents) directDeployStep(ctx context.Context, n *store.Node, d Driver, step protocol.Step) (StepStatus, error) {
	switch step.Step {
	case "deploy":
		if aw := n.Operation.Agent.Await; aw != nil && aw.Step == step.Key() {
			return StepWait, nil // already rebooted for this step (resumed after a restart)
		}
		if n.Operation.Agent.Booted {
			return StepDone, nil // on the running agent (fast track), resumed after a restart
		}
		// A configdrive that cannot be used fails now, not after the
		// ramdisk's boot.
		if err := configDriveArg(n, map[string]any{}); err != nil {
			return StepDone, err
		}
		if ok, err := c.startOnRunningAgent(ctx, n, "deploy", func(m *store.Node) { agentReady(m, c.now(), pathFastTrack) }); ok || err != nil {
			return StepDone, err
		}
		aw, err := c.bootRamdisk(ctx, n, d, "boot", step.Key())
		if err != nil {
			return StepDone, err
		}
		_, err = store.MutateNode(ctx, c.st, n.UUID, func(m *store.Node) error {
			awaitBoot(m, aw)
			m.PowerState = strp(PowerOn) // our own reboot: not a drift for power sync
			return nil
		})
		return StepWait, err
	case "write_image":
		args, err := imageArgs(n, step.Args)
		if err != nil {
			return StepDone, err
		}
		if err := configDriveArg(n, args); err != nil {
			return StepDone, err
		}
		s := protocol.Step{Interface: protocol.InterfaceDeploy, Step: "write_image", Args: args}
		return c.inbandStep(ctx, n, "deploy", s)
	case "prepare_instance_boot":
		return StepDone, d.SetBootDevice(ctx, n, "disk", true)
	case "tear_down_agent":
		c.ejectMedia(ctx, n, d, "deploy: leaving the ramdisk", true)
		ps, err := powerOff(ctx, d, n, offLeaveOn) // boot_instance reboots then
		if err != nil {
			return StepDone, err
		}
		_, err = store.MutateNode(ctx, c.st, n.UUID, func(m *store.Node) error {
			wipeAgent(m)
			m.PowerState = strp(ps)
			return nil
		})
		return StepDone, err
	case "boot_instance":
		return StepDone, d.SetPower(ctx, n, bootTarget(n))
	}
	return StepDone, fmt.Errorf("unknown deploy step %s", step.Key())
}

// imageArgs builds the agent's write_image arguments from instance_info
// (Ironic's image_source, image_checksum or image_os_hash_*, image_disk_format)
// and the root device hints: instance_info.root_device, else
// properties.root_device (Ironic's get_root_device_for_deploy; metal3's
// baremetal-operator sets them in instance_info).
func imageArgs(n *store.Node, override map[string]any) (map[string]any, error) {
	ii := n.InstanceInfo
	url, _ := ii["image_source"].(string)
	if url == "" {
		url, _ = ii["image_url"].(string)
	}
	if url == "" {
		return nil, fmt.Errorf("instance_info.image_source is not set: set it to the HTTP(S) URL of a whole-disk image")
	}
	sum, _ := ii["image_checksum"].(string)
	if algo, _ := ii["image_os_hash_algo"].(string); algo != "" {
		if v, _ := ii["image_os_hash_value"].(string); v != "" {
			sum = algo + ":" + v
		}
	}
	if sum == "" {
		return nil, fmt.Errorf("instance_info.image_checksum is not set: give sha256:<hex> or sha512:<hex> (or image_os_hash_algo and image_os_hash_value)")
	}
	if !strings.Contains(sum, ":") {
		return nil, fmt.Errorf("instance_info.image_checksum %q needs its algorithm, e.g. sha256:<hex> (md5 is not accepted)", sum)
	}
	args := map[string]any{"image_url": url, "image_checksum": sum}
	if f, _ := ii["image_disk_format"].(string); f != "" {
		args["image_disk_format"] = f
	}
	if hints, ok := ii["root_device"].(map[string]any); ok && len(hints) > 0 {
		args["root_device"] = hints
	} else if hints, ok := n.Properties["root_device"].(map[string]any); ok {
		args["root_device"] = hints
	}
	for k, v := range override {
		args[k] = v
	}
	return args, nil
}

// configDriveArg adds instance_info.configdrive to write_image's
// arguments in the form the agent writes (Ironic's
// get_configdrive_image: an object is built into an ISO here, a URL is
// passed on for the agent to download). A configdrive that cannot be
// used, or an agent that would silently not write it, fails the step.
func configDriveArg(n *store.Node, args map[string]any) error {
	name := ""
	if n.Name != nil {
		name = *n.Name
	}
	cd, err := configdrive.ForAgent(n.UUID, name, n.InstanceInfo["configdrive"])
	if err != nil {
		return fmt.Errorf("instance_info.configdrive: %w", err)
	}
	if cd == "" {
		return nil
	}
	if s := n.Operation.Agent.Steps; s != nil {
		for _, st := range s.Deploy {
			if st.Step == "write_image" {
				if _, ok := st.ArgsInfo[protocol.ConfigDriveArg]; !ok {
					return fmt.Errorf("a configdrive was given but the agent (version %s) does not write one: rebuild the ramdisk with this release's agent", s.AgentVersion)
				}
			}
		}
	}
	args[protocol.ConfigDriveArg] = cd
	return nil
}
