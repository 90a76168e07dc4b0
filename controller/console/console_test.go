package console_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/console"
	"github.com/anvil-metal/anvil/controller/store"
)

const node = "1be26c0b-03f2-4d2e-ae87-c02d7f33c123"

func newManager(t *testing.T) (*console.Manager, *console.Fake) {
	f := console.NewFake()
	m := console.New(console.Config{Opener: f, MinBackoff: 10 * time.Millisecond, MaxBackoff: 40 * time.Millisecond, Scrollback: 64})
	t.Cleanup(m.Close)
	return m, f
}

func waitOpened(t *testing.T, f *console.Fake) {
	t.Helper()
	select {
	case <-f.Opened():
	case <-time.After(5 * time.Second):
		t.Fatal("the console session was not opened")
	}
}

// read collects a viewer's output until it contains want.
func read(t *testing.T, v *console.Viewer, want string) string {
	t.Helper()
	var got strings.Builder
	deadline := time.After(5 * time.Second)
	for !strings.Contains(got.String(), want) {
		select {
		case p, ok := <-v.Output():
			if !ok {
				t.Fatalf("output ended before %q; got %q", want, got.String())
			}
			got.Write(p)
		case <-deadline:
			t.Fatalf("no %q in %q", want, got.String())
		}
	}
	return got.String()
}

func TestConsoleScrollbackViewersAndInput(t *testing.T) {
	m, f := newManager(t)
	_, err := m.Attach(node, true)
	assert.ErrorIs(t, err, console.ErrNotEnabled)

	require.NoError(t, m.Enable(&store.Node{UUID: node}))
	waitOpened(t, f)
	assert.True(t, m.Enabled(node))
	assert.Len(t, m.Token(node), 48)
	require.True(t, f.Print("Linux version 6.1\r\n"))

	// Nobody watched; the scrollback kept it.
	require.Eventually(t, func() bool { b, _ := m.Scrollback(node); return strings.Contains(string(b), "Linux version") }, 5*time.Second, 5*time.Millisecond)

	first, err := m.Attach(node, true)
	require.NoError(t, err)
	second, err := m.Attach(node, true)
	require.NoError(t, err)
	assert.True(t, first.CanWrite())
	assert.False(t, second.CanWrite(), "one writer at a time")
	read(t, first, "Linux version")
	read(t, second, "Linux version")

	f.Print("login: ")
	read(t, first, "login: ")
	read(t, second, "login: ")

	_, err = first.Write([]byte("root\r"))
	require.NoError(t, err)
	_, err = second.Write([]byte("x"))
	assert.ErrorIs(t, err, console.ErrReadOnly)
	require.Eventually(t, func() bool { return f.Typed() == "root\r" }, 5*time.Second, 5*time.Millisecond)

	// The writer leaves: the next viewer to ask gets the input.
	first.Close()
	third, err := m.Attach(node, true)
	require.NoError(t, err)
	assert.True(t, third.CanWrite())

	m.Disable(node)
	for _, v := range []*console.Viewer{second, third} {
		for range v.Output() {
		}
	}
	assert.False(t, m.Enabled(node))
	assert.Empty(t, m.Token(node))
	assert.Equal(t, 1, f.Closes())
	b, ok := m.Scrollback(node)
	assert.True(t, ok, "the scrollback outlives the session")
	assert.Contains(t, string(b), "login: ")
	assert.LessOrEqual(t, len(b), 64)
}

func TestConsoleReopensAfterADrop(t *testing.T) {
	m, f := newManager(t)
	require.NoError(t, m.Enable(&store.Node{UUID: node}))
	waitOpened(t, f)
	v, err := m.Attach(node, false)
	require.NoError(t, err)
	f.Fail(errors.New("BMC busy"))
	f.Drop()
	out := read(t, v, "[anvil] cannot open the console: BMC busy")
	assert.Contains(t, out, "console lost (fake BMC dropped the session)")
	f.Fail(nil)
	waitOpened(t, f)
	read(t, v, "[anvil] console connected")
	assert.GreaterOrEqual(t, f.Opens(), 2)
	require.NoError(t, m.Enable(&store.Node{UUID: node}), "enabling twice is a no-op")
	assert.Equal(t, []string{node}, m.Held())
}

func TestConsoleDropsASlowViewer(t *testing.T) {
	f := console.NewFake()
	m := console.New(console.Config{Opener: f, ViewerBuffer: 2})
	defer m.Close()
	require.NoError(t, m.Enable(&store.Node{UUID: node}))
	waitOpened(t, f)
	slow, err := m.Attach(node, true)
	require.NoError(t, err)
	for range 10 {
		f.Print("x")
	}
	require.Eventually(t, func() bool {
		_, err := slow.Write([]byte("y"))
		return errors.Is(err, console.ErrNotEnabled)
	}, 5*time.Second, 5*time.Millisecond, "a viewer that does not read is dropped, not waited for")
	fresh, err := m.Attach(node, true)
	require.NoError(t, err)
	assert.True(t, fresh.CanWrite(), "the dropped viewer's input is free again")
}

// A node that changes hands keeps nothing of its console for the next
// tenant: the kept scrollback is served only under the owner, lessee and
// instance it was recorded under, and enabling the console again for
// another tenant starts an empty one.
func TestConsoleScrollbackStaysWithItsTenant(t *testing.T) {
	m, f := newManager(t)
	acme, inst := "acme", "inst-1"
	leased := &store.Node{UUID: node, Lessee: &acme, InstanceUUID: &inst}
	require.NoError(t, m.Enable(leased))
	waitOpened(t, f)
	f.Print("password: hunter2\r\n")
	require.Eventually(t, func() bool { b, _ := m.ScrollbackOf(leased); return strings.Contains(string(b), "hunter2") },
		5*time.Second, 5*time.Millisecond)
	m.Disable(node)

	b, ok := m.ScrollbackOf(leased)
	assert.True(t, ok, "the tenant still reads it after the console is disabled")
	assert.Contains(t, string(b), "hunter2")
	torn := &store.Node{UUID: node} // torn down: no lessee, no instance
	_, ok = m.ScrollbackOf(torn)
	assert.False(t, ok, "not for whoever has the node next")

	require.NoError(t, m.Enable(torn))
	b, ok = m.ScrollbackOf(torn)
	assert.True(t, ok)
	assert.NotContains(t, string(b), "hunter2", "a new tenancy starts an empty scrollback")
	m.Disable(node)
}
