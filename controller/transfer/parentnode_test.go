package transfer

import (
	"bytes"
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

// TestParentNodeAndFirmwareInterfaceTravel: a child's parent_node (API
// 1.83) and a node's firmware_interface (1.86) are exported and imported
// with the node, and the imported child is found by the parent filter
// (the store's column, not only the document). The child, created first,
// is exported before its parent: import does not need the parent first,
// as there is no foreign key.
func TestParentNodeAndFirmwareInterfaceTravel(t *testing.T) {
	ctx := context.Background()
	src := openSQLite(t)
	parent := &store.Node{UUID: "aaaaaaaa-0000-4000-8000-000000000001", Name: strp("host"), Driver: "redfish",
		ProvisionState: "enroll", CreatedAt: at(1), Interfaces: store.Interfaces{Firmware: "no-firmware"}}
	child := &store.Node{UUID: "bbbbbbbb-0000-4000-8000-000000000002", Name: strp("dpu"), Driver: "fake-hardware",
		ProvisionState: "enroll", CreatedAt: at(2), ParentNode: strp(parent.UUID)}
	require.NoError(t, src.CreateNode(ctx, child))
	require.NoError(t, src.CreateNode(ctx, parent))
	doc, sum := export(t, src, ExportOptions{})
	assert.Equal(t, 2, sum.Nodes)
	assert.Less(t, bytes.Index(doc, []byte(child.UUID)), bytes.Index(doc, []byte(`"uuid":"`+parent.UUID)), "the child comes first")

	dst := openSQLite(t)
	_, err := Import(ctx, dst, bytes.NewReader(doc), ImportOptions{})
	require.NoError(t, err)
	got, err := dst.GetNode(ctx, "dpu")
	require.NoError(t, err)
	require.NotNil(t, got.ParentNode)
	assert.Equal(t, parent.UUID, *got.ParentNode)
	host, err := dst.GetNode(ctx, "host")
	require.NoError(t, err)
	assert.Nil(t, host.ParentNode)
	assert.Equal(t, "no-firmware", host.Interfaces.Firmware)
	children, err := dst.ListNodes(ctx, store.NodeFilter{ParentNode: strp(parent.UUID)}, store.Page{})
	require.NoError(t, err)
	require.Len(t, children, 1)
	assert.Equal(t, child.UUID, children[0].UUID)
	again, _ := export(t, dst, ExportOptions{})
	assert.Equal(t, string(doc), string(again))
}
