package conductor

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store/storetest"
)

// removedImages is a DataImages that records what is removed.
type removedImages struct {
	mu      sync.Mutex
	removed []string
}

func (r *removedImages) Publish(context.Context, string, string, string, string) (string, error) {
	return "", nil
}

func (r *removedImages) Remove(nodeUUID, device string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.removed = append(r.removed, nodeUUID+"/"+device)
}

// TestTearDownRemovesDataImages: undeploying an instance removes the
// images the vmedia API downloaded for the node, so whoever gets the node
// next is not served them.
func TestTearDownRemovesDataImages(t *testing.T) {
	imgs := &removedImages{}
	e := start(t, &scriptDriver{}, Config{DataImages: imgs}, nil)
	ctx := context.Background()
	n := storetest.NewNode("")
	n.Driver, n.ProvisionState = "script", string(state.Active)
	require.NoError(t, e.st.CreateNode(ctx, n))
	require.NoError(t, e.c.Provision(ctx, n.UUID, ProvisionRequest{Target: "deleted"}))
	e.wait(t, n.UUID, state.Available)
	imgs.mu.Lock()
	defer imgs.mu.Unlock()
	assert.Equal(t, []string{n.UUID + "/disk", n.UUID + "/cdrom", n.UUID + "/floppy"}, imgs.removed)
}
