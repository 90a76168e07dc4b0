package conductor

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/state"
	"github.com/anvil-metal/anvil/controller/store"
	"github.com/anvil-metal/anvil/controller/store/storetest"
)

// biosDriver is fake-hardware whose BIOS reports what the test sets.
type biosDriver struct {
	FakeDriver
	mu       sync.Mutex
	settings []store.BIOSSetting
	err      error
}

func (d *biosDriver) Name() string { return "bios" }

func (d *biosDriver) BIOSSettings(context.Context, *store.Node) ([]store.BIOSSetting, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.settings, d.err
}

func (d *biosDriver) set(settings []store.BIOSSetting, err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.settings, d.err = settings, err
}

func biosValues(t *testing.T, st store.Store, id string) map[string]string {
	t.Helper()
	list, err := st.ListBIOSSettings(context.Background(), id)
	require.NoError(t, err)
	out := map[string]string{}
	for _, s := range list {
		out[s.Name] = s.Value
	}
	return out
}

// TestBIOSCacheRefreshedAfterVerifyAndCleaning: manage caches what the
// BIOS reports, cleaning refreshes it, and a BIOS that cannot be read
// fails neither (the cache keeps what it had).
func TestBIOSCacheRefreshedAfterVerifyAndCleaning(t *testing.T) {
	drv := &biosDriver{settings: []store.BIOSSetting{{Name: "BootMode", Value: "Uefi"}, {Name: "HT", Value: "On"}}}
	e := start(t, drv, Config{}, nil)
	ctx := context.Background()
	n := storetest.NewNode("")
	n.Driver = "bios"
	require.NoError(t, e.st.CreateNode(ctx, n))

	require.NoError(t, e.c.Provision(ctx, n.UUID, ProvisionRequest{Target: "manage"}))
	e.wait(t, n.UUID, state.Manageable)
	assert.Equal(t, map[string]string{"BootMode": "Uefi", "HT": "On"}, biosValues(t, e.st, n.UUID))

	drv.set([]store.BIOSSetting{{Name: "BootMode", Value: "Bios"}}, nil)
	require.NoError(t, e.c.Provision(ctx, n.UUID, ProvisionRequest{Target: "provide"}))
	e.wait(t, n.UUID, state.Available)
	assert.Equal(t, map[string]string{"BootMode": "Bios"}, biosValues(t, e.st, n.UUID), "refreshed after cleaning")

	// a BIOS that cannot be read: verify still succeeds, the cache stays
	m := storetest.NewNode("")
	m.Driver = "bios"
	require.NoError(t, e.st.CreateNode(ctx, m))
	require.NoError(t, e.st.ReplaceBIOSSettings(ctx, m.UUID, []store.BIOSSetting{{Name: "Old", Value: "1"}}))
	drv.set(nil, errors.New("BMC says no"))
	require.NoError(t, e.c.Provision(ctx, m.UUID, ProvisionRequest{Target: "manage"}))
	got := e.wait(t, m.UUID, state.Manageable)
	assert.Nil(t, got.LastError)
	assert.Equal(t, map[string]string{"Old": "1"}, biosValues(t, e.st, m.UUID))
}

// TestFakeHardwareReportsBIOS: fake-hardware reports its fixed set when a
// node becomes manageable, so the API has something to show.
func TestFakeHardwareReportsBIOS(t *testing.T) {
	e := start(t, FakeDriver{}, Config{}, nil)
	ctx := context.Background()
	n := storetest.NewNode("")
	require.NoError(t, e.st.CreateNode(ctx, n))
	require.NoError(t, e.c.Provision(ctx, n.UUID, ProvisionRequest{Target: "manage"}))
	e.wait(t, n.UUID, state.Manageable)
	got := biosValues(t, e.st, n.UUID)
	assert.Equal(t, "Uefi", got["BootMode"])
	assert.Len(t, got, 5)
}
