package sqlstore

import (
	"context"
	"strings"

	"github.com/anvil-metal/anvil/controller/store"
)

// Deploy templates have a table of their own (migration 11): a list sorts
// by name or time, which the generic resources table does not index.
var templateKind = &tableKind[store.DeployTemplate]{
	table: "deploy_templates", what: "deploy template", byName: true,
	uuid:  func(t *store.DeployTemplate) string { return t.UUID },
	setID: func(t *store.DeployTemplate, id int64) { t.ID = id },
	created: func(s *Store, t *store.DeployTemplate) []column {
		return []column{{"created_at", s.d.stamp(&t.CreatedAt)}}
	},
	written: func(s *Store, t *store.DeployTemplate) []column {
		return []column{{"name", t.Name}, {"updated_at", s.d.stamp(t.UpdatedAt)}}
	},
}

// CreateDeployTemplate inserts a template.
func (s *Store) CreateDeployTemplate(ctx context.Context, t *store.DeployTemplate) error {
	return templateKind.create(ctx, s, t)
}

// GetDeployTemplate finds a template by UUID, then by name.
func (s *Store) GetDeployTemplate(ctx context.Context, ident string) (*store.DeployTemplate, error) {
	return templateKind.get(ctx, s, ident)
}

// ListDeployTemplates lists templates, one keyset page at a time.
func (s *Store) ListDeployTemplates(ctx context.Context, p store.Page) ([]*store.DeployTemplate, error) {
	return templateKind.list(ctx, s, nil, nil, p)
}

// DeployTemplatesNamed returns the templates with the given names, by id.
func (s *Store) DeployTemplatesNamed(ctx context.Context, names []string) ([]*store.DeployTemplate, error) {
	if len(names) == 0 {
		return nil, nil
	}
	var args params
	ph := make([]string, len(names))
	for i, n := range names {
		ph[i] = args.add(n)
	}
	return templateKind.list(ctx, s, []string{"name IN (" + strings.Join(ph, ", ") + ")"}, args, store.Page{})
}

// UpdateDeployTemplate writes a template.
func (s *Store) UpdateDeployTemplate(ctx context.Context, t *store.DeployTemplate) error {
	return templateKind.update(ctx, s, t)
}

// DeleteDeployTemplate removes a template.
func (s *Store) DeleteDeployTemplate(ctx context.Context, uuid string) error {
	return templateKind.delete(ctx, s, uuid)
}
