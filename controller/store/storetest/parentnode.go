package storetest

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/store"
)

// testParentNode: a node's parent_node (API 1.83) is kept in the document
// and in the column lists filter on, through create, update (the full and
// the narrow statement) and a parent's deletion, which leaves its children
// pointing at it, as Ironic does.
func testParentNode(t *testing.T, s store.Store) {
	ctx := context.Background()
	parent, child, other := NewNode("parent"), NewNode("child"), NewNode("other")
	child.ParentNode = strp(parent.UUID)
	for _, n := range []*store.Node{parent, child, other} {
		require.NoError(t, s.CreateNode(ctx, n))
	}
	got, err := s.GetNode(ctx, "child")
	require.NoError(t, err)
	require.NotNil(t, got.ParentNode)
	assert.Equal(t, parent.UUID, *got.ParentNode)

	names := func(f store.NodeFilter) []string {
		nodes, err := s.ListNodes(ctx, f, store.Page{SortKey: "name"})
		require.NoError(t, err)
		sums, err := s.ListNodeSummaries(ctx, f, store.Page{SortKey: "name"})
		require.NoError(t, err)
		var out, fromSums []string
		for _, n := range nodes {
			out = append(out, *n.Name)
		}
		for _, n := range sums {
			fromSums = append(fromSums, *n.Name)
		}
		assert.Equal(t, out, fromSums, "summaries filter as lists do")
		return out
	}
	check := func(when string, want map[string][]string) {
		for name, f := range map[string]store.NodeFilter{
			"all":         {},
			"no parent":   {IsChild: boolp(false)},
			"children":    {IsChild: boolp(true)},
			"of parent":   {ParentNode: strp(parent.UUID)},
			"of other":    {ParentNode: strp(other.UUID)},
			"of a parent": {ParentNode: strp(parent.UUID), IsChild: boolp(true)},
		} {
			assert.Equal(t, want[name], names(f), "%s: %s", when, name)
		}
	}
	check("created", map[string][]string{"all": {"child", "other", "parent"}, "no parent": {"other", "parent"},
		"children": {"child"}, "of parent": {"child"}, "of a parent": {"child"}})

	// moved to another parent, with a heartbeat-like update in between
	// (which changes no indexed column)
	_, err = store.MutateNode(ctx, s, "child", func(n *store.Node) error { n.ParentNode = strp(other.UUID); return nil })
	require.NoError(t, err)
	_, err = store.MutateNode(ctx, s, "child", func(n *store.Node) error { n.Extra = map[string]any{"hb": 1}; return nil })
	require.NoError(t, err)
	check("moved", map[string][]string{"all": {"child", "other", "parent"}, "no parent": {"other", "parent"},
		"children": {"child"}, "of other": {"child"}})

	// the parent deleted: the child keeps its parent_node
	o, err := s.GetNode(ctx, other.UUID)
	require.NoError(t, err)
	require.NoError(t, s.DeleteNode(ctx, o))
	got, err = s.GetNode(ctx, "child")
	require.NoError(t, err)
	require.NotNil(t, got.ParentNode)
	assert.Equal(t, other.UUID, *got.ParentNode)
	assert.Equal(t, []string{"child"}, names(store.NodeFilter{ParentNode: strp(other.UUID)}))

	_, err = store.MutateNode(ctx, s, "child", func(n *store.Node) error { n.ParentNode = nil; return nil })
	require.NoError(t, err)
	check("cleared", map[string][]string{"all": {"child", "parent"}, "no parent": {"child", "parent"}})
}
