package main

// The soak's lifecycles and its invariants: each node is driven through
// manage, inspect, provide, deploy, undeploy, retire and unretire as an
// operator (or Metal3) would, retrying what a killed controller did not
// answer; at the end every node is checked.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // database/sql driver "pgx", for the lease check

	"github.com/anvil-metal/anvil/controller/client"
	"github.com/anvil-metal/anvil/controller/simfleet"
	"github.com/anvil-metal/anvil/internal/pause"
)

// soakNode is one machine's node and what was done to it.
type soakNode struct {
	name, uuid string
	machine    *simfleet.Machine
	actions    int // verbs that reached their state
	failures   int // verbs that ended in a failed state (then recovered)
	why        []string
}

// soakImage is every deploy's instance_info.
var soakImage = map[string]any{"image_source": "http://127.0.0.1:9/soak.raw", "image_checksum": "sha256:" + strings.Repeat("5a", 32)}

// stableStates are where a node rests: no operation runs.
var stableStates = []string{"enroll", "manageable", "available", "active", "clean failed", "deploy failed",
	"inspect failed", "error", "rescue", "rescue failed", "unrescue failed", "service failed", "adopt failed"}

// next is the verb an operator gives a node at rest in st, and the
// state it ends in: enrol, manage, inspect now and then, provide, deploy,
// undeploy, and now and then retire, manage and unretire; failed states
// are recovered from as an operator would.
func next(st string, retired bool, rng *rand.Rand) (verb, want string) {
	switch st {
	case "enroll", "clean failed", "inspect failed":
		return "manage", "manageable"
	case "manageable":
		if retired {
			return "unretire", "manageable"
		}
		if rng.IntN(3) == 0 {
			return "inspect", "manageable"
		}
		return "provide", "available"
	case "available":
		if retired {
			return "manage", "manageable"
		}
		if rng.IntN(5) == 0 {
			return "retire", "available"
		}
		return "active", "active"
	case "active", "deploy failed":
		return "deleted", "available"
	}
	return "", ""
}

// drive runs n's lifecycles until ctx ends: each verb is chosen from the
// state the node rests in, so a verb whose answer a killed controller
// never gave is not repeated blindly.
func (r *soakRun) drive(ctx context.Context, n *soakNode, rng *rand.Rand) {
	for ctx.Err() == nil {
		st := r.rest(ctx, n)
		node, err := r.api.GetNode(ctx, n.uuid)
		if err != nil {
			pause.For(ctx, 200*time.Millisecond)
			continue
		}
		if st != node.ProvisionState {
			continue // moved meanwhile
		}
		if node.Maintenance {
			// a failed clean step puts the node in maintenance (Ironic's
			// policy); the operator clears it before trying again, or
			// the next operation's timeouts would not apply
			if err := r.api.Do(ctx, http.MethodDelete, "/v1/nodes/"+n.uuid+"/maintenance", nil, nil); err != nil {
				pause.For(ctx, 200*time.Millisecond)
			}
			continue
		}
		if strings.HasSuffix(st, "failed") {
			n.failures++
			n.why = append(n.why, st+": "+deref(node.LastError))
		}
		verb, want := next(st, node.Retired, rng)
		if verb == "" {
			n.why = append(n.why, "no verb for "+st)
			return
		}
		r.do(ctx, n, verb, want)
	}
}

// do asks for verb and waits until the node rests. Answers a killed
// controller could not give are asked again. It reports whether the node
// reached want.
func (r *soakRun) do(ctx context.Context, n *soakNode, verb, want string) bool {
	for ctx.Err() == nil {
		var err error
		switch verb {
		case "active":
			// undeploying clears instance_info, as Ironic's does: set it
			// again before each deploy (the simulated agent writes nothing)
			err = r.api.Do(ctx, http.MethodPatch, "/v1/nodes/"+n.uuid, []map[string]any{
				{"op": "add", "path": "/instance_info", "value": soakImage}}, nil)
			if err == nil {
				err = r.api.Provision(ctx, n.uuid, verb, nil)
			}
		case "retire", "unretire":
			err = r.api.Do(ctx, http.MethodPatch, "/v1/nodes/"+n.uuid, []map[string]any{
				{"op": "replace", "path": "/retired", "value": verb == "retire"}}, nil)
		default:
			err = r.api.Provision(ctx, n.uuid, verb, nil)
		}
		var he *client.Error
		switch {
		case err == nil:
		case errors.As(err, &he) && he.Status < 500 && he.Status != http.StatusConflict:
			// refused for the node's state: a verb a killed controller
			// accepted before we saw its answer moved it on
			n.why = append(n.why, verb+" refused: "+he.Message)
			return false
		default:
			pause.For(ctx, 200*time.Millisecond) // a controller down, or the node locked
			continue
		}
		if r.rest(ctx, n) == want {
			n.actions++
			return true
		}
		return false
	}
	return false
}

// atRest: no operation runs on the node. A failed state keeps the failed
// operation's target, as Ironic's does.
func atRest(n *client.Node) bool {
	return slices.Contains(stableStates, n.ProvisionState) && n.Reservation == nil &&
		(n.TargetProvisionState == nil || strings.HasSuffix(n.ProvisionState, "failed"))
}

// rest waits for the node to be in a stable state with no reservation.
func (r *soakRun) rest(ctx context.Context, n *soakNode) string {
	for {
		node, err := r.api.GetNode(ctx, n.uuid)
		if err == nil && atRest(node) {
			return node.ProvisionState
		}
		if !pause.For(ctx, 250*time.Millisecond) {
			return ""
		}
	}
}

// settle waits until every node rests (or cfg.settle passes) and at least
// one lease period has passed since the last kill, so that a dead
// controller's leases and registration have expired. It returns how
// long that took.
func (r *soakRun) settle(ctx context.Context) time.Duration {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, r.cfg.settle)
	defer cancel()
	for _, n := range r.nodes {
		r.rest(ctx, n)
	}
	if last := time.Unix(0, r.lastKill.Load()); time.Since(last) < 2*r.cfg.leaseTTL {
		pause.For(ctx, 2*r.cfg.leaseTTL-time.Since(last))
	}
	return time.Since(start)
}

// soakReport is what the soak did and found.
type soakReport struct {
	Database    string   `json:"database"`
	Controllers int      `json:"controllers"`
	Nodes       int      `json:"nodes"`
	Seed        uint64   `json:"seed"`
	Seconds     float64  `json:"seconds"`
	Kills       int64    `json:"kills"`
	Actions     int      `json:"actions"`
	Failures    int      `json:"failures"`
	FailedWhy   []string `json:"failed_why"`
	SettleSecs  float64  `json:"settle_seconds"`
	Checked     []string `json:"checked"`
	Violations  []string `json:"violations"`
}

func (rep *soakReport) print(out io.Writer) {
	fmt.Fprintf(out, "\nsoak on %s, %d controller(s), %d nodes, seed %d: %d controller kills, %d lifecycle verbs done (%d recovered from a failure), settled in %.1fs\n",
		rep.Database, rep.Controllers, rep.Nodes, rep.Seed, rep.Kills, rep.Actions, rep.Failures, rep.SettleSecs)
	for _, w := range rep.FailedWhy {
		fmt.Fprintf(out, "  failed and recovered (not a violation): %s\n", w)
	}
	for _, c := range rep.Checked {
		fmt.Fprintf(out, "  checked: %s\n", c)
	}
	if len(rep.Violations) == 0 {
		fmt.Fprintln(out, "no invariant violated")
		return
	}
	fmt.Fprintf(out, "%d VIOLATIONS:\n", len(rep.Violations))
	for _, v := range rep.Violations {
		fmt.Fprintf(out, "  %s\n", v)
	}
}

// transitionRe is a transition's history line: "from -> to (event)", the
// event an API verb's ("manage requested") or the engine's ("fail").
var transitionRe = regexp.MustCompile(`^(.+) -> (.+) \(([^()]+)\)$`)

// check verifies the invariants on every node.
func (r *soakRun) check(ctx context.Context, settled time.Duration) *soakReport {
	rep := &soakReport{Database: r.cfg.database, Controllers: r.cfg.controllers, Nodes: r.cfg.nodes, Seed: r.cfg.seed,
		Seconds: r.cfg.duration.Seconds(), Kills: r.kills.Load(), SettleSecs: settled.Seconds()}
	bad := func(format string, args ...any) {
		rep.Violations = append(rep.Violations, fmt.Sprintf(format, args...))
	}
	var resting, histories, steps, erases, records int
	for _, n := range r.nodes {
		rep.Actions += n.actions
		rep.Failures += n.failures
		for _, w := range n.why {
			rep.FailedWhy = append(rep.FailedWhy, n.name+": "+w)
		}
		node, err := r.api.GetNode(ctx, n.uuid)
		if err != nil {
			bad("%s: cannot be read: %v", n.name, err)
			continue
		}
		// no node stuck
		if !atRest(node) {
			bad("%s: stuck in %q (target %v, reservation %v, last_error %v)", n.name, node.ProvisionState,
				deref(node.TargetProvisionState), deref(node.Reservation), deref(node.LastError))
		} else {
			resting++
		}
		// a stable state that its history ends in
		hist, err := r.api.History(ctx, n.uuid)
		if err != nil {
			bad("%s: history cannot be read: %v", n.name, err)
			continue
		}
		if !atRest(node) {
			// still moving: its history and results are checked only at rest
			for _, e := range hist[max(0, len(hist)-8):] {
				bad("%s:   history: %s %s", n.name, e.CreatedAt, e.Event)
			}
			continue
		}
		last := ""
		for _, e := range hist {
			if m := transitionRe.FindStringSubmatch(e.Event); m != nil {
				last = m[2]
			}
		}
		if last != node.ProvisionState {
			bad("%s: in %q but its history's last transition ends in %q", n.name, node.ProvisionState, last)
		} else {
			histories++
		}
		// every step the agent started finished once, or failed, with one result
		results, err := listAll[map[string]any](ctx, r.api, "/v1/nodes/"+n.uuid+"/steps/results", "results")
		if err != nil {
			bad("%s: step results cannot be read: %v", n.name, err)
			continue
		}
		byID := map[string]map[string]any{}
		succeededErases := 0
		for _, res := range results {
			id, _ := res["uuid"].(string)
			byID[id] = res
			if res["step"] == "deploy.erase_devices" && res["outcome"] == "succeeded" {
				succeededErases++
			}
		}
		for _, c := range n.machine.Agent.Commands() {
			if c.Step == nil {
				continue
			}
			steps++
			if _, ok := byID[c.ID]; !ok {
				bad("%s: step %s (command %s) was started on the agent but has no result", n.name, c.Step.Key(), c.ID)
			}
		}
		ran := map[string]int{}
		for _, c := range n.machine.Agent.Commands() {
			ran[c.ID]++
		}
		for id, k := range ran {
			if k > 1 {
				bad("%s: command %s ran %d times", n.name, id, k)
			}
		}
		// every erase has a record
		recs, err := listAll[map[string]any](ctx, r.api, "/v1/nodes/"+n.uuid+"/erase-records", "erase_records")
		if err != nil {
			bad("%s: erase records cannot be read: %v", n.name, err)
			continue
		}
		erases += succeededErases
		records += len(recs)
		if len(recs) < succeededErases {
			bad("%s: %d erases succeeded but %d erase records exist", n.name, succeededErases, len(recs))
		}
	}
	rep.Checked = append(rep.Checked,
		fmt.Sprintf("%d/%d nodes at rest (a stable or failed state, no reservation, no target but a failed one's)", resting, len(r.nodes)),
		fmt.Sprintf("%d/%d nodes in the state their history's last transition ends in", histories, len(r.nodes)),
		fmt.Sprintf("%d agent steps started, each with its result, none run twice", steps),
		fmt.Sprintf("%d erases succeeded, %d erase records", erases, records))
	leases, dead, err := r.deadLeases(ctx)
	switch {
	case err != nil:
		bad("leases cannot be read: %v", err)
	case r.cfg.database == "sqlite":
		rep.Checked = append(rep.Checked, "leases: a sole SQLite controller keeps them in memory; a restart starts with none")
	default:
		rep.Checked = append(rep.Checked, fmt.Sprintf("%d live leases, %d held by a controller that is not alive", leases, len(dead)))
		for _, d := range dead {
			bad("lease of a dead controller: %s", d)
		}
	}
	slices.Sort(rep.Violations)
	return rep
}

// deadLeases reads the live leases and those whose holder is no live
// controller (PostgreSQL; SQLite has no shared leases).
func (r *soakRun) deadLeases(ctx context.Context) (int, []string, error) {
	if r.cfg.database != "postgres" {
		return 0, nil, nil
	}
	db, err := sql.Open("pgx", r.db)
	if err != nil {
		return 0, nil, err
	}
	defer db.Close()
	var live int
	if err := db.QueryRowContext(ctx, `SELECT count(*) FROM node_leases WHERE expires_at > now()`).Scan(&live); err != nil {
		return 0, nil, err
	}
	rows, err := db.QueryContext(ctx, `SELECT l.node_uuid || ' held by ' || l.holder FROM node_leases l
		WHERE l.expires_at > now() AND NOT EXISTS (SELECT 1 FROM controllers c WHERE c.holder = l.holder AND c.expires_at > now())`)
	if err != nil {
		return 0, nil, err
	}
	defer rows.Close()
	var dead []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return 0, nil, err
		}
		dead = append(dead, s)
	}
	return live, dead, rows.Err()
}

// listAll reads every page of a results list.
func listAll[T any](ctx context.Context, api *client.Client, path, key string) ([]T, error) {
	var all []T
	marker := ""
	for {
		q := url.Values{"limit": {"100"}}
		if marker != "" {
			q.Set("marker", marker)
		}
		var page map[string]any
		if err := api.Do(ctx, http.MethodGet, path+"?"+q.Encode(), nil, &page); err != nil {
			return nil, err
		}
		items, _ := page[key].([]any)
		for _, it := range items {
			if v, ok := it.(T); ok {
				all = append(all, v)
			}
		}
		next, _ := page["next"].(string)
		if next == "" || len(items) == 0 {
			return all, nil
		}
		last, _ := items[len(items)-1].(map[string]any)
		marker, _ = last["uuid"].(string)
		if marker == "" {
			return all, nil
		}
	}
}

func deref(s *string) string {
	if s == nil {
		return "null"
	}
	return strings.TrimSpace(*s)
}
