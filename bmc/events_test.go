package bmc_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/bmc"
)

// received is one event POST as a subscriber saw it.
type received struct {
	header http.Header
	doc    map[string]any
}

// subscriber listens on loopback for the events anvil-vbmc posts.
func subscriber(t *testing.T) (string, <-chan received) {
	t.Helper()
	ch := make(chan received, 16)
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var doc map[string]any
		_ = json.Unmarshal(body, &doc)
		ch <- received{header: r.Header.Clone(), doc: doc}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(ts.Close)
	return ts.URL + "/events", ch
}

func next(t *testing.T, ch <-chan received) received {
	t.Helper()
	select {
	case r := <-ch:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no event arrived")
	}
	return received{}
}

func TestRedfishSubscriptionsAndEvents(t *testing.T) {
	env := startVBMC(t, "node-1")
	dest, events := subscriber(t)
	m := bmc.New(fastConfig(nil))
	ctx := context.Background()
	tg := env.target(t, "node-1", testPass)

	types, _, err := m.EventTypes(ctx, tg)
	require.NoError(t, err)
	assert.Contains(t, types, "Alert")

	sub, _, err := m.CreateSubscription(ctx, tg, bmc.SubscriptionRequest{Destination: dest, Context: "metal3-ctx", Protocol: "Redfish",
		EventTypes: []string{"Alert"}, HTTPHeaders: []map[string]string{{"X-Auth": "tok-1"}}})
	require.NoError(t, err)
	assert.Equal(t, "1", sub.ID)
	assert.Equal(t, dest, sub.Doc["Destination"])
	assert.Equal(t, "metal3-ctx", sub.Doc["Context"])
	assert.Equal(t, []any{"Alert"}, sub.Doc["EventTypes"])

	_, err = m.SetPower(ctx, tg, bmc.ActionOn)
	require.NoError(t, err)
	ev := next(t, events)
	assert.Equal(t, "tok-1", ev.header.Get("X-Auth"), "the subscription's HttpHeaders go with each event")
	assert.Equal(t, "metal3-ctx", ev.doc["Context"])
	list, _ := ev.doc["Events"].([]any)
	require.Len(t, list, 1)
	e0 := list[0].(map[string]any)
	assert.Equal(t, "Alert", e0["EventType"])
	assert.Equal(t, "ResourceEvent.1.3.ResourcePoweredOn", e0["MessageId"])
	assert.Equal(t, map[string]any{"@odata.id": "/redfish/v1/Systems/node-1"}, e0["OriginOfCondition"])

	iso := isoServer(t)
	_, err = m.AttachMedia(ctx, tg, bmc.MediaCD, iso+"/data.iso", time.Second)
	require.NoError(t, err)
	ev = next(t, events)
	e0 = ev.doc["Events"].([]any)[0].(map[string]any)
	assert.Equal(t, "ResourceEvent.1.3.ResourceChanged", e0["MessageId"])
	assert.Contains(t, e0["Message"], "inserted")

	coll, _, err := m.Subscriptions(ctx, tg)
	require.NoError(t, err)
	assert.Equal(t, "/redfish/v1/EventService/Subscriptions", coll["@odata.id"])
	assert.Equal(t, []any{map[string]any{"@odata.id": "/redfish/v1/EventService/Subscriptions/1"}}, coll["Members"])

	got, _, err := m.GetSubscription(ctx, tg, "1")
	require.NoError(t, err)
	assert.Equal(t, dest, got.Doc["Destination"])
	assert.Equal(t, []any{}, got.Doc["HttpHeaders"], "headers are never read back")

	_, err = m.DeleteSubscription(ctx, tg, "1")
	require.NoError(t, err)
	_, err = m.DeleteSubscription(ctx, tg, "1")
	assert.ErrorIs(t, err, bmc.ErrNoSubscription)
	_, _, err = m.GetSubscription(ctx, tg, "1")
	assert.ErrorIs(t, err, bmc.ErrNoSubscription)

	_, err = m.SetPower(ctx, tg, bmc.ActionOff)
	require.NoError(t, err)
	env.srv.WaitEvents()
	select {
	case r := <-events:
		t.Fatalf("an event after the subscription was deleted: %v", r.doc)
	default:
	}
}

func TestRedfishSubscriptionRefusedByTheBMC(t *testing.T) {
	env := startVBMC(t, "node-1")
	m := bmc.New(fastConfig(nil))
	tg := env.target(t, "node-1", testPass)
	for _, req := range []bmc.SubscriptionRequest{
		{Destination: "not a url", Protocol: "Redfish"},
		{Destination: "http://127.0.0.1:1/x", Protocol: "SNMPv2c"},
		{Destination: "http://127.0.0.1:1/x", Protocol: "Redfish", EventTypes: []string{"Nope"}},
	} {
		_, _, err := m.CreateSubscription(context.Background(), tg, req)
		require.Error(t, err, "%+v", req)
		assert.Contains(t, err.Error(), "POST /redfish/v1/EventService/Subscriptions")
	}
}

func TestFakeSubscriptions(t *testing.T) {
	m := bmc.New(bmc.Config{MinInterval: -1})
	tg := bmc.Target{HardwareType: bmc.HardwareFake, ID: "n1"}
	ctx := context.Background()
	sub, _, err := m.CreateSubscription(ctx, tg, bmc.SubscriptionRequest{Destination: "http://127.0.0.1/e", Protocol: "Redfish", EventTypes: []string{"Alert"}})
	require.NoError(t, err)
	coll, _, err := m.Subscriptions(ctx, tg)
	require.NoError(t, err)
	assert.Equal(t, 1, coll["Members@odata.count"])
	_, err = m.DeleteSubscription(ctx, tg, sub.ID)
	require.NoError(t, err)
	_, err = m.DeleteSubscription(ctx, tg, sub.ID)
	assert.ErrorIs(t, err, bmc.ErrNoSubscription)
}

// A subscription id is a path segment of the BMC's collection: one that
// would name another resource (the traversal a stranger's id could make
// anvil delete with the BMC's admin credentials) is refused before any
// request, and the BMC's accounts are untouched.
func TestRedfishSubscriptionIDCannotLeaveTheCollection(t *testing.T) {
	env := startVBMC(t, "node-1")
	m := bmc.New(fastConfig(nil))
	ctx := context.Background()
	tg := env.target(t, "node-1", testPass)
	for _, id := range []string{"../../AccountService/Accounts/1", "..", "1/../2", "1?x=y", "%2e%2e", "", "a b"} {
		_, err := m.DeleteSubscription(ctx, tg, id)
		require.ErrorIs(t, err, bmc.ErrNoSubscription, "delete %q", id)
		_, _, err = m.GetSubscription(ctx, tg, id)
		require.ErrorIs(t, err, bmc.ErrNoSubscription, "get %q", id)
	}
	_, _, err := m.PowerState(ctx, tg)
	require.NoError(t, err, "the BMC still answers with the same credentials")
}
