package api

import (
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/gorilla/mux"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/policy"
)

// anyPassword lets every account in: these tests are about what the
// users file and the policy grant once a password has passed.
type anyPassword struct{}

func (anyPassword) Authenticate(r *http.Request) bool { _, _, ok := r.BasicAuth(); return ok }

// personas are the callers of the table, by users file line.
const personas = `
sysadmin   admin  system
sysreader  reader system
ownmember  member project:acme
ownreader  reader project:acme
lessee     member project:lease
other      member project:zeta
`

func withPolicy(t testing.TB, users, policyFile string) func(*Config) {
	u, err := policy.ParseUsers(strings.NewReader(users))
	require.NoError(t, err)
	enf := policy.Default()
	if policyFile != "" {
		enf, err = enf.Override([]byte(policyFile))
		require.NoError(t, err)
	}
	return func(c *Config) {
		c.Auth = anyPassword{}
		c.Authz = Authz{Policy: enf, Users: u}
	}
}

func (e *testEnv) as(user string) *testEnv {
	c := *e
	c.user, c.pass = user, "pw"
	return &c
}

// TestEveryRouteHasARule: each route the API serves has its entry in the
// one policy table (a route added without one is refused at run time).
func TestEveryRouteHasARule(t *testing.T) {
	s := New(Config{Metrics: NewMetrics(nil), Auth: anyPassword{}})
	rules := routeRules()
	enf := policy.Default()
	seen := map[string]bool{}
	require.NoError(t, s.router.Walk(func(r *mux.Route, _ *mux.Router, _ []*mux.Route) error {
		tmpl, err := r.GetPathTemplate()
		if err != nil {
			return nil // a prefix subrouter
		}
		methods, err := r.GetMethods()
		if err != nil {
			return nil
		}
		for _, m := range methods {
			key := m + " " + routePath(tmpl)
			seen[key] = true
			rr, ok := rules[key]
			if assert.True(t, ok, "route %s has no policy rule", key) && rr.target != tPublic {
				assert.True(t, enf.Known(rr.rule), "route %s names unknown rule %s", key, rr.rule)
			}
		}
		return nil
	}))
	var stale []string
	for k := range rules {
		if !seen[k] {
			stale = append(stale, k)
		}
	}
	sort.Strings(stale)
	assert.Empty(t, stale, "table rows for routes that do not exist")
}

// TestPolicyTable is the table: routes × the six personas on both
// stores, the status each gets, the nodes each sees and the fields masked.
func TestPolicyTable(t *testing.T) {
	forEachStore(t, func(t *testing.T, kind storeKind) {
		e := newEnvOn(t, kind, withPolicy(t, personas, ""))
		admin := e.as("sysadmin")
		mk := func(name string, fields map[string]any) {
			r := admin.do("POST", "/v1/nodes", latest, map[string]any{"driver": "fake-hardware", "name": name})
			require.Equal(t, http.StatusCreated, r.status, string(r.body))
			var ops []map[string]any
			for k, v := range fields {
				ops = append(ops, map[string]any{"op": "add", "path": "/" + k, "value": v})
			}
			if len(ops) > 0 {
				r = admin.do("PATCH", "/v1/nodes/"+name, latest, ops)
				require.Equal(t, http.StatusOK, r.status, string(r.body))
			}
		}
		mk("n1", map[string]any{"owner": "acme", "lessee": "lease", "driver_info": map[string]any{"ipmi_address": "10.0.0.1", "ipmi_password": "s3"}})
		mk("n2", map[string]any{"owner": "zeta"})
		mk("n3", nil)
		for _, n := range []string{"n1", "n2"} {
			r := admin.do("POST", "/v1/ports", latest, map[string]any{"node_uuid": admin.do("GET", "/v1/nodes/"+n, latest, nil).json(t)["uuid"],
				"address": map[string]string{"n1": "52:54:00:00:00:01", "n2": "52:54:00:00:00:02"}[n]})
			require.Equal(t, http.StatusCreated, r.status, string(r.body))
		}

		t.Run("node lists", func(t *testing.T) {
			for user, want := range map[string][]string{
				"sysadmin": {"n1", "n2", "n3"}, "sysreader": {"n1", "n2", "n3"}, "ownmember": {"n1"},
				"ownreader": {"n1"}, "lessee": {"n1"}, "other": {"n2"},
			} {
				for _, path := range []string{"/v1/nodes", "/v1/nodes/detail"} {
					r := e.as(user).do("GET", path, latest, nil)
					require.Equal(t, http.StatusOK, r.status, "%s %s: %s", user, path, r.body)
					var names []string
					for _, n := range r.json(t)["nodes"].([]any) {
						names = append(names, n.(map[string]any)["name"].(string))
					}
					sort.Strings(names)
					assert.Equal(t, want, names, "%s %s", user, path)
				}
			}
			r := e.as("ownmember").do("GET", "/v1/nodes?owner=zeta", latest, nil)
			assert.Equal(t, http.StatusForbidden, r.status)
			assert.Equal(t, "Access was denied to the following resource: baremetal:node:list_all", r.fault(t))
		})

		t.Run("port lists", func(t *testing.T) {
			for user, want := range map[string][]string{"sysreader": {"52:54:00:00:00:01", "52:54:00:00:00:02"},
				"ownreader": {"52:54:00:00:00:01"}, "other": {"52:54:00:00:00:02"}} {
				r := e.as(user).do("GET", "/v1/ports", latest, nil)
				require.Equal(t, http.StatusOK, r.status, string(r.body))
				var macs []string
				for _, p := range r.json(t)["ports"].([]any) {
					macs = append(macs, p.(map[string]any)["address"].(string))
				}
				sort.Strings(macs)
				assert.Equal(t, want, macs, user)
			}
		})

		t.Run("masked fields", func(t *testing.T) {
			n := e.as("sysreader").do("GET", "/v1/nodes/n1", latest, nil).json(t)
			assert.Equal(t, "10.0.0.1", n["driver_info"].(map[string]any)["ipmi_address"])
			assert.Equal(t, "******", n["driver_info"].(map[string]any)["ipmi_password"], "secrets are masked for everyone")
			assert.Nil(t, n["last_error"])

			n = e.as("ownreader").do("GET", "/v1/nodes/n1", latest, nil).json(t)
			assert.Equal(t, "10.0.0.1", n["driver_info"].(map[string]any)["ipmi_address"], "the owner reads its BMC's address")
			assert.Nil(t, n["last_error"])

			n = e.as("lessee").do("GET", "/v1/nodes/n1", latest, nil).json(t)
			assert.Equal(t, map[string]any{"content": "** Redacted - requires baremetal:node:get:driver_info permission. **"}, n["driver_info"])
			assert.Equal(t, "** Value Redacted - Requires baremetal:node:get:last_error permission. **", n["last_error"])
			assert.Equal(t, "** Redacted - requires baremetal:node:get:reservation permission. **", n["reservation"])
			assert.Equal(t, map[string]any{"content": "** Redacted - Requires baremetal:node:get:driver_internal_info permission. **"}, n["driver_internal_info"])
			assert.Equal(t, "lease", n["lessee"])
		})

		type row struct {
			method, path string
			body         any
			want         map[string]int // persona -> status
			msg          map[string]string
		}
		notFoundN1 := "Node n1 could not be found."
		for _, c := range []row{
			{"GET", "/v1/nodes/n1", nil, map[string]int{"sysadmin": 200, "sysreader": 200, "ownmember": 200, "ownreader": 200, "lessee": 200, "other": 404},
				map[string]string{"other": notFoundN1}},
			{"GET", "/v1/nodes/n1/states", nil, map[string]int{"sysreader": 200, "ownreader": 200, "lessee": 200, "other": 404}, nil},
			{"GET", "/v1/nodes/n1/history", nil, map[string]int{"sysreader": 200, "ownreader": 200, "lessee": 403, "other": 404},
				map[string]string{"lessee": "Access was denied to the following resource: baremetal:node:history:get"}},
			{"PATCH", "/v1/nodes/n1", []map[string]any{{"op": "add", "path": "/extra/x", "value": "y"}},
				map[string]int{"sysadmin": 200, "sysreader": 403, "ownmember": 200, "ownreader": 403, "lessee": 200, "other": 404},
				map[string]string{"sysreader": "Access was denied to the following resource: baremetal:node:update_extra"}},
			{"PATCH", "/v1/nodes/n1", []map[string]any{{"op": "add", "path": "/driver_info/ipmi_port", "value": "623"}},
				map[string]int{"sysadmin": 200, "ownmember": 200, "lessee": 403, "other": 404},
				map[string]string{"lessee": "Access was denied to the following resource: baremetal:node:update:driver_info"}},
			{"PATCH", "/v1/nodes/n1", []map[string]any{{"op": "add", "path": "/owner", "value": "acme"}},
				map[string]int{"sysadmin": 200, "ownmember": 403}, nil},
			{"PUT", "/v1/nodes/n1/states/power", map[string]any{"target": "power on"},
				map[string]int{"sysreader": 403, "ownreader": 403, "lessee": 202, "other": 404}, nil},
			{"PUT", "/v1/nodes/n1/maintenance", map[string]any{"reason": "x"},
				map[string]int{"sysreader": 403, "lessee": 403, "ownmember": 202, "other": 404}, nil},
			{"DELETE", "/v1/nodes/n1/maintenance", nil, map[string]int{"ownmember": 202}, nil},
			{"POST", "/v1/nodes", map[string]any{"driver": "fake-hardware"}, map[string]int{"ownmember": 403, "sysreader": 403},
				map[string]string{"ownmember": "Access was denied to the following resource: baremetal:node:create"}},
			{"DELETE", "/v1/nodes/n3", nil, map[string]int{"sysreader": 403, "ownmember": 404, "other": 404}, nil},
			{"GET", "/v1/chassis", nil, map[string]int{"sysreader": 200, "ownreader": 403}, nil},
			{"GET", "/v1/conductors", nil, map[string]int{"sysreader": 200, "ownmember": 403}, nil},
			{"GET", "/v1/drivers", nil, map[string]int{"sysreader": 200, "lessee": 403}, nil},
			{"GET", "/v1/allocations", nil, map[string]int{"sysreader": 200, "ownreader": 200}, nil},
			{"GET", "/v1/runbooks", nil, map[string]int{"sysreader": 200, "ownreader": 200}, nil},
			{"GET", "/v1/deploy_templates", nil, map[string]int{"sysreader": 200, "ownmember": 403}, nil},
			{"GET", "/v1/nodes/n2/ports", nil, map[string]int{"other": 200, "ownreader": 404}, nil},
			{"GET", "/v1/nodes/n1/vifs", nil, map[string]int{"lessee": 200, "other": 404}, nil},
			{"DELETE", "/v1/nodes/n3", nil, map[string]int{"sysadmin": 204}, nil},
			{"GET", "/v1/nodes/n3", nil, map[string]int{"sysadmin": 404}, nil},
		} {
			for _, user := range []string{"sysadmin", "sysreader", "ownmember", "ownreader", "lessee", "other"} {
				want, ok := c.want[user]
				if !ok {
					continue
				}
				r := e.as(user).do(c.method, c.path, latest, c.body)
				assert.Equal(t, want, r.status, "%s %s as %s: %s", c.method, c.path, user, r.body)
				if msg, ok := c.msg[user]; ok {
					assert.Equal(t, msg, r.fault(t), "%s %s as %s", c.method, c.path, user)
				}
			}
		}

		t.Run("port of a node one cannot see", func(t *testing.T) {
			var uuid string
			for _, p := range admin.do("GET", "/v1/ports?address=52:54:00:00:00:02", latest, nil).json(t)["ports"].([]any) {
				uuid = p.(map[string]any)["uuid"].(string)
			}
			r := e.as("ownmember").do("GET", "/v1/ports/"+uuid, latest, nil)
			assert.Equal(t, http.StatusNotFound, r.status)
			assert.Equal(t, "Port "+uuid+" could not be found.", r.fault(t))
			assert.Equal(t, http.StatusOK, e.as("other").do("GET", "/v1/ports/"+uuid, latest, nil).status)
		})

		t.Run("runbooks", func(t *testing.T) {
			for name, extra := range map[string]map[string]any{"CUSTOM_PUB": {"public": true}, "CUSTOM_ZETA": {"owner": "zeta"}} {
				body := runbookBody(name)
				for k, v := range extra {
					body[k] = v
				}
				r := admin.do("POST", "/v1/runbooks", rbVer, body)
				require.Equal(t, http.StatusCreated, r.status, string(r.body))
			}
			names := func(user string) []string {
				var out []string
				for _, rb := range e.as(user).do("GET", "/v1/runbooks", rbVer, nil).json(t)["runbooks"].([]any) {
					out = append(out, rb.(map[string]any)["name"].(string))
				}
				sort.Strings(out)
				return out
			}
			assert.Equal(t, []string{"CUSTOM_PUB", "CUSTOM_ZETA"}, names("sysreader"))
			assert.Equal(t, []string{"CUSTOM_PUB"}, names("ownreader"), "a project sees its own and the public runbooks")
			assert.Equal(t, []string{"CUSTOM_PUB", "CUSTOM_ZETA"}, names("other"))
			r := e.as("ownreader").do("GET", "/v1/runbooks/CUSTOM_ZETA", rbVer, nil)
			assert.Equal(t, http.StatusForbidden, r.status)
			assert.Equal(t, "Access was denied to the following resource: baremetal:runbook:get", r.fault(t))
			assert.Equal(t, http.StatusOK, e.as("ownreader").do("GET", "/v1/runbooks/CUSTOM_PUB", rbVer, nil).status)
			assert.Equal(t, http.StatusOK, e.as("other").do("GET", "/v1/runbooks/CUSTOM_ZETA", rbVer, nil).status)
			assert.Equal(t, http.StatusForbidden, e.as("other").do("DELETE", "/v1/runbooks/CUSTOM_ZETA", rbVer, nil).status,
				"a member is not its project's runbook manager")
			r = e.as("ownmember").do("POST", "/v1/runbooks", rbVer, runbookBody("CUSTOM_MINE"))
			assert.Equal(t, http.StatusForbidden, r.status, "members do not write runbooks (managers do)")
		})

		t.Run("allocations", func(t *testing.T) {
			r := e.as("ownmember").do("POST", "/v1/allocations", latest, map[string]any{"resource_class": "gold", "name": "a-acme"})
			require.Equal(t, http.StatusCreated, r.status, string(r.body))
			assert.Equal(t, "acme", r.json(t)["owner"], "a project's allocation is its own, so only its nodes are candidates")
			r = e.as("ownmember").do("POST", "/v1/allocations", latest, map[string]any{"resource_class": "gold", "owner": "zeta"})
			assert.Equal(t, http.StatusForbidden, r.status)
			assert.Contains(t, r.fault(t), "Policy baremetal:allocation:create_restricted is required for this capability.")
			r = e.as("other").do("GET", "/v1/allocations/a-acme", latest, nil)
			assert.Equal(t, http.StatusNotFound, r.status)
			assert.Equal(t, "Allocation a-acme could not be found.", r.fault(t))
			assert.Equal(t, http.StatusOK, e.as("ownreader").do("GET", "/v1/allocations/a-acme", latest, nil).status)
			var names []string
			for _, a := range e.as("other").do("GET", "/v1/allocations", latest, nil).json(t)["allocations"].([]any) {
				names = append(names, a.(map[string]any)["name"].(string))
			}
			assert.Empty(t, names, "another project lists none of acme's allocations")
		})

		t.Run("an account the users file does not list", func(t *testing.T) {
			r := e.as("mallory").do("GET", "/v1/nodes", latest, nil)
			assert.Equal(t, http.StatusForbidden, r.status)
			assert.Equal(t, `User "mallory" has no role: an administrator must add it to the users file`, r.fault(t))
		})
	})
}

// TestNoUsersFileEveryoneIsAdmin: without a users file an account may do
// everything, as before roles existed.
func TestNoUsersFileEveryoneIsAdmin(t *testing.T) {
	e := newEnv(t, func(c *Config) { c.Auth = anyPassword{} }).as("anyone")
	e.createNode("x", map[string]any{"owner": "acme"})
	assert.Equal(t, http.StatusOK, e.do("GET", "/v1/nodes/x", latest, nil).status)
	assert.Equal(t, http.StatusNoContent, e.do("DELETE", "/v1/nodes/x", latest, nil).status)
}

// teamsRunRunbooks is a site's policy for "teams run approved runbooks on
// their own nodes, and nothing else": members of any project may use a
// runbook (the node's rules still apply), only system admins name clean
// steps of their own, and only they reset a BIOS to factory settings.
const teamsRunRunbooks = `
"baremetal:runbook:use": "(role:member and system_scope:all) or role:member"
"baremetal:node:set_provision_state:clean_steps": "role:admin and system_scope:all"
"baremetal:step:execute:bios.factory_reset": "role:admin and system_scope:all"
`

// TestProjectMemberRunsRunbook: a project member runs an approved runbook
// (a manual clean applying BIOS settings, fake BMC) on a node its project
// owns; it may not on another project's node (404), nor name its own
// steps (403), nor run a project runbook holding a step its role may not
// execute; the history says who ran which runbook.
func TestProjectMemberRunsRunbook(t *testing.T) {
	e, f := newBMCEnv(t, conductor.Config{Host: "test-host", CheckInterval: time.Hour}, withPolicy(t, personas, teamsRunRunbooks))
	admin, member := e.as("sysadmin"), e.as("ownmember")
	var ids = map[string]string{}
	for name, owner := range map[string]string{"mine": "acme", "theirs": "zeta"} {
		r := admin.do("POST", "/v1/nodes", latest, map[string]any{"driver": "fake-hardware", "name": name, "deploy_interface": "fake", "owner": owner})
		require.Equal(t, http.StatusCreated, r.status, string(r.body))
		ids[name] = r.json(t)["uuid"].(string)
		require.Equal(t, http.StatusAccepted, admin.provision(name, "manage", nil).status)
		admin.waitState(name, "manageable")
		require.Equal(t, http.StatusNoContent, admin.do("PUT", "/v1/nodes/"+name+"/traits/CUSTOM_BIOS_TUNE", latest, nil).status)
		require.Equal(t, http.StatusNoContent, admin.do("PUT", "/v1/nodes/"+name+"/traits/CUSTOM_TEAM_RESET", latest, nil).status)
	}
	settings := map[string]any{"settings": []any{map[string]any{"name": "ProcVirtualization", "value": "Disabled"}}}
	r := admin.do("POST", "/v1/runbooks", rbVer, map[string]any{"name": "CUSTOM_BIOS_TUNE", "public": true, "steps": []any{
		map[string]any{"interface": "bios", "step": "apply_configuration", "order": 1, "args": settings}}})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))
	rbID := r.json(t)["uuid"].(string)
	r = admin.do("POST", "/v1/runbooks", rbVer, map[string]any{"name": "CUSTOM_TEAM_RESET", "owner": "acme", "steps": []any{
		map[string]any{"interface": "bios", "step": "factory_reset", "order": 1, "args": map[string]any{}}}})
	require.Equal(t, http.StatusCreated, r.status, string(r.body))

	put := func(who *testEnv, node string, body map[string]any) resp {
		return who.do("PUT", "/v1/nodes/"+node+"/states/provision", rbVer, body)
	}
	r = put(member, "theirs", map[string]any{"target": "clean", "runbook": "CUSTOM_BIOS_TUNE"})
	assert.Equal(t, http.StatusNotFound, r.status)
	assert.Equal(t, "Node theirs could not be found.", r.fault(t))

	r = put(member, "mine", map[string]any{"target": "clean", "clean_steps": []any{
		map[string]any{"interface": "bios", "step": "apply_configuration", "args": settings}}})
	assert.Equal(t, http.StatusForbidden, r.status, "steps outside a runbook")
	assert.Equal(t, "Access was denied to the following resource: baremetal:node:set_provision_state:clean_steps", r.fault(t))

	r = put(member, "mine", map[string]any{"target": "clean", "runbook": "CUSTOM_TEAM_RESET"})
	assert.Equal(t, http.StatusForbidden, r.status, "a project's own runbook with a step its role may not run")
	assert.Equal(t, "insufficient privileges to execute step factory_reset on interface bios", r.fault(t))

	r = e.as("ownreader").do("PUT", "/v1/nodes/mine/states/provision", rbVer, map[string]any{"target": "clean", "runbook": "CUSTOM_BIOS_TUNE"})
	assert.Equal(t, http.StatusForbidden, r.status, "a reader changes nothing")

	r = put(member, "mine", map[string]any{"target": "clean", "runbook": "CUSTOM_BIOS_TUNE"})
	require.Equal(t, http.StatusAccepted, r.status, string(r.body))
	n := admin.waitState("mine", "manageable")
	assert.Nil(t, n["last_error"])
	assert.Equal(t, "Disabled", f.BIOS(ids["mine"]).Current["ProcVirtualization"])
	var found bool
	for _, ev := range admin.do("GET", "/v1/nodes/mine/history", latest, nil).json(t)["history"].([]any) {
		ev := ev.(map[string]any)
		if strings.Contains(ev["event"].(string), "clean requested with runbook CUSTOM_BIOS_TUNE ("+rbID+")") {
			found = true
			assert.Equal(t, "ownmember", ev["user"], "who ran it")
		}
	}
	assert.True(t, found, "the history names the runbook: %s", historyText(admin, "mine"))
}
