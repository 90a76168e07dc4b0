package policy

import (
	"fmt"
	"io"
	"strings"

	"github.com/anvil-metal/anvil/internal/textlist"
)

// Users are the roles and scopes of anvil's own (http_basic) accounts,
// from the users file beside the htpasswd: one account a line,
//
//	# name  role    scope
//	alice   admin   system
//	bob     member  project:acme
//
// The role is admin, manager, member, reader or service (admin implies
// manager, member and reader; manager implies member and reader; member
// implies reader, as Keystone's default roles do); the scope is "system"
// or "project:NAME". Blank lines and lines starting with # are skipped.
type Users struct {
	byName map[string]Creds
}

// roles a users file may give.
func validRole(r string) bool {
	switch r {
	case "admin", "manager", "member", "reader", "service":
		return true
	}
	return false
}

// ParseUsers reads a users file; the first bad line is refused with its
// number.
func ParseUsers(r io.Reader) (*Users, error) {
	u := &Users{byName: map[string]Creds{}}
	err := textlist.Lines(r, "users file", func(line int, t string) error {
		f := strings.Fields(t)
		if len(f) != 3 {
			return fmt.Errorf("users file line %d: expected \"name role scope\" (e.g. \"alice admin system\" or \"bob member project:acme\"), got %d fields", line, len(f))
		}
		name, role, scope := f[0], strings.ToLower(f[1]), f[2]
		if strings.ContainsAny(name, ":") {
			return fmt.Errorf("users file line %d: user name %q has a ':', which htpasswd names cannot", line, name)
		}
		if !validRole(role) {
			return fmt.Errorf("users file line %d: role %q is not admin, manager, member, reader or service", line, f[1])
		}
		c := Creds{User: name, Roles: impliedRoles(role)}
		switch {
		case scope == "system":
			c.System = true
		case strings.HasPrefix(scope, "project:"):
			c.ProjectID = strings.TrimPrefix(scope, "project:")
			if c.ProjectID == "" || len(c.ProjectID) > 255 {
				return fmt.Errorf("users file line %d: project name must be 1 to 255 characters", line)
			}
		default:
			return fmt.Errorf("users file line %d: scope %q is not \"system\" or \"project:NAME\"", line, scope)
		}
		if _, dup := u.byName[name]; dup {
			return fmt.Errorf("users file line %d: user %q is listed twice", line, name)
		}
		u.byName[name] = c
		return nil
	})
	if err != nil {
		return nil, err
	}
	return u, nil
}

// Lookup returns the identity of an account; ok is false for an account
// the file does not list.
func (u *Users) Lookup(name string) (Creds, bool) {
	c, ok := u.byName[name]
	return c, ok
}

// Len is the number of accounts listed.
func (u *Users) Len() int { return len(u.byName) }
