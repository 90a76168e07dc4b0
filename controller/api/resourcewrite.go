package api

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"

	"github.com/google/uuid"

	"github.com/anvil-metal/anvil/controller/store"
)

// writes declares how clients write one kind of resource, as Ironic's
// controllers do: the body's schema (its name in refusals, its types,
// lengths and required fields), the fields a PATCH may change (the others
// are read-only), the microversion of each field (fieldMin of the
// resource), and apply, which sets the changed fields on the resource and
// makes the checks a schema cannot (a node that must exist, a state that
// must allow the change), each with Ironic's refusal. createResource and
// patchResource serve every kind from it.
type writes[T any] struct {
	body      string   // "port": Ironic's "Schema error for port: ..."
	schema    schema   // PORT_SCHEMA and its validators
	patchable []string // PATCH_ALLOWED_FIELDS, in Ironic's order
	// patchCheck, if set, refuses operations before the resource is read.
	patchCheck func(ops []patchOp) error
	// createCheck, if set, refuses a created body the version forbids
	// beyond its fields' own versions (a value only some versions know).
	createCheck func(ctx context.Context, doc map[string]any) error
	// doc is the resource as a PATCH sees it: every schema field.
	doc func(v *T) map[string]any
	// fresh is a new resource with its defaults and the UUID createResource
	// chose (the body's, else a new one).
	fresh func(uuid string) *T
	// apply sets the fields changed says changed (on create, those the
	// body has) from the validated document; create tells which.
	apply func(s *Server, r *http.Request, v *T, doc map[string]any, changed func(string) bool, create bool) error
	// check, if set, refuses a write the resource's node forbids (a
	// volume target of a powered-on node), after apply.
	check func(s *Server, r *http.Request, v *T, create bool) error

	// afterPatch, if set, follows a stored PATCH (a change other records
	// must follow), with the fields it changed.
	afterPatch func(s *Server, r *http.Request, v *T, changed func(string) bool) error

	create, update func(ctx context.Context, st store.Store, v *T) error
	touch          func(v *T) // sets updated_at
	// writeErr turns a store refusal (a duplicate) into Ironic's.
	writeErr func(v *T, err error) error
}

// patchAttempts bounds the re-reads of a PATCH whose update finds the
// resource changed since it was read (store.ErrConflict): it is applied
// again to a fresh read, as Ironic's lock would have serialized the two
// writes (the allocator writes allocations, VIF attachment ports and port
// groups, while a client patches them). Only a resource rewritten this
// often meanwhile gets writeErr's 409.
const patchAttempts = 50

// checkVersions refuses fields above the negotiated version with 406, as
// Ironic's check_allowed_*_fields do.
func checkVersions[T any](ctx context.Context, res *resource[T], keys []string) error {
	for _, k := range keys {
		if err := atLeast(ctx, res.fieldMin[k]); err != nil {
			return err
		}
	}
	return nil
}

// createResource serves POST: the body is validated against the schema,
// applied to a fresh resource, stored and shown.
func createResource[T any](s *Server, w http.ResponseWriter, r *http.Request, res *resource[T]) error {
	ctx := r.Context()
	if err := atLeast(ctx, res.minVersion); err != nil {
		return err
	}
	wr := res.writes
	doc, err := readObject(r)
	if err != nil {
		return err
	}
	if err := wr.schema.validate(wr.body, doc); err != nil {
		return err
	}
	if err := checkVersions(ctx, res, sortedKeys(doc)); err != nil {
		return err
	}
	if wr.createCheck != nil {
		if err := wr.createCheck(ctx, doc); err != nil {
			return err
		}
	}
	v := wr.fresh(createUUID(doc))
	has := func(k string) bool { _, ok := doc[k]; return ok }
	if err := wr.apply(s, r, v, doc, has, true); err != nil {
		return err
	}
	if wr.check != nil {
		if err := wr.check(s, r, v, true); err != nil {
			return err
		}
	}
	if err := wr.create(ctx, s.st, v); err != nil {
		return wr.writeErr(v, err)
	}
	w.Header().Set("Location", s.baseURL(r)+"/v1/"+res.path+"/"+res.uuid(v))
	writeJSON(w, http.StatusCreated, res.view(s, r, v, nil))
	return nil
}

// patchResource serves PATCH as Ironic's patch_validate_allowed_fields,
// apply_jsonpatch, patched_validate_with_schema and
// patch_update_changed_fields do, in that order.
func patchResource[T any](s *Server, w http.ResponseWriter, r *http.Request, res *resource[T]) error {
	ctx := r.Context()
	if err := atLeast(ctx, res.minVersion); err != nil {
		return err
	}
	wr := res.writes
	ops, err := readPatch(r)
	if err != nil {
		return err
	}
	if err := checkPatchable(ops, wr.patchable); err != nil {
		return err
	}
	if wr.patchCheck != nil {
		if err := wr.patchCheck(ops); err != nil {
			return err
		}
	}
	for attempt := 1; ; attempt++ {
		v, err := patchOnce(s, r, res, ops)
		if errors.Is(err, store.ErrConflict) && attempt < patchAttempts && ctx.Err() == nil {
			continue
		}
		if err != nil {
			if v != nil {
				return wr.writeErr(v, err)
			}
			return err
		}
		writeJSON(w, http.StatusOK, res.view(s, r, v, nil))
		return nil
	}
}

// createUUID is the UUID of a resource a validated body creates: the
// body's (the schema checked it is one), in canonical form, else a new one.
func createUUID(doc map[string]any) string {
	if u := optStr(doc, "uuid"); u != nil {
		return uuid.MustParse(*u).String()
	}
	return uuid.NewString()
}

// checkPatchable refuses an operation on a field outside allowed, as
// Ironic's patch_validate_allowed_fields does (before the resource is read).
func checkPatchable(ops []patchOp, allowed []string) error {
	for _, op := range ops {
		root := patchTokens(op.Path)[0]
		if !slices.Contains(allowed, root) {
			return badRequest("Cannot patch %s. Only the following can be updated: %s", op.Path, strings.Join(allowed, ", "))
		}
	}
	return nil
}

// patchOnce reads the resource, applies ops and writes it. A store error
// comes back with the resource, for writeErr.
func patchOnce[T any](s *Server, r *http.Request, res *resource[T], ops []patchOp) (*T, error) {
	ctx, wr := r.Context(), res.writes
	v, err := loadResource(s, r, res)
	if err != nil {
		return nil, err
	}
	cur := wr.doc(v)
	var doc map[string]any
	if err := jsonCopy(cur, &doc); err != nil {
		return nil, err
	}
	if err := applyPatch(doc, ops); err != nil {
		return nil, err
	}
	for k := range doc {
		if _, ok := wr.schema.prop(k); !ok {
			delete(doc, k)
		}
	}
	if err := wr.schema.validate("patch", doc); err != nil {
		return nil, err
	}
	changed := map[string]bool{}
	for k, val := range doc {
		if mustJSON(val) != mustJSON(cur[k]) {
			changed[k] = true
		}
	}
	if err := checkVersions(ctx, res, sortedKeys(changed)); err != nil {
		return nil, err
	}
	if err := wr.apply(s, r, v, doc, func(k string) bool { return changed[k] }, false); err != nil {
		return nil, err
	}
	if wr.check != nil {
		if err := wr.check(s, r, v, false); err != nil {
			return nil, err
		}
	}
	wr.touch(v)
	if err := wr.update(ctx, s.st, v); err != nil {
		return v, err
	}
	if wr.afterPatch != nil {
		if err := wr.afterPatch(s, r, v, func(k string) bool { return changed[k] }); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// pyStr is Python's str() of a decoded JSON value, as "%s" shows it.
func pyStr(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	return pyValue(v)
}

// str and optStr read a validated document's string fields.
func str(doc map[string]any, k string) string {
	s, _ := doc[k].(string)
	return s
}

func optStr(doc map[string]any, k string) *string {
	s, ok := doc[k].(string)
	if !ok {
		return nil
	}
	return &s
}

// obj reads a validated object field (null is empty).
func obj(doc map[string]any, k string) map[string]any {
	m, _ := doc[k].(map[string]any)
	if m == nil {
		return map[string]any{}
	}
	return m
}

// boolOr reads a validated args.boolean field, def when null.
func boolOr(doc map[string]any, k string, def bool) bool {
	switch b := doc[k].(type) {
	case bool:
		return b
	case string:
		x, _ := parseBool(b)
		return x
	}
	return def
}

// changedNode is the node a resource's write leaves it on: the node_uuid
// the write changes, resolved by nodeRef, else cur.
func (s *Server) changedNode(r *http.Request, doc map[string]any, changed func(string) bool, cur string) (string, error) {
	if !changed("node_uuid") {
		return cur, nil
	}
	n, err := s.nodeRef(r.Context(), str(doc, "node_uuid"))
	if err != nil {
		return "", err
	}
	return n.UUID, nil
}

// nodeRef resolves a node_uuid a body names: a node that does not exist is
// a 400 there, as Ironic's replace_node_uuid_with_id makes it.
func (s *Server) nodeRef(ctx context.Context, ident string) (*store.Node, error) {
	n, err := s.st.GetNode(ctx, ident)
	if err != nil {
		if isNotFound(err) {
			return nil, badRequest("Node %s could not be found.", ident)
		}
		return nil, err
	}
	return n, nil
}
