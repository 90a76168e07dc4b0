package store

import (
	"context"
	"time"
)

// DeployTemplate is a named list of deploy steps (Ironic's deploy
// template, API 1.55): a deploy of a node whose instance_info.traits holds
// the name runs the steps with the driver's own.
type DeployTemplate struct {
	ID        int64          `json:"-"`
	UUID      string         `json:"uuid"`
	Name      string         `json:"name"` // a trait: CUSTOM_... or a standard one
	Steps     []TemplateStep `json:"steps"`
	Extra     map[string]any `json:"extra"`
	CreatedAt time.Time      `json:"created_at"`
	UpdatedAt *time.Time     `json:"updated_at"`
}

// TemplateStep is one step of a deploy template, every field required as
// in Ironic's DEPLOY_STEP_SCHEMA.
type TemplateStep struct {
	Interface string         `json:"interface"`
	Step      string         `json:"step"`
	Args      map[string]any `json:"args"`
	Priority  int            `json:"priority"`
}

// DeployTemplates is the deploy-template part of the store. Names and
// UUIDs are unique (ErrDuplicateName, ErrDuplicateUUID).
type DeployTemplates interface {
	CreateDeployTemplate(ctx context.Context, t *DeployTemplate) error
	// GetDeployTemplate finds a template by UUID or name.
	GetDeployTemplate(ctx context.Context, ident string) (*DeployTemplate, error)
	// ListDeployTemplates pages by id, uuid, name, created_at or updated_at.
	ListDeployTemplates(ctx context.Context, p Page) ([]*DeployTemplate, error)
	// DeployTemplatesNamed returns the templates with these names, by id.
	DeployTemplatesNamed(ctx context.Context, names []string) ([]*DeployTemplate, error)
	UpdateDeployTemplate(ctx context.Context, t *DeployTemplate) error
	DeleteDeployTemplate(ctx context.Context, uuid string) error
}

// DeployTemplateSortKeys are the keys a template list sorts by (Ironic's
// columns but extra and steps).
func DeployTemplateSortKeys() []string {
	return []string{"id", "uuid", "name", "created_at", "updated_at"}
}
