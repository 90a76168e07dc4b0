package api

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
)

// availableNode enrols a fake-hardware node and makes it available.
func (e *testEnv) availableNode(name string, extra map[string]any) map[string]any {
	e.t.Helper()
	body := map[string]any{"automated_clean": false}
	for k, v := range extra {
		body[k] = v
	}
	n := e.createNode(name, body)
	// Ironic allocates only nodes with a known power state, and its fake
	// power interface reports none until one is set.
	require.Equal(e.t, 202, e.do("PUT", "/v1/nodes/"+name+"/states/power", latest, map[string]any{"target": "power off"}).status)
	require.Eventually(e.t, func() bool {
		return e.do("GET", "/v1/nodes/"+name, latest, nil).json(e.t)["power_state"] == "power off"
	}, 10*time.Second, 5*time.Millisecond)
	require.Equal(e.t, 202, e.provision(name, "manage", nil).status)
	e.waitState(name, "manageable")
	require.Equal(e.t, 202, e.provision(name, "provide", nil).status)
	e.waitState(name, "available")
	return n
}

// waitAllocation polls an allocation until it leaves state allocating.
func (e *testEnv) waitAllocation(ident string) map[string]any {
	e.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		a := e.do("GET", "/v1/allocations/"+ident, latest, nil).json(e.t)
		if a["state"] != "allocating" {
			return a
		}
		if time.Now().After(deadline) {
			e.t.Fatalf("allocation %s still allocating", ident)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// TestAllocations: POST answers allocating and the conductor completes
// the allocation; errors, PATCH, the node's allocation, backfill and
// deletion as Ironic 21.4 answers them.
func TestAllocations(t *testing.T) { forEachStoreEnv(t, testAllocations) }

func testAllocations(t *testing.T, e *testEnv) {
	e.availableNode("a1", map[string]any{"resource_class": "gold"})
	a2 := e.availableNode("a2", map[string]any{"resource_class": "gold"})
	e.availableNode("a3", map[string]any{"resource_class": "silver"})
	require.Equal(t, 204, e.do("PUT", "/v1/nodes/a2/traits", latest, map[string]any{"traits": []string{"CUSTOM_GPU"}}).status)

	r := e.do("POST", "/v1/allocations", latest, map[string]any{"name": "job1", "resource_class": "gold", "traits": []string{"CUSTOM_GPU"}})
	require.Equal(t, 201, r.status, string(r.body))
	a := r.json(t)
	assert.Equal(t, "allocating", a["state"], "Ironic allocates asynchronously")
	assert.Nil(t, a["node_uuid"])
	assert.Contains(t, r.header.Get("Location"), "/v1/allocations/"+a["uuid"].(string))
	a = e.waitAllocation("job1")
	assert.Equal(t, "active", a["state"])
	assert.Equal(t, a2["uuid"], a["node_uuid"], "the node with the trait was chosen")
	n := e.do("GET", "/v1/nodes/a2", latest, nil).json(t)
	assert.Equal(t, a["uuid"], n["instance_uuid"])
	assert.Equal(t, a["uuid"], n["allocation_uuid"])
	assert.Equal(t, []any{"CUSTOM_GPU"}, n["instance_info"].(map[string]any)["traits"])
	got := e.do("GET", "/v1/nodes/a2/allocation", latest, nil)
	require.Equal(t, 200, got.status)
	assert.Equal(t, a["uuid"], got.json(t)["uuid"])
	assert.Equal(t, map[string]any{"uuid": a["uuid"], "state": "active", "links": a["links"]},
		e.do("GET", "/v1/allocations/job1?fields=uuid,state", latest, nil).json(t))
	assert.Equal(t, map[string]any{"allocations": []any{map[string]any{"uuid": a["uuid"], "links": a["links"]}}},
		e.do("GET", "/v1/allocations?fields=uuid&state=active", latest, nil).json(t), "fields= on the list")

	failures := map[string]struct {
		body   map[string]any
		reason string
	}{
		"trait taken":    {map[string]any{"resource_class": "gold", "traits": []string{"CUSTOM_GPU"}}, "no suitable nodes have the requested traits CUSTOM_GPU"},
		"no such class":  {map[string]any{"resource_class": "bronze"}, "no available nodes match the resource class bronze"},
		"candidate else": {map[string]any{"resource_class": "gold", "candidate_nodes": []string{"a3"}}, "none of the requested nodes are available and match the resource class gold"},
	}
	for name, tc := range failures {
		t.Run(name, func(t *testing.T) {
			r := e.do("POST", "/v1/allocations", latest, tc.body)
			require.Equal(t, 201, r.status, string(r.body))
			id := r.json(t)["uuid"].(string)
			a := e.waitAllocation(id)
			assert.Equal(t, "error", a["state"])
			assert.Equal(t, "Failed to process allocation "+id+": "+tc.reason+".", a["last_error"])
			assert.Nil(t, a["node_uuid"])
		})
	}

	refusals := map[string]struct {
		method, path, ver string
		body              any
		status            int
		fault             string
	}{
		"no resource class":    {"POST", "/v1/allocations", latest, map[string]any{"traits": []string{}}, 400, "The resource_class field is mandatory when not backfilling"},
		"unknown candidate":    {"POST", "/v1/allocations", latest, map[string]any{"resource_class": "gold", "candidate_nodes": []string{"nope", "a1"}}, 400, "Nodes cannot be found: nope"},
		"bad name":             {"POST", "/v1/allocations", latest, map[string]any{"resource_class": "gold", "name": "a b"}, 400, "Cannot create allocation with invalid name 'a b'"},
		"bad uuid":             {"POST", "/v1/allocations", latest, map[string]any{"resource_class": "gold", "uuid": "x"}, 400, "Expected UUID for uuid: x"},
		"duplicate name":       {"POST", "/v1/allocations", latest, map[string]any{"resource_class": "gold", "name": "job1"}, 409, "An allocation with name job1 already exists."},
		"unknown field":        {"POST", "/v1/allocations", latest, map[string]any{"resource_class": "gold", "state": "active"}, 400, "Unexpected arguments: state"},
		"node before 1.58":     {"POST", "/v1/allocations", "1.57", map[string]any{"resource_class": "gold", "node": "a1"}, 400, "Cannot set node when creating an allocation in this API version"},
		"owner before 1.60":    {"POST", "/v1/allocations", "1.59", map[string]any{"resource_class": "gold", "owner": "p"}, 406, "Request not acceptable."},
		"unknown backfill":     {"POST", "/v1/allocations", latest, map[string]any{"node": "ghost"}, 400, "Node ghost could not be found."},
		"POST before 1.52":     {"POST", "/v1/allocations", "1.51", map[string]any{"resource_class": "gold"}, 405, "The API version does not allow allocations"},
		"GET before 1.52":      {"GET", "/v1/allocations", "1.51", nil, 404, "The API version does not allow allocations"},
		"PATCH before 1.57":    {"PATCH", "/v1/allocations/job1", "1.56", []map[string]any{{"op": "replace", "path": "/name", "value": "x"}}, 405, "The API version does not allow updating allocations"},
		"PATCH state":          {"PATCH", "/v1/allocations/job1", latest, []map[string]any{{"op": "replace", "path": "/state", "value": "error"}}, 400, "Cannot patch /state. Only the following can be updated: name, extra"},
		"PATCH bad name":       {"PATCH", "/v1/allocations/job1", latest, []map[string]any{{"op": "replace", "path": "/name", "value": "a b"}}, 400, "Cannot update allocation with invalid name 'a b'"},
		"PATCH unknown":        {"PATCH", "/v1/allocations/nope", latest, []map[string]any{{"op": "replace", "path": "/name", "value": "x"}}, 404, "Allocation nope could not be found."},
		"owner filter < 1.60":  {"GET", "/v1/allocations?owner=p", "1.59", nil, 406, "Request not acceptable."},
		"owner field < 1.60":   {"GET", "/v1/allocations/job1?fields=owner", "1.59", nil, 406, "Request not acceptable."},
		"no node allocation":   {"GET", "/v1/nodes/a1/allocation", latest, nil, 404, "Allocation for node a1 was not found"},
		"backfill not active":  {"POST", "/v1/allocations", latest, map[string]any{"node": "a1"}, 500, "Cannot backfill an allocation for node"},
		"delete node's absent": {"DELETE", "/v1/nodes/a2/allocation", latest, nil, 404, "Allocation for node a2 was not found"},
	}
	for _, name := range []string{"no resource class", "unknown candidate", "bad name", "bad uuid", "duplicate name", "unknown field",
		"node before 1.58", "owner before 1.60", "unknown backfill", "POST before 1.52", "GET before 1.52", "PATCH before 1.57",
		"PATCH state", "PATCH bad name", "PATCH unknown", "owner filter < 1.60", "owner field < 1.60", "no node allocation", "backfill not active"} {
		tc := refusals[name]
		t.Run(name, func(t *testing.T) {
			r := e.do(tc.method, tc.path, tc.ver, tc.body)
			require.Equal(t, tc.status, r.status, string(r.body))
			assert.Contains(t, r.fault(t), tc.fault)
		})
	}

	r = e.do("PATCH", "/v1/allocations/job1", latest, []map[string]any{{"op": "replace", "path": "/name", "value": "job2"},
		{"op": "add", "path": "/extra/k", "value": "v"}})
	require.Equal(t, 200, r.status, string(r.body))
	assert.Equal(t, "job2", r.json(t)["name"])
	assert.Equal(t, map[string]any{"k": "v"}, r.json(t)["extra"])

	require.Equal(t, 204, e.do("DELETE", "/v1/nodes/a2/allocation", latest, nil).status)
	n = e.do("GET", "/v1/nodes/a2", latest, nil).json(t)
	assert.Nil(t, n["instance_uuid"], "deleting the allocation frees the node")
	assert.Nil(t, n["allocation_uuid"])
	for _, name := range []string{"delete node's absent"} {
		tc := refusals[name]
		r := e.do(tc.method, tc.path, tc.ver, tc.body)
		assert.Equal(t, tc.status, r.status, name)
		assert.Equal(t, tc.fault, r.fault(t), name)
	}

	// Backfill: a node deployed without an allocation gets one, named by
	// its instance; it cannot go while the node is active, and
	// undeploying the node removes it.
	inst := "5e7f1c2a-9a8b-4c3d-8e2f-0a1b2c3d4e5f"
	require.Equal(t, 200, e.do("PATCH", "/v1/nodes/a1", latest, []map[string]any{{"op": "add", "path": "/instance_uuid", "value": inst}}).status)
	require.Equal(t, 202, e.provision("a1", "active", nil).status)
	e.waitState("a1", "active")
	r = e.do("POST", "/v1/allocations", latest, map[string]any{"node": "a1"})
	require.Equal(t, 201, r.status, string(r.body))
	b := r.json(t)
	assert.Equal(t, inst, b["uuid"])
	assert.Equal(t, "active", b["state"])
	assert.Equal(t, "gold", b["resource_class"], "the node's resource class")
	r = e.do("DELETE", "/v1/allocations/"+inst, latest, nil)
	require.Equal(t, 409, r.status)
	assert.Contains(t, r.fault(t), "because the node is active (and maintenance mode is off)")
	require.Equal(t, 202, e.provision("a1", "deleted", nil).status)
	e.waitState("a1", "available")
	assert.Equal(t, 404, e.do("GET", "/v1/allocations/"+inst, latest, nil).status, "undeploy removes the allocation")
	assert.Nil(t, e.do("GET", "/v1/nodes/a1", latest, nil).json(t)["allocation_uuid"])
}

// TestAllocationInstanceRemoved: removing a node's instance_uuid removes
// its allocation, as Ironic's update_node does.
func TestAllocationInstanceRemoved(t *testing.T) { forEachStoreEnv(t, testAllocationInstanceRemoved) }

func testAllocationInstanceRemoved(t *testing.T, e *testEnv) {
	e.availableNode("r1", map[string]any{"resource_class": "gold"})
	r := e.do("POST", "/v1/allocations", latest, map[string]any{"resource_class": "gold"})
	require.Equal(t, 201, r.status, string(r.body))
	id := r.json(t)["uuid"].(string)
	require.Equal(t, "active", e.waitAllocation(id)["state"])
	r = e.do("PATCH", "/v1/nodes/r1", latest, []map[string]any{{"op": "remove", "path": "/instance_uuid"}})
	require.Equal(t, 200, r.status, string(r.body))
	assert.Nil(t, r.json(t)["allocation_uuid"])
	assert.Equal(t, 404, e.do("GET", "/v1/allocations/"+id, latest, nil).status)
}

// TestAllocationResumedAfterRestart: an allocation a previous controller
// left in allocating is finished when the controller starts again.
func TestAllocationResumedAfterRestart(t *testing.T) {
	path := t.TempDir() + "/anvil.db"
	e := newEnvWith(t, conductor.Config{CheckInterval: time.Hour}, path)
	node := e.availableNode("s1", map[string]any{"resource_class": "gold"})["uuid"].(string)
	id := uuid.NewString()
	require.NoError(t, e.st.CreateAllocation(context.Background(), &store.Allocation{UUID: id, State: "allocating",
		ResourceClass: "gold", CreatedAt: time.Now().UTC(), ConductorAffinity: "previous-run/0001"}))
	e.stop()

	e = newEnvWith(t, conductor.Config{CheckInterval: time.Hour}, path)
	a := e.waitAllocation(id)
	assert.Equal(t, "active", a["state"])
	assert.Equal(t, node, a["node_uuid"])
}

// TestAllocationPatchesConcurrently: PATCHes of one allocation that race
// each other are each applied to a fresh read (the generic PATCH retries a
// stale write for allocations), so none is lost and none is refused.
func TestAllocationPatchesConcurrently(t *testing.T) {
	forEachStoreEnv(t, func(t *testing.T, e *testEnv) {
		e.availableNode("c1", map[string]any{"resource_class": "gold"})
		r := e.do("POST", "/v1/allocations", latest, map[string]any{"name": "race", "resource_class": "gold"})
		require.Equal(t, 201, r.status, string(r.body))
		const n = 8
		status := make(chan int, n)
		for i := 0; i < n; i++ {
			go func() {
				status <- e.do("PATCH", "/v1/allocations/race", latest,
					[]map[string]any{{"op": "add", "path": fmt.Sprintf("/extra/k%d", i), "value": i}}).status
			}()
		}
		for i := 0; i < n; i++ {
			assert.Equal(t, 200, <-status)
		}
		a := e.waitAllocation("race")
		assert.Equal(t, "active", a["state"], "the allocator's writes are not lost either")
		assert.Len(t, a["extra"], n, "every PATCH kept")
	})
}
