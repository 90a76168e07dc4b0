// Package store defines the controller's persistent model and the Store
// interface that the API and the conductor use. Implementations live in
// subpackages (sqlite is the embedded default); handlers never see SQL.
package store

import (
	"context"
	"errors"
	"time"
)

// Sentinel errors; implementations wrap them with %w.
var (
	ErrNotFound      = errors.New("not found")
	ErrConflict      = errors.New("concurrent update") // revision changed under us
	ErrDuplicateName = errors.New("duplicate name")
	ErrDuplicateUUID = errors.New("duplicate uuid")
	ErrDuplicateAddr = errors.New("duplicate address")
	// ErrNotEmpty refuses to delete what others still refer to (a
	// chassis with nodes).
	ErrNotEmpty = errors.New("still referred to")
	// ErrLeaseLost means a write made under a node lease (WithLease) found
	// the lease expired or held by another controller: the work must stop.
	ErrLeaseLost = errors.New("node lease lost")
)

// Node is a bare-metal node, with Ironic's field names.
type Node struct {
	ID       int64 `json:"-"` // internal id, Ironic's default sort key
	Revision int64 `json:"-"` // optimistic concurrency

	UUID                 string         `json:"uuid"`
	Name                 *string        `json:"name"`
	Driver               string         `json:"driver"`
	DriverInfo           map[string]any `json:"driver_info"`
	DriverInternalInfo   map[string]any `json:"driver_internal_info"`
	Properties           map[string]any `json:"properties"`
	InstanceInfo         map[string]any `json:"instance_info"`
	Extra                map[string]any `json:"extra"`
	InstanceUUID         *string        `json:"instance_uuid"`
	ChassisUUID          *string        `json:"chassis_uuid"`
	PowerState           *string        `json:"power_state"`
	TargetPowerState     *string        `json:"target_power_state"`
	ProvisionState       string         `json:"provision_state"`
	TargetProvisionState *string        `json:"target_provision_state"`
	ProvisionUpdatedAt   *time.Time     `json:"provision_updated_at"`
	Maintenance          bool           `json:"maintenance"`
	MaintenanceReason    *string        `json:"maintenance_reason"`
	Fault                *string        `json:"fault"`
	LastError            *string        `json:"last_error"`
	Reservation          *string        `json:"reservation"`
	ConsoleEnabled       bool           `json:"console_enabled"`
	CreatedAt            time.Time      `json:"created_at"`
	UpdatedAt            *time.Time     `json:"updated_at"`
	InspectionStartedAt  *time.Time     `json:"inspection_started_at"`
	InspectionFinishedAt *time.Time     `json:"inspection_finished_at"`
	CleanStep            map[string]any `json:"clean_step"`
	DeployStep           map[string]any `json:"deploy_step"`
	RAIDConfig           map[string]any `json:"raid_config"`
	TargetRAIDConfig     map[string]any `json:"target_raid_config"`
	ResourceClass        *string        `json:"resource_class"`
	Interfaces           Interfaces     `json:"interfaces"`
	Traits               []string       `json:"traits"`
	ConductorGroup       string         `json:"conductor_group"`
	AutomatedClean       *bool          `json:"automated_clean"`
	Protected            bool           `json:"protected"`
	ProtectedReason      *string        `json:"protected_reason"`
	Owner                *string        `json:"owner"`
	Lessee               *string        `json:"lessee"`
	Description          *string        `json:"description"`
	AllocationUUID       *string        `json:"allocation_uuid"`
	NetworkData          map[string]any `json:"network_data"`
	Retired              bool           `json:"retired"`
	RetiredReason        *string        `json:"retired_reason"`
	BootMode             *string        `json:"boot_mode"`
	SecureBoot           *bool          `json:"secure_boot"`
	Shard                *string        `json:"shard"`
	// ParentNode is the UUID of the node this one sits in (1.83: a DPU
	// or SmartNIC with its own BMC inside a host); nil for most nodes.
	ParentNode *string `json:"parent_node,omitempty"`
	// ServiceStep (1.87) is the service step running; empty maps are
	// left out of the document, which stays as before servicing existed.
	ServiceStep map[string]any `json:"service_step,omitempty"`
	// DisablePowerOff (1.95): the node is never powered off; flows that
	// would power it off reboot it or leave it on (conductor powerOff).
	DisablePowerOff bool `json:"disable_power_off,omitempty"`
	// Health (1.109) is what the BMC last reported in power sync: "OK",
	// "Warning", "Critical", or nil when unknown or not reported.
	Health *string `json:"health,omitempty"`
	// InstanceName is the deployed instance's name (1.104): set by
	// clients, else from instance_info's display_name (as Nova sets
	// it); gone with the instance.
	InstanceName *string `json:"instance_name,omitempty"`

	// Operation is the conductor's working state, stored beside the
	// node's document (see Operation).
	Operation Operation `json:"-"`
	// Partial marks a node read by a list: the agent's step cache and
	// command status (Operation.Agent.Steps, CommandStatus), kept apart
	// from the node, were not read, and writing the node leaves the stored
	// ones as they are. A store's LoadAgentState fills them in.
	Partial bool `json:"-"`
	// AgentStateRead is the agent state as the store last read or wrote
	// it (opaque to callers), so that writing the node rewrites that state
	// only when it changed: most heartbeats leave it as it was.
	AgentStateRead []byte `json:"-"`
}

// Interfaces are the per-node driver interface names (1.31+).
type Interfaces struct {
	Boot       string `json:"boot_interface"`
	Console    string `json:"console_interface"`
	Deploy     string `json:"deploy_interface"`
	Inspect    string `json:"inspect_interface"`
	Management string `json:"management_interface"`
	Network    string `json:"network_interface"`
	Power      string `json:"power_interface"`
	RAID       string `json:"raid_interface"`
	Rescue     string `json:"rescue_interface"`
	Storage    string `json:"storage_interface"`
	Vendor     string `json:"vendor_interface"`
	BIOS       string `json:"bios_interface"`
	// Firmware (1.86) is empty in documents written before it existed:
	// the API shows the hardware type's default for it then.
	Firmware string `json:"firmware_interface,omitempty"`
}

// Normalize replaces nil maps and slices by empty ones, because the API
// always emits {} and [] for them, never null.
func (n *Node) Normalize() {
	for _, m := range []*map[string]any{&n.DriverInfo, &n.DriverInternalInfo, &n.Properties, &n.InstanceInfo,
		&n.Extra, &n.CleanStep, &n.DeployStep, &n.ServiceStep, &n.RAIDConfig, &n.TargetRAIDConfig, &n.NetworkData} {
		if *m == nil {
			*m = map[string]any{}
		}
	}
	if n.Traits == nil {
		n.Traits = []string{}
	}
}

// NodeFilter selects nodes; nil fields do not filter.
type NodeFilter struct {
	ProvisionState      *string
	Maintenance         *bool
	Retired             *bool
	Associated          *bool
	Driver              *string
	ResourceClass       *string
	Fault               *string
	Owner               *string
	Lessee              *string
	ConductorGroup      *string
	ChassisUUID         *string
	InstanceUUID        *string
	DescriptionContains *string
	NameContains        *string // case-insensitive substring of the name (anvil's extension)
	// TextContains is a case-insensitive substring of the name, the
	// description or the UUID (anvil's extension, the dashboard's search).
	TextContains *string
	Shard        *string
	// ParentNode selects the children of a node (its UUID).
	ParentNode *string
	// InstanceName selects the nodes whose instance_name is this (1.104).
	InstanceName *string
	// IsChild selects nodes with (true) or without (false) a parent
	// node: Ironic's lists leave children out unless asked.
	IsChild  *bool
	Reserved *bool
	// Conductor selects the nodes of a conductor (Ironic's ?conductor=):
	// those it holds reserved, and with Free also the unreserved ones.
	Conductor *ConductorFilter
	// Project selects the nodes a project owns or leases: what a
	// project-scoped caller may list (Ironic's project filter).
	Project *string
}

// ConductorFilter is NodeFilter.Conductor.
type ConductorFilter struct {
	Host string
	Free bool
}

// SortKeys are the node fields a list can be sorted by.
var SortKeys = []string{"id", "uuid", "name", "created_at", "updated_at", "provision_state",
	"provision_updated_at", "power_state", "driver", "maintenance", "resource_class", "instance_uuid",
	"conductor_group", "owner", "retired"}

// Page is keyset pagination: Limit rows after the row whose UUID is Marker.
type Page struct {
	Limit   int
	Marker  string
	SortKey string // one of SortKeys; "" = id
	Desc    bool
}

// Port binds a MAC address to a node; agent lookup finds nodes through it.
type Port struct {
	ID                  int64          `json:"-"`
	Revision            int64          `json:"-"` // optimistic concurrency (UpdatePort)
	UUID                string         `json:"uuid"`
	Address             string         `json:"address"`
	NodeUUID            string         `json:"node_uuid"`
	PortgroupUUID       *string        `json:"portgroup_uuid"`
	Name                *string        `json:"name"`
	LocalLinkConnection map[string]any `json:"local_link_connection"`
	PXEEnabled          bool           `json:"pxe_enabled"`
	PhysicalNetwork     *string        `json:"physical_network"`
	Extra               map[string]any `json:"extra"`
	IsSmartNIC          bool           `json:"is_smartnic"`
	// Description (API 1.97), Vendor (1.100) and Category (1.101) are
	// the client's words about the port, stored and shown, never acted on.
	Description *string `json:"description,omitempty"`
	Vendor      *string `json:"vendor,omitempty"`
	Category    *string `json:"category,omitempty"`
	// InternalInfo is Ironic's internal_info: read-only to clients; the
	// attached VIF is its tenant_vif_port_id.
	InternalInfo map[string]any `json:"internal_info,omitempty"`
	CreatedAt    time.Time      `json:"created_at"`
	UpdatedAt    *time.Time     `json:"updated_at"`
}

// Portgroup bonds ports of one node.
type Portgroup struct {
	ID                       int64          `json:"-"`
	Revision                 int64          `json:"-"` // optimistic concurrency (UpdatePortgroup)
	UUID                     string         `json:"uuid"`
	Name                     *string        `json:"name"`
	Address                  *string        `json:"address"`
	NodeUUID                 string         `json:"node_uuid"`
	Mode                     *string        `json:"mode"`
	Properties               map[string]any `json:"properties"`
	StandalonePortsSupported bool           `json:"standalone_ports_supported"`
	Extra                    map[string]any `json:"extra"`
	InternalInfo             map[string]any `json:"internal_info,omitempty"` // as Port's
	// PhysicalNetwork (API 1.102) and Category (1.103) are stored and
	// shown; anvil wires no networks by them.
	PhysicalNetwork *string    `json:"physical_network,omitempty"`
	Category        *string    `json:"category,omitempty"`
	CreatedAt       time.Time  `json:"created_at"`
	UpdatedAt       *time.Time `json:"updated_at"`
}

// Allocation claims an available node for an instance (standalone scheduler).
type Allocation struct {
	ID             int64          `json:"-"`
	Revision       int64          `json:"-"` // optimistic concurrency (UpdateAllocation)
	UUID           string         `json:"uuid"`
	Name           *string        `json:"name"`
	NodeUUID       *string        `json:"node_uuid"`
	State          string         `json:"state"` // allocating | active | error
	LastError      *string        `json:"last_error"`
	ResourceClass  string         `json:"resource_class"`
	CandidateNodes []string       `json:"candidate_nodes"`
	Traits         []string       `json:"traits"`
	Owner          *string        `json:"owner"`
	Extra          map[string]any `json:"extra"`
	CreatedAt      time.Time      `json:"created_at"`
	UpdatedAt      *time.Time     `json:"updated_at"`
	// ConductorAffinity is the controller (lease holder) processing an
	// allocation in state allocating; another takes it over when that one
	// is no longer alive. Not shown by the API.
	ConductorAffinity string `json:"conductor_affinity,omitempty"`
}

// Chassis groups nodes (Ironic's chassis); a node's ChassisUUID names one.
type Chassis struct {
	ID          int64          `json:"-"`
	UUID        string         `json:"uuid"`
	Description *string        `json:"description"`
	Extra       map[string]any `json:"extra"`
	CreatedAt   time.Time      `json:"created_at"`
	UpdatedAt   *time.Time     `json:"updated_at"`
}

// VolumeConnector is how a node connects to remote volumes (an initiator
// IQN, a WWPN...); (Type, ConnectorID) is unique.
type VolumeConnector struct {
	ID          int64          `json:"-"`
	UUID        string         `json:"uuid"`
	NodeUUID    string         `json:"node_uuid"`
	Type        string         `json:"type"`
	ConnectorID string         `json:"connector_id"`
	Extra       map[string]any `json:"extra"`
	CreatedAt   time.Time      `json:"created_at"`
	UpdatedAt   *time.Time     `json:"updated_at"`
}

// VolumeTarget is a remote volume of a node; BootIndex is unique per node.
type VolumeTarget struct {
	ID         int64          `json:"-"`
	UUID       string         `json:"uuid"`
	NodeUUID   string         `json:"node_uuid"`
	VolumeType string         `json:"volume_type"`
	VolumeID   string         `json:"volume_id"`
	BootIndex  int            `json:"boot_index"`
	Properties map[string]any `json:"properties"`
	Extra      map[string]any `json:"extra"`
	CreatedAt  time.Time      `json:"created_at"`
	UpdatedAt  *time.Time     `json:"updated_at"`
}

// Event is one entry of a node's history (Ironic's node history, plus our
// step and state events).
type Event struct {
	UUID      string    `json:"uuid"`
	NodeUUID  string    `json:"node_uuid"`
	CreatedAt time.Time `json:"created_at"`
	Severity  string    `json:"severity"`   // INFO | WARNING | ERROR
	EventType string    `json:"event_type"` // provisioning | cleaning | deploying | power | console | bmc | agent
	Event     string    `json:"event"`
	Conductor string    `json:"conductor"`
	User      *string   `json:"user"`
}

// ResourceFilter selects ports, portgroups and allocations.
type ResourceFilter struct {
	NodeUUID *string
	Address  *string
	Name     *string
	// ConductorGroups and Shards select the ports or port groups of the
	// nodes in any of these conductor groups (API 1.99) or shards (ports
	// 1.82, port groups 1.106), compared case-blind; empty does not
	// filter.
	ConductorGroups []string
	Shards          []string
	// PortgroupUUID selects the ports of a port group.
	PortgroupUUID *string
	// NodeProject selects the ports or port groups of the nodes a project
	// owns or leases (a project-scoped caller's list).
	NodeProject *string
}

// Nodes is the node part of the store.
type Nodes interface {
	CreateNode(ctx context.Context, n *Node) error
	// GetNode finds a node by UUID or name.
	GetNode(ctx context.Context, ident string) (*Node, error)
	ListNodes(ctx context.Context, f NodeFilter, p Page) ([]*Node, error)
	// UpdateNode writes n if its Revision is still current (else ErrConflict)
	// and bumps n.Revision. Events are appended to the node's history in the
	// same transaction, so history never disagrees with the node.
	UpdateNode(ctx context.Context, n *Node, events ...*Event) error
	// ListNodeSummaries is ListNodes for the fields of a plain node list,
	// read from indexed columns only (the most frequent API call).
	ListNodeSummaries(ctx context.Context, f NodeFilter, p Page) ([]*NodeSummary, error)
	// DeleteNode removes n with its ports, portgroups, allocations,
	// inventory, agent state, lease, history, step results, BIOS settings
	// and firmware components (not its erase records) if its Revision is
	// still current (else ErrConflict), so checks made on n hold at the
	// moment it goes.
	DeleteNode(ctx context.Context, n *Node) error
	CountNodesByState(ctx context.Context) (map[string]int, error)
}

// Ports is the port part of the store.
type Ports interface {
	CreatePort(ctx context.Context, p *Port) error
	// GetPort finds a port by UUID, then by name (API 1.88).
	GetPort(ctx context.Context, ident string) (*Port, error)
	ListPorts(ctx context.Context, f ResourceFilter, p Page) ([]*Port, error)
	// UpdatePort writes p; if p.Revision is set (p was read from the
	// store), only if it is still current (else ErrConflict), and then
	// p.Revision is the new one. A p not read (Revision 0) is written
	// unconditionally and stays at 0: a revision it never read would
	// make its next write a conflict with itself.
	UpdatePort(ctx context.Context, p *Port) error
	DeletePort(ctx context.Context, uuid string) error
}

// Portgroups is the portgroup part of the store.
type Portgroups interface {
	CreatePortgroup(ctx context.Context, p *Portgroup) error
	GetPortgroup(ctx context.Context, ident string) (*Portgroup, error)
	ListPortgroups(ctx context.Context, f ResourceFilter, p Page) ([]*Portgroup, error)
	// UpdatePortgroup is UpdatePort for a port group.
	UpdatePortgroup(ctx context.Context, p *Portgroup) error
	DeletePortgroup(ctx context.Context, uuid string) error
}

// Allocations is the allocation part of the store.
type Allocations interface {
	CreateAllocation(ctx context.Context, a *Allocation) error
	GetAllocation(ctx context.Context, ident string) (*Allocation, error)
	ListAllocations(ctx context.Context, f ResourceFilter, p Page) ([]*Allocation, error)
	// UpdateAllocation is UpdatePort for an allocation.
	UpdateAllocation(ctx context.Context, a *Allocation) error
	DeleteAllocation(ctx context.Context, uuid string) error
}

// ChassisStore is the chassis part of the store. A node's chassis must
// exist: creating or updating a node naming another is ErrNotFound.
type ChassisStore interface {
	CreateChassis(ctx context.Context, c *Chassis) error
	GetChassis(ctx context.Context, uuid string) (*Chassis, error)
	// ListChassis pages by id, uuid or created_at.
	ListChassis(ctx context.Context, p Page) ([]*Chassis, error)
	UpdateChassis(ctx context.Context, c *Chassis) error
	// DeleteChassis removes a chassis no node is in (else ErrNotEmpty).
	DeleteChassis(ctx context.Context, uuid string) error
}

// VolumeStore is the volume connector and target part of the store. A
// duplicate (type, connector_id) is ErrDuplicateAddr, a duplicate boot
// index on one node ErrDuplicateName; deleting a node deletes them.
type VolumeStore interface {
	CreateVolumeConnector(ctx context.Context, c *VolumeConnector) error
	GetVolumeConnector(ctx context.Context, uuid string) (*VolumeConnector, error)
	ListVolumeConnectors(ctx context.Context, f ResourceFilter, p Page) ([]*VolumeConnector, error)
	UpdateVolumeConnector(ctx context.Context, c *VolumeConnector) error
	DeleteVolumeConnector(ctx context.Context, uuid string) error
	CreateVolumeTarget(ctx context.Context, t *VolumeTarget) error
	GetVolumeTarget(ctx context.Context, uuid string) (*VolumeTarget, error)
	ListVolumeTargets(ctx context.Context, f ResourceFilter, p Page) ([]*VolumeTarget, error)
	UpdateVolumeTarget(ctx context.Context, t *VolumeTarget) error
	DeleteVolumeTarget(ctx context.Context, uuid string) error
}

// History is the per-node event log.
type History interface {
	AppendEvent(ctx context.Context, e *Event) error
	ListEvents(ctx context.Context, nodeUUID string, limit int) ([]*Event, error)
}

// Inventories keeps the hardware inventory the agent reported per node,
// outside the node document so node lists stay small.
type Inventories interface {
	PutInventory(ctx context.Context, nodeUUID string, inventory []byte) error
	GetInventory(ctx context.Context, nodeUUID string) ([]byte, error)
}

// Leases is node ownership among controllers sharing one database. A
// controller works on a node only while it holds the node's lease; a lease
// lives for a TTL measured by the database's clock and is renewed while the
// work runs, so a controller that dies loses its nodes after one TTL and
// another one picks them up. Holders are opaque strings naming one
// controller process.
type Leases interface {
	// AcquireLease makes holder the node's lease holder for ttl if the node
	// has no lease, an expired one, or one holder already has. It returns
	// whether holder now holds it, and other: if not acquired, the holder
	// of the live lease; if acquired, the holder whose expired lease was
	// taken over ("" when the lease was free or holder's own).
	AcquireLease(ctx context.Context, nodeUUID, holder string, ttl time.Duration) (acquired bool, other string, err error)
	// RenewLeases extends every live lease of holder by ttl from now and
	// returns the nodes it still holds; leases that expired meanwhile are
	// lost (another controller may have them).
	RenewLeases(ctx context.Context, holder string, ttl time.Duration) ([]string, error)
	// ReleaseLease ends holder's lease on the node, if it has it.
	ReleaseLease(ctx context.Context, nodeUUID, holder string) error
	// ReleaseLeases ends every lease of holder (a clean shutdown).
	ReleaseLeases(ctx context.Context, holder string) error
	// ClearLeases ends every lease of every holder: only for a store that
	// one controller uses alone, when it starts.
	ClearLeases(ctx context.Context) error
	// UnleasedWork lists nodes that need a controller but have no live
	// lease: reserved ones (an operation is running) and those in one of
	// waitStates. At most limit are returned.
	UnleasedWork(ctx context.Context, waitStates []string, limit int) ([]string, error)
	// UnregisterController removes a controller's registration
	// (Controllers.RecordController) at a clean shutdown.
	UnregisterController(ctx context.Context, holder string) error
	// LiveControllers lists the registered controllers whose registration
	// has not expired, sorted, so all controllers agree on how to split
	// fleet-wide periodic work (power sync) among themselves.
	LiveControllers(ctx context.Context) ([]string, error)
}

// Notifier carries "process this node" to the controller holding its
// lease, so a heartbeat or API request can arrive at any controller. Stores
// that serve a single controller need not implement it.
type Notifier interface {
	// NotifyNode asks holder to process the node.
	NotifyNode(ctx context.Context, nodeUUID, holder string) error
	// ListenNodes calls fn with every node a notification asks holder to
	// process, until ctx ends or the connection fails.
	ListenNodes(ctx context.Context, holder string, fn func(nodeUUID string)) error
}

type volatileKey struct{}

// Volatile marks the node writes made with ctx as not needing to survive a
// power loss of the controller host: an agent's last-seen time and step
// progress, which the agent's next heartbeat repeats anyway. A store may
// then commit them without waiting for the disk (SQLite: synchronous
// NORMAL for a batch made only of such writes). A crash of the controller
// process still loses nothing acknowledged; a later durable commit makes
// earlier ones durable too.
func Volatile(ctx context.Context) context.Context {
	return context.WithValue(ctx, volatileKey{}, true)
}

// IsVolatile reports whether ctx was marked by Volatile.
func IsVolatile(ctx context.Context) bool {
	v, _ := ctx.Value(volatileKey{}).(bool)
	return v
}

type leaseKey struct{}

// WithLease marks ctx as work done under holder's node leases: UpdateNode
// with such a context writes only while holder's lease on the node is live
// (else ErrLeaseLost), so a controller that lost a node, e.g. after a long
// pause, cannot overwrite the work of the one that took it over.
func WithLease(ctx context.Context, holder string) context.Context {
	return context.WithValue(ctx, leaseKey{}, holder)
}

// LeaseHolder returns the holder WithLease put in ctx, or "".
func LeaseHolder(ctx context.Context) string {
	h, _ := ctx.Value(leaseKey{}).(string)
	return h
}

// Store is everything the controller persists.
type Store interface {
	Enrolments
	Nodes
	Ports
	Portgroups
	Allocations
	ChassisStore
	VolumeStore
	DeployTemplates
	InspectionRules
	Runbooks
	Controllers
	History
	Inventories
	StepResults
	BIOSSettings
	BootTimelines
	Leases
	Close() error
}

// NodeSummary is what a plain node list shows.
type NodeSummary struct {
	ID             int64
	UUID           string
	Name           *string
	InstanceUUID   *string
	Maintenance    bool
	PowerState     *string
	ProvisionState string
	Reservation    *string
}

// MutateNode reads the node, applies fn and writes it back, retrying when
// another writer got there first. fn may be called several times and must
// only change n; returning an error aborts without writing.
func MutateNode(ctx context.Context, s Nodes, ident string, fn func(n *Node) error) (*Node, error) {
	return MutateNodeEvents(ctx, s, ident, func(n *Node) ([]*Event, error) { return nil, fn(n) })
}

// MutateNodeEvents is MutateNode where fn also returns history events to
// commit with the change.
func MutateNodeEvents(ctx context.Context, s Nodes, ident string, fn func(n *Node) ([]*Event, error)) (*Node, error) {
	return MutateNodeWith(ctx, s, ident, func(n *Node) (context.Context, []*Event, error) {
		events, err := fn(n)
		return ctx, events, err
	})
}

// DeleteNodeIf reads the node, lets check refuse, and deletes it at the
// revision check saw, re-reading when another writer got there first: the
// checks hold at the moment the node goes, so a write racing the delete
// (a provision verb, a reservation) either lands first and is seen by check
// or finds the node gone.
func DeleteNodeIf(ctx context.Context, s Nodes, ident string, check func(n *Node) error) error {
	for attempt := 0; ; attempt++ {
		n, err := s.GetNode(ctx, ident)
		if err != nil {
			return err
		}
		if err := check(n); err != nil {
			return err
		}
		err = s.DeleteNode(ctx, n)
		if err == nil {
			return nil
		}
		if !errors.Is(err, ErrConflict) || attempt >= 50 {
			return err
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// MutateNodeWith is MutateNodeEvents where fn also returns the context of
// the write, so it can decide from what it changed how the write is made
// (Volatile).
func MutateNodeWith(ctx context.Context, s Nodes, ident string, fn func(n *Node) (context.Context, []*Event, error)) (*Node, error) {
	for attempt := 0; ; attempt++ {
		n, err := s.GetNode(ctx, ident)
		if err != nil {
			return nil, err
		}
		wctx, events, err := fn(n)
		if err != nil {
			return nil, err
		}
		err = s.UpdateNode(wctx, n, events...)
		if err == nil {
			return n, nil
		}
		if !errors.Is(err, ErrConflict) || attempt >= 50 {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}

// MutateAllocation is MutateNode for an allocation: read, apply fn, write
// back if nobody wrote it meanwhile, else again.
func MutateAllocation(ctx context.Context, s Allocations, ident string, fn func(a *Allocation) error) (*Allocation, error) {
	for attempt := 0; ; attempt++ {
		a, err := s.GetAllocation(ctx, ident)
		if err != nil {
			return nil, err
		}
		if err := fn(a); err != nil {
			return nil, err
		}
		err = s.UpdateAllocation(ctx, a)
		if err == nil {
			return a, nil
		}
		if !errors.Is(err, ErrConflict) || attempt >= 50 {
			return nil, err
		}
		if err := ctx.Err(); err != nil {
			return nil, err
		}
	}
}
