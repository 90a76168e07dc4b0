package policy

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func persona(role, scope string) Creds {
	c := Creds{User: role + "@" + scope, Roles: impliedRoles(role)}
	if scope == "system" {
		c.System = true
	} else {
		c.ProjectID = scope
	}
	return c
}

func TestParse(t *testing.T) {
	sysAdmin, acmeMember := persona("admin", "system"), persona("member", "acme")
	node := map[string]string{"node.owner": "acme", "node.lessee": "beta"}
	for _, tc := range []struct {
		check string
		creds Creds
		want  bool
	}{
		{"", acmeMember, true},
		{"@", acmeMember, true},
		{"!", sysAdmin, false},
		{"role:admin", sysAdmin, true},
		{"role:ADMIN", sysAdmin, true},
		{"role:admin", acmeMember, false},
		{"role:reader", acmeMember, true}, // member implies reader
		{"system_scope:all", sysAdmin, true},
		{"system_scope:all", acmeMember, false},
		{"project_id:%(node.owner)s", acmeMember, true},
		{"project_id:%(node.lessee)s", acmeMember, false},
		{"project_id:%(node.missing)s", acmeMember, false},
		{"role:member and (project_id:%(node.owner)s or project_id:%(node.lessee)s)", acmeMember, true},
		{"not role:admin", acmeMember, true},
		{"not role:admin and role:member", acmeMember, true},
		{"role:admin or not role:member", acmeMember, false},
		{"((role:admin))", sysAdmin, true},
		{"'acme':%(node.owner)s", sysAdmin, true},
		{"user_id:member@acme", acmeMember, true},
		{"role:admin or role:member and system_scope:all", acmeMember, false}, // and binds tighter
	} {
		x, err := parse(tc.check)
		require.NoError(t, err, tc.check)
		e := &evalCtx{rules: map[string]expr{}, creds: &tc.creds, target: Target{Values: node}}
		assert.Equal(t, triOf(tc.want), x.eval(e), "%q for %s", tc.check, tc.creds.User)
	}
}

func TestParseErrors(t *testing.T) {
	for _, bad := range []string{"(role:admin", "role:admin)", "role:admin and", "or role:admin", "admin", "rule:", "http://x:y", "role:a role:b", "not", strings.Repeat("(", 100) + "role:a" + strings.Repeat(")", 100)} {
		_, err := parse(bad)
		assert.Error(t, err, bad)
	}
}

// TestPartialTarget: a rule that does not depend on the object is decided
// without it; one that does is Unknown until the object is loaded.
func TestPartialTarget(t *testing.T) {
	e := Default()
	admin, member := persona("admin", "system"), persona("member", "acme")
	assert.Equal(t, Yes, e.Decide("baremetal:node:get", &admin, Target{Partial: true}))
	assert.Equal(t, Unknown, e.Decide("baremetal:node:get", &member, Target{Partial: true}))
	assert.Equal(t, No, e.Decide("baremetal:node:delete", &member, Target{Partial: true}))
}

// TestIronicDefaults checks the personas of the issue against rules whose
// meaning Ironic documents.
func TestIronicDefaults(t *testing.T) {
	e := Default()
	owned := map[string]string{"node.owner": "acme", "node.lessee": "beta"}
	for _, tc := range []struct {
		rule                                              string
		sysAdmin, sysReader, ownMember, ownReader, lessee bool
		other                                             bool
	}{
		{"baremetal:node:get", true, true, true, true, true, false},
		{"baremetal:node:list_all", true, true, false, false, false, false},
		{"baremetal:node:list", true, true, true, true, true, true},
		{"baremetal:node:delete", true, false, false, false, false, false},
		{"baremetal:node:set_power_state", true, false, true, false, true, false},
		{"baremetal:node:set_provision_state", true, false, true, false, false, false},
		{"baremetal:node:update:driver_info", true, false, true, false, false, false},
		{"baremetal:node:get:driver_info", true, true, true, true, false, false},
		{"baremetal:node:get:last_error", true, true, true, true, false, false},
		{"baremetal:node:get:filter_threshold", true, true, false, false, false, false},
		{"baremetal:chassis:create", true, false, false, false, false, false},
		{"show_password", false, false, false, false, false, false},
	} {
		for i, c := range []Creds{persona("admin", "system"), persona("reader", "system"), persona("member", "acme"),
			persona("reader", "acme"), persona("member", "beta"), persona("admin", "other")} {
			want := []bool{tc.sysAdmin, tc.sysReader, tc.ownMember, tc.ownReader, tc.lessee, tc.other}[i]
			assert.Equal(t, want, e.Allowed(tc.rule, &c, owned), "%s for %s", tc.rule, c.User)
		}
	}
}

func TestOverride(t *testing.T) {
	e, err := Default().Override([]byte(`
# only admins flash firmware
"baremetal:step:execute:firmware.update": "rule:only_admins"
only_admins: "role:admin and system_scope:all"
"baremetal:node:set_provision_state:clean_steps": "role:admin"
`))
	require.NoError(t, err)
	member, admin := persona("member", "acme"), persona("admin", "system")
	assert.False(t, e.Allowed("baremetal:step:execute:firmware.update", &member, nil))
	assert.True(t, e.Allowed("baremetal:step:execute:firmware.update", &admin, nil))
	assert.True(t, e.Known("baremetal:step:execute:firmware.update"))
	assert.False(t, Default().Known("baremetal:step:execute:firmware.update"))

	// JSON is YAML too
	_, err = Default().Override([]byte(`{"baremetal:node:get": "role:admin"}`))
	require.NoError(t, err)

	for _, tc := range []struct{ doc, want string }{
		{"baremetal:node:list: \"@\"\nbaremetal:node:get: \"role:admin and\"\n", "line 2: rule \"baremetal:node:get\""},
		{"\n\nbaremetal:nod:get: role:admin\n", "line 3: unknown rule \"baremetal:nod:get\""},
		{"baremetal:node:get: rule:x\nx: rule:baremetal:node:get\n", "refers to itself"},
		{"baremetal:node:get: role:a\nbaremetal:node:get: role:b\n", "line 2: rule \"baremetal:node:get\" is given twice"},
		{"- a\n", "line 1: expected a mapping"},
	} {
		_, err := Default().Override([]byte(tc.doc))
		require.Error(t, err, tc.doc)
		assert.Contains(t, err.Error(), tc.want)
	}
}

func TestParseUsers(t *testing.T) {
	u, err := ParseUsers(strings.NewReader("# who\nalice admin system\n\nbob member project:acme\ncarol reader project:acme\n"))
	require.NoError(t, err)
	assert.Equal(t, 3, u.Len())
	bob, ok := u.Lookup("bob")
	require.True(t, ok)
	assert.Equal(t, Creds{User: "bob", Roles: []string{"member", "reader"}, ProjectID: "acme"}, bob)
	_, ok = u.Lookup("mallory")
	assert.False(t, ok)

	for _, tc := range []struct{ doc, want string }{
		{"alice admin\n", "line 1: expected"},
		{"alice admin system\nbob root system\n", "line 2: role \"root\""},
		{"alice admin everywhere\n", "line 1: scope \"everywhere\""},
		{"alice admin project:\n", "line 1: project name"},
		{"alice admin system\nalice reader system\n", "line 2: user \"alice\" is listed twice"},
	} {
		_, err := ParseUsers(strings.NewReader(tc.doc))
		require.Error(t, err, tc.doc)
		assert.Contains(t, err.Error(), tc.want)
	}
}

func TestDefaultsParse(t *testing.T) {
	e := Default()
	assert.Greater(t, len(e.Rules()), 130)
	_, cyc := e.cycle()
	assert.False(t, cyc)
}

func FuzzParse(f *testing.F) {
	for _, r := range ironicDefaults() {
		f.Add(r[1])
	}
	f.Add("not (role:a or 'x':%(node.owner)s) and @")
	f.Fuzz(func(t *testing.T, s string) {
		x, err := parse(s)
		if err != nil {
			return
		}
		c := persona("member", "acme")
		for _, partial := range []bool{true, false} {
			x.eval(&evalCtx{rules: map[string]expr{"a": constExpr(true)}, creds: &c,
				target: Target{Values: map[string]string{"node.owner": "acme"}, Partial: partial}})
		}
	})
}

func FuzzOverride(f *testing.F) {
	f.Add([]byte("baremetal:node:get: role:admin\n"))
	f.Add([]byte(`{"x": "rule:x"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = Default().Override(b)
	})
}
