package sqlstore

import (
	"context"
	"database/sql"
	stdjson "encoding/json"
	"errors"
	"fmt"

	"github.com/anvil-metal/anvil/controller/store"
)

// Deploy templates have a table of their own (migration 11): a list sorts
// by name or time, which the generic resources table does not index.

const templateCols = "id, data"

func scanTemplate(sc scanner) (*store.DeployTemplate, error) {
	var id int64
	var data []byte
	if err := sc.Scan(&id, &data); err != nil {
		return nil, err
	}
	t := &store.DeployTemplate{}
	if err := stdjson.Unmarshal(data, t); err != nil {
		return nil, fmt.Errorf("decode deploy template %d: %w", id, err)
	}
	t.ID = id
	return t, nil
}

// CreateDeployTemplate inserts a template.
func (s *Store) CreateDeployTemplate(ctx context.Context, t *store.DeployTemplate) error {
	data, err := stdjson.Marshal(t)
	if err != nil {
		return fmt.Errorf("encode deploy template %s: %w", t.UUID, err)
	}
	err = s.queryRow(ctx, s.w, `INSERT INTO deploy_templates (uuid, name, created_at, updated_at, data)
		VALUES ($1, $2, $3, $4, $5) RETURNING id`, t.UUID, t.Name, s.d.stamp(&t.CreatedAt), s.d.stamp(t.UpdatedAt), data).Scan(&t.ID)
	if err != nil {
		return s.mapErr(err, "create deploy template "+t.UUID)
	}
	return nil
}

// GetDeployTemplate finds a template by UUID, then by name.
func (s *Store) GetDeployTemplate(ctx context.Context, ident string) (*store.DeployTemplate, error) {
	t, err := scanTemplate(s.queryRow(ctx, s.r, `SELECT `+templateCols+` FROM deploy_templates
		WHERE uuid = $1 OR name = $1 ORDER BY uuid = $1 DESC LIMIT 1`, ident))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("deploy template %s: %w", ident, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get deploy template %s: %w", ident, err)
	}
	return t, nil
}

// ListDeployTemplates lists templates, one keyset page at a time.
func (s *Store) ListDeployTemplates(ctx context.Context, p store.Page) ([]*store.DeployTemplate, error) {
	return listPage(ctx, s, "deploy_templates", templateCols, nil, nil, p, scanTemplate)
}

// DeployTemplatesNamed returns the templates with the given names, by id.
func (s *Store) DeployTemplatesNamed(ctx context.Context, names []string) ([]*store.DeployTemplate, error) {
	if len(names) == 0 {
		return nil, nil
	}
	var args params
	where := "name IN ("
	for i, n := range names {
		if i > 0 {
			where += ", "
		}
		where += args.add(n)
	}
	return listPage(ctx, s, "deploy_templates", templateCols, []string{where + ")"}, args, store.Page{}, scanTemplate)
}

// UpdateDeployTemplate writes a template.
func (s *Store) UpdateDeployTemplate(ctx context.Context, t *store.DeployTemplate) error {
	data, err := stdjson.Marshal(t)
	if err != nil {
		return fmt.Errorf("encode deploy template %s: %w", t.UUID, err)
	}
	res, err := s.exec(ctx, s.w, `UPDATE deploy_templates SET name = $1, updated_at = $2, data = $3 WHERE uuid = $4`,
		t.Name, s.d.stamp(t.UpdatedAt), data, t.UUID)
	if err != nil {
		return s.mapErr(err, "update deploy template "+t.UUID)
	}
	if c, _ := res.RowsAffected(); c == 0 {
		return fmt.Errorf("deploy template %s: %w", t.UUID, store.ErrNotFound)
	}
	return nil
}

// DeleteDeployTemplate removes a template.
func (s *Store) DeleteDeployTemplate(ctx context.Context, uuid string) error {
	res, err := s.exec(ctx, s.w, `DELETE FROM deploy_templates WHERE uuid = $1`, uuid)
	if err != nil {
		return fmt.Errorf("delete deploy template %s: %w", uuid, err)
	}
	if c, _ := res.RowsAffected(); c == 0 {
		return fmt.Errorf("deploy template %s: %w", uuid, store.ErrNotFound)
	}
	return nil
}
