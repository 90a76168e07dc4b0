package storetest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

func intp(i int) *int { return &i }

func biosNames(list []store.BIOSSetting) []string {
	out := make([]string, len(list))
	for i, s := range list {
		out[i] = s.Name
	}
	return out
}

// testBIOSSettings: a replace is the whole set; an unchanged name keeps
// its created_at and updated_at, a changed value moves updated_at only;
// registry fields round-trip; bad sets and unknown nodes are refused; a
// node's settings go with it.
func testBIOSSettings(t *testing.T, s store.Store) {
	ctx := context.Background()
	a, b := NewNode("a"), NewNode("b")
	require.NoError(t, s.CreateNode(ctx, a))
	require.NoError(t, s.CreateNode(ctx, b))

	list, err := s.ListBIOSSettings(ctx, a.UUID)
	require.NoError(t, err)
	assert.Empty(t, list)

	reg := store.BIOSSetting{Name: "ProcVirtualization", Value: "Enabled", AttributeType: "Enumeration",
		AllowableValues: []string{"Enabled", "Disabled"}, ReadOnly: boolp(false), ResetRequired: boolp(true), Unique: boolp(false)}
	first := []store.BIOSSetting{reg, {Name: "BootMode", Value: "Uefi"},
		{Name: "NumCores", Value: "8", AttributeType: "Integer", LowerBound: intp(1), UpperBound: intp(64)},
		{Name: "AssetTag", Value: "", AttributeType: "String", MinLength: intp(0), MaxLength: intp(32)}}
	require.NoError(t, s.ReplaceBIOSSettings(ctx, a.UUID, first))
	require.NoError(t, s.ReplaceBIOSSettings(ctx, b.UUID, []store.BIOSSetting{{Name: "BootMode", Value: "Bios"}}))
	assert.Empty(t, first[1].CreatedAt, "the caller's slice is left as given")

	list, err = s.ListBIOSSettings(ctx, a.UUID)
	require.NoError(t, err)
	assert.Equal(t, []string{"AssetTag", "BootMode", "NumCores", "ProcVirtualization"}, biosNames(list), "by name")
	got := list[3]
	assert.False(t, got.CreatedAt.IsZero())
	assert.Nil(t, got.UpdatedAt)
	created := got.CreatedAt
	got.CreatedAt, got.UpdatedAt = time.Time{}, nil
	assert.Equal(t, reg, got)
	assert.Equal(t, intp(32), list[0].MaxLength)
	assert.Equal(t, "", list[0].Value)
	assert.Equal(t, intp(64), list[2].UpperBound)

	one, err := s.GetBIOSSetting(ctx, a.UUID, "BootMode")
	require.NoError(t, err)
	assert.Equal(t, "Uefi", one.Value)
	_, err = s.GetBIOSSetting(ctx, a.UUID, "NoSuch")
	assert.ErrorIs(t, err, store.ErrNotFound)
	_, err = s.GetBIOSSetting(ctx, b.UUID, "NumCores")
	assert.ErrorIs(t, err, store.ErrNotFound, "settings are per node")

	time.Sleep(2 * time.Millisecond)
	// BootMode changes, NumCores goes, NewOne comes, the rest is as it was
	second := []store.BIOSSetting{reg, {Name: "BootMode", Value: "Bios"}, first[3], {Name: "NewOne", Value: "x"}}
	require.NoError(t, s.ReplaceBIOSSettings(ctx, a.UUID, second))
	list, err = s.ListBIOSSettings(ctx, a.UUID)
	require.NoError(t, err)
	assert.Equal(t, []string{"AssetTag", "BootMode", "NewOne", "ProcVirtualization"}, biosNames(list))
	byName := map[string]store.BIOSSetting{}
	for _, v := range list {
		byName[v.Name] = v
	}
	assert.True(t, byName["ProcVirtualization"].CreatedAt.Equal(created), "unchanged: created_at kept")
	assert.Nil(t, byName["ProcVirtualization"].UpdatedAt, "unchanged: not updated")
	boot := byName["BootMode"]
	assert.Equal(t, "Bios", boot.Value)
	assert.True(t, boot.CreatedAt.Equal(created), "changed: created_at kept")
	require.NotNil(t, boot.UpdatedAt, "changed: updated_at set")
	assert.True(t, boot.UpdatedAt.After(created))
	assert.True(t, byName["NewOne"].CreatedAt.After(created))

	// a registry change alone is kept without moving updated_at
	reg2 := reg
	reg2.AllowableValues = []string{"Enabled", "Disabled", "Auto"}
	require.NoError(t, s.ReplaceBIOSSettings(ctx, a.UUID, []store.BIOSSetting{reg2, boot}))
	one, err = s.GetBIOSSetting(ctx, a.UUID, "ProcVirtualization")
	require.NoError(t, err)
	assert.Equal(t, []string{"Enabled", "Disabled", "Auto"}, one.AllowableValues)
	assert.Nil(t, one.UpdatedAt)

	// times given for a new name are kept (an import)
	t0 := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	t1 := t0.Add(time.Hour)
	require.NoError(t, s.ReplaceBIOSSettings(ctx, b.UUID, []store.BIOSSetting{{Name: "Imported", Value: "1", CreatedAt: t0, UpdatedAt: &t1}}))
	one, err = s.GetBIOSSetting(ctx, b.UUID, "Imported")
	require.NoError(t, err)
	assert.True(t, one.CreatedAt.Equal(t0), one.CreatedAt)
	require.NotNil(t, one.UpdatedAt)
	assert.True(t, one.UpdatedAt.Equal(t1))

	// refused: an unknown node, an empty or a repeated name; nothing changes
	assert.ErrorIs(t, s.ReplaceBIOSSettings(ctx, "no-such-node", []store.BIOSSetting{{Name: "X"}}), store.ErrNotFound)
	assert.ErrorIs(t, s.ReplaceBIOSSettings(ctx, "no-such-node", nil), store.ErrNotFound)
	assert.Error(t, s.ReplaceBIOSSettings(ctx, a.UUID, []store.BIOSSetting{{Name: ""}}))
	assert.Error(t, s.ReplaceBIOSSettings(ctx, a.UUID, []store.BIOSSetting{{Name: "X"}, {Name: "X"}}))
	list, err = s.ListBIOSSettings(ctx, a.UUID)
	require.NoError(t, err)
	assert.Equal(t, []string{"BootMode", "ProcVirtualization"}, biosNames(list))

	// an empty set clears the node's settings
	require.NoError(t, s.ReplaceBIOSSettings(ctx, a.UUID, nil))
	list, err = s.ListBIOSSettings(ctx, a.UUID)
	require.NoError(t, err)
	assert.Empty(t, list)

	// a deleted node takes its settings and firmware with it
	require.NoError(t, s.ReplaceFirmwareComponents(ctx, b.UUID, []store.FirmwareComponent{{Component: "bmc", CurrentVersion: "1.0"}}))
	require.NoError(t, s.DeleteNode(ctx, mustGet(t, s, b.UUID)))
	list, err = s.ListBIOSSettings(ctx, b.UUID)
	require.NoError(t, err)
	assert.Empty(t, list)
	fw, err := s.ListFirmwareComponents(ctx, b.UUID)
	require.NoError(t, err)
	assert.Empty(t, fw)
	// a new node of the same UUID starts with none
	again := NewNode("b")
	again.UUID = b.UUID
	require.NoError(t, s.CreateNode(ctx, again))
	list, err = s.ListBIOSSettings(ctx, b.UUID)
	require.NoError(t, err)
	assert.Empty(t, list)
}

func mustGet(t *testing.T, s store.Store, ident string) *store.Node {
	t.Helper()
	n, err := s.GetNode(context.Background(), ident)
	require.NoError(t, err)
	return n
}

// testFirmwareComponents: initial_version is the first version seen and
// never changes; current_version follows the reports; last_version_flashed
// is kept unless given; updated_at moves only when a version changes.
func testFirmwareComponents(t *testing.T, s store.Store) {
	ctx := context.Background()
	n := NewNode("fw")
	require.NoError(t, s.CreateNode(ctx, n))
	require.NoError(t, s.ReplaceFirmwareComponents(ctx, n.UUID, []store.FirmwareComponent{
		{Component: "bmc", CurrentVersion: "1.0"}, {Component: "bios", CurrentVersion: "2.1"}, {Component: "nic:NIC.1", CurrentVersion: "20.0"}}))
	list, err := s.ListFirmwareComponents(ctx, n.UUID)
	require.NoError(t, err)
	require.Len(t, list, 3)
	assert.Equal(t, "bios", list[0].Component, "by name")
	assert.Equal(t, "bmc", list[1].Component)
	assert.Equal(t, "nic:NIC.1", list[2].Component)
	for _, c := range list {
		assert.Equal(t, c.CurrentVersion, c.InitialVersion, c.Component)
		assert.Nil(t, c.LastVersionFlashed)
		assert.Nil(t, c.UpdatedAt)
		assert.False(t, c.CreatedAt.IsZero())
	}
	created := list[1].CreatedAt

	time.Sleep(2 * time.Millisecond)
	// the update step flashed the BMC; the NIC is gone; bios unchanged
	require.NoError(t, s.ReplaceFirmwareComponents(ctx, n.UUID, []store.FirmwareComponent{
		{Component: "bmc", CurrentVersion: "1.2", LastVersionFlashed: strp("1.2")}, {Component: "bios", CurrentVersion: "2.1"}}))
	list, err = s.ListFirmwareComponents(ctx, n.UUID)
	require.NoError(t, err)
	require.Len(t, list, 2)
	bios, bmc := list[0], list[1]
	assert.Nil(t, bios.UpdatedAt, "unchanged")
	assert.Equal(t, "1.0", bmc.InitialVersion, "initial_version never changes")
	assert.Equal(t, "1.2", bmc.CurrentVersion)
	assert.Equal(t, strp("1.2"), bmc.LastVersionFlashed)
	assert.True(t, bmc.CreatedAt.Equal(created))
	require.NotNil(t, bmc.UpdatedAt)
	updated := *bmc.UpdatedAt

	// a later read-back without last_version_flashed keeps it
	require.NoError(t, s.ReplaceFirmwareComponents(ctx, n.UUID, []store.FirmwareComponent{
		{Component: "bmc", CurrentVersion: "1.2", InitialVersion: "ignored"}, {Component: "bios", CurrentVersion: "2.1"}}))
	list, err = s.ListFirmwareComponents(ctx, n.UUID)
	require.NoError(t, err)
	bmc = list[1]
	assert.Equal(t, "1.0", bmc.InitialVersion)
	assert.Equal(t, strp("1.2"), bmc.LastVersionFlashed)
	require.NotNil(t, bmc.UpdatedAt)
	assert.True(t, bmc.UpdatedAt.Equal(updated), "nothing changed: updated_at stays")

	// a new component may be given its initial version (an import)
	require.NoError(t, s.ReplaceFirmwareComponents(ctx, n.UUID, []store.FirmwareComponent{
		{Component: "bmc", CurrentVersion: "1.2"}, {Component: "nic:X", InitialVersion: "0.9", CurrentVersion: "1.0"}}))
	list, err = s.ListFirmwareComponents(ctx, n.UUID)
	require.NoError(t, err)
	require.Len(t, list, 2)
	assert.Equal(t, "0.9", list[1].InitialVersion)

	assert.ErrorIs(t, s.ReplaceFirmwareComponents(ctx, "no-such-node", nil), store.ErrNotFound)
	assert.Error(t, s.ReplaceFirmwareComponents(ctx, n.UUID, []store.FirmwareComponent{{Component: "bmc"}, {Component: "bmc"}}))
	assert.Error(t, s.ReplaceFirmwareComponents(ctx, n.UUID, []store.FirmwareComponent{{CurrentVersion: "1"}}))
}
