// Package transfer moves a whole fleet between controller databases (SQLite
// and PostgreSQL, either way) as one JSON document:
//
//	{"format":"anvil-export","version":1,"exported_at":"...",
//	"chassis":[...],"nodes":[...],"portgroups":[...],"ports":[...],"allocations":[...],
//	"volume_connectors":[...],"volume_targets":[...],
//	"history":[...],"inventories":{"NODE-UUID":{...},...},
//	"step_results":[...],"erase_records":[...],"deploy_templates":[...],"runbooks":[...],"inspection_rules":[...],
//	"bios_settings":{"NODE-UUID":[...],...},"firmware_components":{"NODE-UUID":[...],...}}
//
// The objects are the store's model with its JSON field names (the API's),
// every field included: driver_info with its BMC credentials, internal
// info, steps, RAID configurations, reservations, timestamps. Internal ids
// and revisions are not exported (the target database assigns its own), nor
// are node leases: they are runtime ownership among live controllers and
// expire on their own. Sections come in dependency order, one object per
// line, so a fleet of any size is written and read as a stream. Step
// results and erase records (oldest first) came later within version 1:
// a document without them reads as one without results or records. Erase
// records of deleted nodes are exported too (they outlive their node).
// Chassis and volume connectors and targets came later still: a document
// without them reads as one without; a node naming a chassis the document
// does not have (earlier releases took any chassis_uuid) gets one created.
// BIOS settings and firmware components came next (bios.go), runbooks
// (written after the deploy templates) next, inspection rules (after the
// runbooks) last: a document without them reads as one without.
package transfer

import (
	"context"
	"errors"
	"fmt"

	"github.com/anvil-metal/anvil/controller/store"
)

// Format and Version identify the document. Version changes when a reader
// of the previous version would misread a document; a reader refuses
// versions it does not know rather than guess.
const (
	Format  = "anvil-export"
	Version = 1
)

// pageSize is how many objects one list call of the source returns.
const pageSize = 500

var (
	// ErrReserved means nodes are held by a running operation.
	ErrReserved = errors.New("nodes are reserved by a running operation")
	// ErrNotEmpty means the import target already holds a fleet.
	ErrNotEmpty = errors.New("target database is not empty")
	// ErrInvalid means the document is not a valid export.
	ErrInvalid = errors.New("invalid export document")
)

// Source is what Export reads; every store.Store is one.
type Source interface {
	ListNodes(ctx context.Context, f store.NodeFilter, p store.Page) ([]*store.Node, error)
	ListNodeSummaries(ctx context.Context, f store.NodeFilter, p store.Page) ([]*store.NodeSummary, error)
	ListPortgroups(ctx context.Context, f store.ResourceFilter, p store.Page) ([]*store.Portgroup, error)
	ListPorts(ctx context.Context, f store.ResourceFilter, p store.Page) ([]*store.Port, error)
	ListAllocations(ctx context.Context, f store.ResourceFilter, p store.Page) ([]*store.Allocation, error)
	ListChassis(ctx context.Context, p store.Page) ([]*store.Chassis, error)
	ListVolumeConnectors(ctx context.Context, f store.ResourceFilter, p store.Page) ([]*store.VolumeConnector, error)
	ListVolumeTargets(ctx context.Context, f store.ResourceFilter, p store.Page) ([]*store.VolumeTarget, error)
	ListEvents(ctx context.Context, nodeUUID string, limit int) ([]*store.Event, error)
	GetInventory(ctx context.Context, nodeUUID string) ([]byte, error)
	ListStepResults(ctx context.Context, p store.ResultPage) ([]*store.StepResult, error)
	ListEraseRecords(ctx context.Context, p store.ResultPage) ([]*store.EraseRecord, error)
	ListDeployTemplates(ctx context.Context, p store.Page) ([]*store.DeployTemplate, error)
	ListRunbooks(ctx context.Context, f store.RunbookFilter, p store.Page) ([]*store.Runbook, error)
	ListInspectionRules(ctx context.Context, phase string, p store.Page) ([]*store.InspectionRule, error)
	ListBIOSSettings(ctx context.Context, nodeUUID string) ([]store.BIOSSetting, error)
	ListFirmwareComponents(ctx context.Context, nodeUUID string) ([]store.FirmwareComponent, error)
}

// Target is what Import writes; every store.Store is one. Both stores'
// Create calls keep the fields they are given (UUID, timestamps, states,
// reservation), so an imported object is the exported one; only the
// revision restarts at 1 and ids are the target's.
type Target interface {
	ListNodeSummaries(ctx context.Context, f store.NodeFilter, p store.Page) ([]*store.NodeSummary, error)
	ListAllocations(ctx context.Context, f store.ResourceFilter, p store.Page) ([]*store.Allocation, error)
	CreateNode(ctx context.Context, n *store.Node) error
	CreatePortgroup(ctx context.Context, p *store.Portgroup) error
	CreatePort(ctx context.Context, p *store.Port) error
	CreateAllocation(ctx context.Context, a *store.Allocation) error
	ListChassis(ctx context.Context, p store.Page) ([]*store.Chassis, error)
	CreateChassis(ctx context.Context, c *store.Chassis) error
	CreateVolumeConnector(ctx context.Context, c *store.VolumeConnector) error
	CreateVolumeTarget(ctx context.Context, t *store.VolumeTarget) error
	AppendEvent(ctx context.Context, e *store.Event) error
	PutInventory(ctx context.Context, nodeUUID string, inventory []byte) error
	PutStepResult(ctx context.Context, r *store.StepResult) error
	PutEraseRecords(ctx context.Context, recs []*store.EraseRecord) error
	ListDeployTemplates(ctx context.Context, p store.Page) ([]*store.DeployTemplate, error)
	CreateDeployTemplate(ctx context.Context, t *store.DeployTemplate) error
	ListRunbooks(ctx context.Context, f store.RunbookFilter, p store.Page) ([]*store.Runbook, error)
	CreateRunbook(ctx context.Context, rb *store.Runbook) error
	ListInspectionRules(ctx context.Context, phase string, p store.Page) ([]*store.InspectionRule, error)
	CreateInspectionRule(ctx context.Context, r *store.InspectionRule) error
	ReplaceBIOSSettings(ctx context.Context, nodeUUID string, settings []store.BIOSSetting) error
	ReplaceFirmwareComponents(ctx context.Context, nodeUUID string, comps []store.FirmwareComponent) error
}

// Summary counts the objects of a document, per kind.
type Summary struct {
	Chassis          int `json:"chassis"`
	Nodes            int `json:"nodes"`
	VolumeConnectors int `json:"volume_connectors"`
	VolumeTargets    int `json:"volume_targets"`
	Portgroups       int `json:"portgroups"`
	Ports            int `json:"ports"`
	Allocations      int `json:"allocations"`
	Events           int `json:"history"`
	Inventories      int `json:"inventories"`
	StepResults      int `json:"step_results"`
	Records          int `json:"erase_records"`
	Templates        int `json:"deploy_templates"`
	Runbooks         int `json:"runbooks"`
	InspectionRules  int `json:"inspection_rules"`
	BIOSSettings     int `json:"bios_settings"`
	Firmware         int `json:"firmware_components"`
}

// Total is the number of objects of every kind.
func (s Summary) Total() int {
	return s.Chassis + s.Nodes + s.Portgroups + s.Ports + s.Allocations + s.VolumeConnectors + s.VolumeTargets +
		s.Events + s.Inventories + s.StepResults + s.Records + s.Templates + s.Runbooks + s.InspectionRules + s.BIOSSettings + s.Firmware
}

func (s Summary) String() string {
	return fmt.Sprintf("%d chassis, %d nodes, %d portgroups, %d ports, %d allocations, %d volume connectors, %d volume targets, "+
		"%d history events, %d inventories, %d step results, %d erase records, %d deploy templates, %d runbooks, %d inspection rules, "+
		"%d BIOS settings, %d firmware components",
		s.Chassis, s.Nodes, s.Portgroups, s.Ports, s.Allocations, s.VolumeConnectors, s.VolumeTargets,
		s.Events, s.Inventories, s.StepResults, s.Records, s.Templates, s.Runbooks, s.InspectionRules, s.BIOSSettings, s.Firmware)
}
