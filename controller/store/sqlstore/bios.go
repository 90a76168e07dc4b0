package sqlstore

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"time"

	"github.com/anvil-metal/anvil/controller/store"
)

// BIOS settings and firmware components: per node, one row per name with
// the document in data; both are replaced as a whole set (nodeSet).

// nodeSet is a per-node set of documents keyed by a name: the one
// definition of ReplaceBIOSSettings and ReplaceFirmwareComponents.
type nodeSet[T any] struct {
	table, key, what string // "bios_settings", "name", "BIOS setting"
	name             func(v *T) string
	// merge fills in v, the reported item, from old, the stored one (nil:
	// none), and says whether v differs from old (a row to write).
	merge func(old, v *T, now time.Time) bool
}

var biosSet = nodeSet[store.BIOSSetting]{table: "bios_settings", key: "name", what: "BIOS setting",
	name: func(v *store.BIOSSetting) string { return v.Name }, merge: mergeBIOS}

var firmwareSet = nodeSet[store.FirmwareComponent]{table: "firmware_components", key: "component", what: "firmware component",
	name: func(v *store.FirmwareComponent) string { return v.Component }, merge: mergeFirmware}

// mergeBIOS keeps the stored created_at and moves updated_at only when
// the value changed, as Ironic's BIOSSettingList.sync_node_setting does;
// the registry fields are taken from the report.
func mergeBIOS(old, v *store.BIOSSetting, now time.Time) bool {
	if len(v.AllowableValues) == 0 {
		v.AllowableValues = nil // as decoded: omitted when empty
	}
	if old == nil {
		if v.CreatedAt.IsZero() {
			v.CreatedAt = now
		}
		return true
	}
	v.CreatedAt, v.UpdatedAt = old.CreatedAt, old.UpdatedAt
	if v.Value != old.Value {
		v.UpdatedAt = &now
	}
	return !reflect.DeepEqual(*old, *v)
}

// mergeFirmware keeps initial_version and created_at once a component is
// known; updated_at moves when a version changed.
func mergeFirmware(old, v *store.FirmwareComponent, now time.Time) bool {
	if old == nil {
		if v.InitialVersion == "" {
			v.InitialVersion = v.CurrentVersion
		}
		if v.CreatedAt.IsZero() {
			v.CreatedAt = now
		}
		return true
	}
	v.InitialVersion, v.CreatedAt, v.UpdatedAt = old.InitialVersion, old.CreatedAt, old.UpdatedAt
	if v.LastVersionFlashed == nil {
		v.LastVersionFlashed = old.LastVersionFlashed
	}
	if v.CurrentVersion != old.CurrentVersion || !reflect.DeepEqual(v.LastVersionFlashed, old.LastVersionFlashed) {
		v.UpdatedAt = &now
		return true
	}
	return false
}

// replace makes items the node's whole set in one transaction, writing
// only the rows that change. Concurrent replaces of one node (PostgreSQL)
// cannot fail on a duplicate row: each write is an upsert.
func (k *nodeSet[T]) replace(ctx context.Context, s *Store, nodeUUID string, items []T) error {
	now := time.Now().UTC().Truncate(time.Microsecond)
	given := make(map[string]bool, len(items))
	for i := range items {
		name := k.name(&items[i])
		if name == "" {
			return fmt.Errorf("replace %ss of node %s: a %s has no %s", k.what, nodeUUID, k.what, k.key)
		}
		if given[name] {
			return fmt.Errorf("replace %ss of node %s: %s %q appears twice", k.what, nodeUUID, k.what, name)
		}
		given[name] = true
	}
	err := s.inTx(ctx, func(tx *sql.Tx) error {
		var count int
		if err := s.queryRow(ctx, tx, `SELECT COUNT(*) FROM nodes WHERE uuid = $1`, nodeUUID).Scan(&count); err != nil {
			return err
		}
		if count == 0 {
			return fmt.Errorf("node %s: %w", nodeUUID, store.ErrNotFound)
		}
		stored, err := k.list(ctx, s, tx, nodeUUID)
		if err != nil {
			return err
		}
		old := make(map[string]*T, len(stored))
		for i := range stored {
			name := k.name(&stored[i])
			old[name] = &stored[i]
			if !given[name] {
				if _, err := s.exec(ctx, tx, `DELETE FROM `+k.table+` WHERE node_uuid = $1 AND `+k.key+` = $2`, nodeUUID, name); err != nil {
					return err
				}
			}
		}
		for i := range items {
			v := items[i] // the caller's slice stays as given
			if !k.merge(old[k.name(&v)], &v, now) {
				continue
			}
			data, err := json.Marshal(&v)
			if err != nil {
				return fmt.Errorf("encode %s %q: %w", k.what, k.name(&v), err)
			}
			if _, err := s.exec(ctx, tx, `INSERT INTO `+k.table+` (node_uuid, `+k.key+`, data) VALUES ($1, $2, $3)
				ON CONFLICT (node_uuid, `+k.key+`) DO UPDATE SET data = excluded.data`, nodeUUID, k.name(&v), data); err != nil {
				return s.mapErr(err, "write "+k.what+" "+k.name(&v))
			}
		}
		return nil
	})
	if err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("replace %ss of node %s: %w", k.what, nodeUUID, err)
	}
	return err
}

// list reads the node's set on db, by name (byte order on both databases).
func (k *nodeSet[T]) list(ctx context.Context, s *Store, db execer, nodeUUID string) ([]T, error) {
	rows, err := s.query(ctx, db, `SELECT data FROM `+k.table+` WHERE node_uuid = $1 ORDER BY `+k.key, nodeUUID)
	if err != nil {
		return nil, fmt.Errorf("list %ss of node %s: %w", k.what, nodeUUID, err)
	}
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		var data []byte
		if err := rows.Scan(&data); err != nil {
			return nil, fmt.Errorf("list %ss of node %s: %w", k.what, nodeUUID, err)
		}
		var v T
		if err := json.Unmarshal(data, &v); err != nil {
			return nil, fmt.Errorf("decode %s of node %s: %w", k.what, nodeUUID, err)
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("list %ss of node %s: %w", k.what, nodeUUID, err)
	}
	return out, nil
}

// ReplaceBIOSSettings implements store.BIOSSettings.
func (s *Store) ReplaceBIOSSettings(ctx context.Context, nodeUUID string, settings []store.BIOSSetting) error {
	return biosSet.replace(ctx, s, nodeUUID, settings)
}

// ListBIOSSettings implements store.BIOSSettings.
func (s *Store) ListBIOSSettings(ctx context.Context, nodeUUID string) ([]store.BIOSSetting, error) {
	return biosSet.list(ctx, s, s.r, nodeUUID)
}

// GetBIOSSetting implements store.BIOSSettings.
func (s *Store) GetBIOSSetting(ctx context.Context, nodeUUID, name string) (*store.BIOSSetting, error) {
	var data []byte
	err := s.queryRow(ctx, s.r, `SELECT data FROM bios_settings WHERE node_uuid = $1 AND name = $2`, nodeUUID, name).Scan(&data)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, fmt.Errorf("BIOS setting %q of node %s: %w", name, nodeUUID, store.ErrNotFound)
	}
	if err != nil {
		return nil, fmt.Errorf("get BIOS setting %q of node %s: %w", name, nodeUUID, err)
	}
	var v store.BIOSSetting
	if err := json.Unmarshal(data, &v); err != nil {
		return nil, fmt.Errorf("decode BIOS setting %q of node %s: %w", name, nodeUUID, err)
	}
	return &v, nil
}

// ReplaceFirmwareComponents implements store.BIOSSettings.
func (s *Store) ReplaceFirmwareComponents(ctx context.Context, nodeUUID string, comps []store.FirmwareComponent) error {
	return firmwareSet.replace(ctx, s, nodeUUID, comps)
}

// ListFirmwareComponents implements store.BIOSSettings.
func (s *Store) ListFirmwareComponents(ctx context.Context, nodeUUID string) ([]store.FirmwareComponent, error) {
	return firmwareSet.list(ctx, s, s.r, nodeUUID)
}
