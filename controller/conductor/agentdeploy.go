package conductor

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"strings"

	"github.com/google/uuid"

	"github.com/anvil-metal/anvil/controller/state"
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

// availableDeploySteps lists every deploy step the node offers.
func (c *engine) availableDeploySteps(n *store.Node, d Driver) []protocol.Step {
	if UsesAgent(n) {
		return mergeSteps(agentDeploySteps, cachedSteps(n, "deploy"))
	}
	return d.DeploySteps(n)
}

func isAgentDeployStep(key string) bool {
	for _, s := range agentDeploySteps {
		if s.Key() == key {
			return true
		}
	}
	return false
}

func isDriverStep(steps []protocol.Step, key string) bool {
	for _, s := range steps {
		if s.Key() == key {
			return true
		}
	}
	return false
}

// executeStep runs one step where it belongs: the driver (out of band), the
// direct deploy interface, or the agent (in band).
func (c *engine) executeStep(ctx context.Context, n *store.Node, d Driver, kind string, step protocol.Step) (StepStatus, error) {
	if !UsesAgent(n) {
		return d.ExecuteStep(ctx, n, kind, step)
	}
	if kind == "deploy" && isAgentDeployStep(step.Key()) {
		return c.agentDeployStep(ctx, n, d, step)
	}
	oob := d.CleanSteps(n)
	if kind == "deploy" {
		oob = d.DeploySteps(n)
	}
	if isDriverStep(oob, step.Key()) {
		return d.ExecuteStep(ctx, n, kind, step)
	}
	return c.inbandStep(ctx, n, kind, step)
}

func (c *engine) agentDeployStep(ctx context.Context, n *store.Node, d Driver, step protocol.Step) (StepStatus, error) {
	switch step.Step {
	case "deploy":
		if aw := n.Operation.Agent.Await; aw != nil && aw.Step == step.Key() {
			return StepWait, nil // already rebooted for this step (resumed after a restart)
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
		s := protocol.Step{Interface: protocol.InterfaceDeploy, Step: "write_image", Args: args}
		return c.inbandStep(ctx, n, "deploy", s)
	case "prepare_instance_boot":
		return StepDone, d.SetBootDevice(ctx, n, "disk", true)
	case "tear_down_agent":
		c.ejectMedia(ctx, n, d, "deploy: leaving the ramdisk", true)
		if err := d.SetPower(ctx, n, PowerOff); err != nil {
			return StepDone, err
		}
		_, err := store.MutateNode(ctx, c.st, n.UUID, func(m *store.Node) error {
			wipeAgent(m)
			m.PowerState = strp(PowerOff)
			return nil
		})
		return StepDone, err
	case "boot_instance":
		return StepDone, d.SetPower(ctx, n, PowerOn)
	}
	return StepDone, fmt.Errorf("unknown deploy step %s", step.Key())
}

// imageArgs builds the agent's write_image arguments from instance_info
// (Ironic's image_source, image_checksum or image_os_hash_*, image_disk_format)
// and the root device hints in properties.root_device.
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
	if hints, ok := n.Properties["root_device"].(map[string]any); ok {
		args["root_device"] = hints
	}
	for k, v := range override {
		args[k] = v
	}
	return args, nil
}

// startAgentInspection boots the ramdisk for inspection.
func (c *engine) startAgentInspection(ctx context.Context, n *store.Node, d Driver) error {
	aw, err := c.bootRamdisk(ctx, n, d, "boot", "")
	if err != nil {
		_, terr := c.transition(ctx, n.UUID, state.Inspecting, state.EvFail, func(m *store.Node) error {
			m.LastError = strp(fmt.Sprintf("Failed to inspect node %s: %v", n.UUID, err))
			return nil
		})
		return terr
	}
	_, err = c.transition(ctx, n.UUID, state.Inspecting, state.EvWait, func(m *store.Node) error {
		awaitBoot(m, aw)
		m.PowerState = strp(PowerOn) // our own reboot: not a drift for power sync
		return nil
	})
	return err
}

// finishInspection stores the inventory the agent reported, fills the node's
// properties, creates ports for NICs that have none, and powers off.
func (c *engine) finishInspection(ctx context.Context, n *store.Node, d Driver, st protocol.CommandStatus) error {
	fail := func(msg string) error {
		c.ejectMedia(ctx, n, d, "inspection failed, leaving the ramdisk", true)
		_ = d.SetPower(ctx, n, PowerOff)
		_, err := c.transition(ctx, n.UUID, state.InspectWait, state.EvFail, func(m *store.Node) error {
			m.LastError = strp(msg)
			wipeAgent(m)
			return nil
		})
		return err
	}
	if st.State == protocol.CommandFailed {
		msg := "the agent could not collect the inventory"
		if st.Error != nil {
			msg = st.Error.Message
		}
		return fail(fmt.Sprintf("Failed to inspect node %s: %s", n.UUID, msg))
	}
	var inv protocol.Inventory
	if err := json.Unmarshal(st.Result, &inv); err != nil {
		return fail(fmt.Sprintf("Failed to inspect node %s: the agent's inventory does not decode: %v", n.UUID, err))
	}
	if err := c.st.PutInventory(ctx, n.UUID, st.Result); err != nil {
		return err
	}
	created, err := c.createPorts(ctx, n.UUID, inv.Interfaces)
	if err != nil {
		return err
	}
	c.ejectMedia(ctx, n, d, "inspection done, leaving the ramdisk", true)
	if err := d.SetPower(ctx, n, PowerOff); err != nil {
		return fail(fmt.Sprintf("Inspection of node %s collected the inventory but could not power the node off: %v", n.UUID, err))
	}
	_, err = c.transition(ctx, n.UUID, state.InspectWait, state.EvDone, func(m *store.Node) error {
		for k, v := range inventoryProperties(inv) {
			m.Properties[k] = v
		}
		now := c.now()
		m.InspectionFinishedAt = &now
		m.PowerState = strp(PowerOff)
		wipeAgent(m)
		return nil
	}, c.newEvent(n.UUID, "INFO", "inspection", fmt.Sprintf("inventory stored: %d CPUs, %d MiB, %d disks, %d NICs; %d ports created",
		inv.CPU.Count, inv.Memory.PhysicalMB, len(inv.Disks), len(inv.Interfaces), created)))
	return err
}

// inventoryProperties derives Ironic's scheduling properties. local_gb is
// the largest disk in GiB minus one, as Ironic reserves one for partitioning.
func inventoryProperties(inv protocol.Inventory) map[string]any {
	props := map[string]any{}
	if inv.CPU.Count > 0 {
		props["cpus"] = inv.CPU.Count
	}
	if inv.CPU.Architecture != "" {
		props["cpu_arch"] = inv.CPU.Architecture
	}
	if inv.Memory.PhysicalMB > 0 {
		props["memory_mb"] = inv.Memory.PhysicalMB
	}
	var largest uint64
	for _, disk := range inv.Disks {
		if disk.Size > largest {
			largest = disk.Size
		}
	}
	if gib := largest >> 30; gib > 1 {
		props["local_gb"] = gib - 1
	}
	return props
}

// createPorts adds a port for every NIC whose MAC has none yet.
func (c *engine) createPorts(ctx context.Context, nodeUUID string, nics []protocol.NIC) (int, error) {
	created := 0
	for _, nic := range nics {
		hw, err := net.ParseMAC(nic.MACAddress)
		if err != nil || len(hw) != 6 {
			continue
		}
		mac := hw.String()
		existing, err := c.st.ListPorts(ctx, store.ResourceFilter{Address: &mac}, store.Page{Limit: 1})
		if err != nil {
			return created, err
		}
		if len(existing) > 0 {
			continue
		}
		p := &store.Port{UUID: uuid.NewString(), Address: mac, NodeUUID: nodeUUID, PXEEnabled: true, CreatedAt: c.now(),
			Extra: map[string]any{"interface": nic.Name}}
		if err := c.st.CreatePort(ctx, p); err != nil {
			return created, fmt.Errorf("create port %s for node %s: %w", mac, nodeUUID, err)
		}
		created++
	}
	return created, nil
}
