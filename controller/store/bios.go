package store

import (
	"context"
	"time"
)

// BIOSSetting is one BIOS setting of a node as its BMC last reported it
// (Ironic's bios_settings table): the value as text, as Ironic keeps it
// whatever the attribute's type, and, from a BMC with an attribute
// registry, what the setting allows (Ironic 1.74's registry fields; zero
// values mean the BMC said nothing).
type BIOSSetting struct {
	Name            string   `json:"name"`
	Value           string   `json:"value"`
	AttributeType   string   `json:"attribute_type,omitempty"` // Enumeration, String, Integer, Boolean, Password
	AllowableValues []string `json:"allowable_values,omitempty"`
	LowerBound      *int     `json:"lower_bound,omitempty"`
	UpperBound      *int     `json:"upper_bound,omitempty"`
	MinLength       *int     `json:"min_length,omitempty"`
	MaxLength       *int     `json:"max_length,omitempty"`
	ReadOnly        *bool    `json:"read_only,omitempty"`
	ResetRequired   *bool    `json:"reset_required,omitempty"`
	Unique          *bool    `json:"unique,omitempty"`
	// PendingValue is the value set on the BMC but not yet applied (Redfish
	// Bios/Settings; a boot applies it), nil when none differs from Value.
	// It is anvil's: Ironic keeps no pending values, so its API does not
	// show it; the dashboard and "anvil node bios" do.
	PendingValue *string `json:"pending_value,omitempty"`
	// CreatedAt is when the setting was first reported; UpdatedAt when
	// its value last changed (nil: never since).
	CreatedAt time.Time  `json:"created_at"`
	UpdatedAt *time.Time `json:"updated_at,omitempty"`
}

// FirmwareComponent is the firmware of one component of a node (Ironic's
// firmware_information table): "bios", "bmc" or "nic:<id>".
type FirmwareComponent struct {
	Component string `json:"component"`
	// InitialVersion is the version the component had when first seen;
	// it never changes after.
	InitialVersion string `json:"initial_version"`
	CurrentVersion string `json:"current_version"`
	// LastVersionFlashed is the version the last firmware update wrote
	// (nil: none has run).
	LastVersionFlashed *string    `json:"last_version_flashed,omitempty"`
	CreatedAt          time.Time  `json:"created_at"`
	UpdatedAt          *time.Time `json:"updated_at,omitempty"`
}

// BIOSSettings caches each node's BIOS settings and firmware versions as
// its BMC reports them; deleting a node deletes them. A node that does not
// exist is ErrNotFound for the writes; the reads find nothing for it.
type BIOSSettings interface {
	// ReplaceBIOSSettings makes settings the node's whole set, in one
	// transaction: names not in it go. A name already stored keeps its
	// created_at, and its updated_at moves to now only if its value
	// changed (its registry fields and pending value are the new report's
	// either way); a new name gets the CreatedAt and UpdatedAt it is
	// given, now when CreatedAt is zero (an import passes the exported
	// times). Names must be non-empty and unique.
	ReplaceBIOSSettings(ctx context.Context, nodeUUID string, settings []BIOSSetting) error
	// ListBIOSSettings lists the node's settings by name.
	ListBIOSSettings(ctx context.Context, nodeUUID string) ([]BIOSSetting, error)
	// GetBIOSSetting is one setting; ErrNotFound when the node has none
	// of that name.
	GetBIOSSetting(ctx context.Context, nodeUUID, name string) (*BIOSSetting, error)
	// ReplaceFirmwareComponents makes comps the node's whole set of
	// components, as ReplaceBIOSSettings does. A component already stored
	// keeps its initial_version and created_at; its current_version is the
	// new one, its last_version_flashed the new one if given (else kept),
	// and updated_at moves to now when either changed. A new component's
	// initial_version is the one given, else its current_version.
	ReplaceFirmwareComponents(ctx context.Context, nodeUUID string, comps []FirmwareComponent) error
	// ListFirmwareComponents lists the node's components by name.
	ListFirmwareComponents(ctx context.Context, nodeUUID string) ([]FirmwareComponent, error)
}
