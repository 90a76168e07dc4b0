package sqlstore

import (
	"context"
	"database/sql"
	stdjson "encoding/json"
	"errors"
	"fmt"
	"strings"

	"github.com/anvil-metal/anvil/controller/store"
)

// tableKind defines a kind kept in a table of its own (chassis, deploy
// templates): a JSON document by uuid beside the columns its lists sort
// by. Its store methods are this one definition's, not a copy per kind.
type tableKind[T any] struct {
	table, what string // "deploy_templates", "deploy template" (in errors)
	byName      bool   // get finds by uuid, then by name
	revised     bool   // the table counts writes in a revision column
	uuid        func(v *T) string
	setID       func(v *T, id int64)
	// created are the columns written on create only, written those
	// written on create and update (beside uuid, revision and data).
	created, written func(s *Store, v *T) []column
	// inUse, if set, is what a delete refused by a foreign key means (a
	// chassis that nodes are in).
	inUse error
}

// column is a column and the value written to it.
type column struct {
	name string
	v    any
}

func (k *tableKind[T]) create(ctx context.Context, s *Store, v *T) error {
	data, err := stdjson.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s %s: %w", k.what, k.uuid(v), err)
	}
	p := params{k.uuid(v), data}
	names, vals := []string{"uuid", "data"}, []string{"$1", "$2"}
	if k.revised {
		names, vals = append(names, "revision"), append(vals, "1")
	}
	for _, c := range append(k.columns(s, v, k.created), k.columns(s, v, k.written)...) {
		names, vals = append(names, c.name), append(vals, p.add(c.v))
	}
	var id int64
	err = s.queryRow(ctx, s.w, `INSERT INTO `+k.table+` (`+strings.Join(names, ", ")+`) VALUES (`+strings.Join(vals, ", ")+`) RETURNING id`,
		p...).Scan(&id)
	if err != nil {
		return s.mapErr(err, "create "+k.what+" "+k.uuid(v))
	}
	k.setID(v, id)
	return nil
}

func (k *tableKind[T]) columns(s *Store, v *T, f func(*Store, *T) []column) []column {
	if f == nil {
		return nil
	}
	return f(s, v)
}

func (k *tableKind[T]) scan() func(scanner) (*T, error) {
	return scanResource(func(v *T, id, _ int64) { k.setID(v, id) })
}

// cols are what scan reads; a table without revisions reads 0.
func (k *tableKind[T]) cols() string {
	if k.revised {
		return "id, revision, data"
	}
	return "id, 0, data"
}

func (k *tableKind[T]) get(ctx context.Context, s *Store, ident string) (*T, error) {
	q := `SELECT ` + k.cols() + ` FROM ` + k.table + ` WHERE uuid = $1`
	if k.byName {
		q += ` OR name = $1 ORDER BY uuid = $1 DESC LIMIT 1`
	}
	v, err := k.scan()(s.queryRow(ctx, s.r, q, ident))
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("%s %s: %w", k.what, ident, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get %s %s: %w", k.what, ident, err)
	}
	return v, nil
}

func (k *tableKind[T]) list(ctx context.Context, s *Store, where []string, args params, p store.Page) ([]*T, error) {
	return listPage(ctx, s, k.table, k.cols(), where, args, p, k.scan())
}

func (k *tableKind[T]) update(ctx context.Context, s *Store, v *T) error {
	data, err := stdjson.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s %s: %w", k.what, k.uuid(v), err)
	}
	p := params{k.uuid(v), data}
	set := []string{"data = $2"}
	if k.revised {
		set = append(set, "revision = revision + 1")
	}
	for _, c := range k.columns(s, v, k.written) {
		set = append(set, c.name+" = "+p.add(c.v))
	}
	res, err := s.exec(ctx, s.w, `UPDATE `+k.table+` SET `+strings.Join(set, ", ")+` WHERE uuid = $1`, p...)
	if err != nil {
		return s.mapErr(err, "update "+k.what+" "+k.uuid(v))
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%s %s: %w", k.what, k.uuid(v), store.ErrNotFound)
	}
	return nil
}

func (k *tableKind[T]) delete(ctx context.Context, s *Store, uuid string) error {
	res, err := s.exec(ctx, s.w, `DELETE FROM `+k.table+` WHERE uuid = $1`, uuid)
	if err != nil {
		if k.inUse != nil && s.d.missingParent(err) {
			return fmt.Errorf("delete %s %s: %w", k.what, uuid, k.inUse)
		}
		return fmt.Errorf("delete %s %s: %w", k.what, uuid, err)
	}
	if n, _ := res.RowsAffected(); n == 0 {
		return fmt.Errorf("%s %s: %w", k.what, uuid, store.ErrNotFound)
	}
	return nil
}
