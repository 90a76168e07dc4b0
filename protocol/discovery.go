package protocol

// DiscoveryPath is where an agent booted in discovery mode (anvil.discovery
// on its kernel command line: the controller's boot service answered a MAC
// no node has) reports the machine. The controller enrols it as a new node
// in enroll, or refuses; either way the agent does what Action says.
const DiscoveryPath = "/v1/discovery"

// DiscoveryRequest is POST /v1/discovery: the machine's inventory (its
// NICs' MACs become the new node's ports) and the agent's boot id.
type DiscoveryRequest struct {
	BootID    string    `json:"boot_id"`
	Inventory Inventory `json:"inventory"`
}

// Discovery actions: what the agent does after reporting.
const (
	// DiscoveryPowerOff: switch the machine off (Ironic inspector's
	// discovery does the same); the operator manages the node from enroll.
	DiscoveryPowerOff = "power_off"
)

// DiscoveryResponse answers a discovery report.
type DiscoveryResponse struct {
	// NodeUUID is the node created for the machine.
	NodeUUID string `json:"node_uuid"`
	// Action is what the agent does next (DiscoveryPowerOff).
	Action string `json:"action"`
	// Message says in words what happened, for the agent's log.
	Message string `json:"message,omitempty"`
}
