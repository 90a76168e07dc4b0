package conductor

// The registered controllers (GET /v1/conductors): this one's
// registration and the list of the live ones.

import (
	"context"
	"sort"
	"strings"

	"github.com/anvil-metal/anvil/controller/store"
)

// self is this controller's registration.
func (c *runtime) self() store.Controller {
	names := make([]string, 0, len(c.drivers))
	for n := range c.drivers {
		names = append(names, n)
	}
	sort.Strings(names)
	return store.Controller{Holder: c.holder, Hostname: c.cfg.Host, Drivers: names, CreatedAt: c.started, Alive: true}
}

// Conductors lists the controllers sharing the store, one per host name
// (the most recent registration of each: a restarted controller
// registers anew under a new instance), with this controller always
// present and alive: a sole controller (SQLite) registers nowhere.
// Ordered by first registration, as Ironic's conductor ids.
func (c *Conductor) Conductors(ctx context.Context) ([]store.Controller, error) {
	recs, err := c.core.st.ListControllers(ctx)
	if err != nil {
		return nil, err
	}
	byHost := map[string]store.Controller{}
	for _, r := range recs {
		cur, seen := byHost[r.Hostname]
		if !seen || later(r, cur) {
			byHost[r.Hostname] = r
		}
	}
	if me, ok := byHost[c.Host()]; !ok || me.Holder != c.runtime.holder {
		self := c.runtime.self()
		now := c.core.now()
		self.UpdatedAt = &now
		byHost[c.Host()] = self
	}
	out := make([]store.Controller, 0, len(byHost))
	for _, r := range byHost {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool {
		if !out[i].CreatedAt.Equal(out[j].CreatedAt) {
			return out[i].CreatedAt.Before(out[j].CreatedAt)
		}
		return strings.Compare(out[i].Hostname, out[j].Hostname) < 0
	})
	return out, nil
}

// later: registration a was renewed after b.
func later(a, b store.Controller) bool {
	if a.UpdatedAt == nil || b.UpdatedAt == nil {
		return a.UpdatedAt != nil
	}
	return a.UpdatedAt.After(*b.UpdatedAt)
}
