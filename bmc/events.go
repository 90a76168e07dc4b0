package bmc

// BMC event subscriptions (Redfish EventService), which Ironic's redfish
// vendor interface offers as the vendor_passthru methods
// create_subscription, delete_subscription, get_subscription and
// get_all_subscriptions. Through gofish on the bmclib session, as the
// BIOS: bmclib has no EventService.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/stmcginnis/gofish"
)

// SubscriptionRequest is a subscription to create, in the fields Ironic
// passes on (Redfish's names).
type SubscriptionRequest struct {
	Destination string
	Context     string
	Protocol    string
	EventTypes  []string
	HTTPHeaders []map[string]string
}

// Subscription is an EventDestination as the BMC reports it.
type Subscription struct {
	// Doc is the whole resource as the BMC sent it.
	Doc map[string]any
	// ID is the resource's Id, the one delete_subscription takes.
	ID string
}

// ErrNoSubscription: the BMC knows no subscription of that id.
var ErrNoSubscription = errors.New("bmc: no such subscription")

// maxSubscriptions bounds the members of a subscriptions collection read.
const maxSubscriptions = 256

// eventSession is what the subscription operations need from a session;
// only protocols with an EventService (Redfish, fake) implement it.
type eventSession interface {
	eventTypes(ctx context.Context) ([]string, error)
	createSubscription(ctx context.Context, req SubscriptionRequest) (Subscription, error)
	subscriptions(ctx context.Context) (map[string]any, error)
	subscription(ctx context.Context, id string) (Subscription, error)
	deleteSubscription(ctx context.Context, id string) error
}

func errNoEvents(hw string) error {
	return fmt.Errorf("%w: event subscriptions are not supported by the %s driver (use the redfish hardware type)", ErrUnsupported, hw)
}

// runEvents runs one EventService command with retries; IPMI is refused
// without contacting the BMC.
func (m *Manager) runEvents(ctx context.Context, t Target, name string, fn func(context.Context, eventSession) error) (Outcome, error) {
	if t.HardwareType == HardwareIPMI {
		return Outcome{}, fmt.Errorf("%s %s: %w", name, t, errNoEvents(t.HardwareType))
	}
	return m.run(ctx, t, name, func(ctx context.Context, op *operation) error {
		return op.retry(ctx, name, func(ctx context.Context, s session) error {
			es, ok := s.(eventSession)
			if !ok {
				return errNoEvents(op.t.HardwareType)
			}
			return fn(ctx, es)
		})
	})
}

// EventTypes lists the event types the BMC's EventService takes in a
// subscription (EventTypesForSubscription).
func (m *Manager) EventTypes(ctx context.Context, t Target) ([]string, Outcome, error) {
	var out []string
	o, err := m.runEvents(ctx, t, "get_event_types", func(ctx context.Context, s eventSession) error {
		var err error
		out, err = s.eventTypes(ctx)
		return err
	})
	return out, o, err
}

// CreateSubscription creates an event subscription on the BMC. The
// request is not retried once sent: a BMC that created it and did not
// answer would get a second one.
func (m *Manager) CreateSubscription(ctx context.Context, t Target, req SubscriptionRequest) (Subscription, Outcome, error) {
	var sub Subscription
	if t.HardwareType == HardwareIPMI {
		return sub, Outcome{}, fmt.Errorf("create_subscription %s: %w", t, errNoEvents(t.HardwareType))
	}
	o, err := m.run(ctx, t, "create_subscription", func(ctx context.Context, op *operation) error {
		op.attempts++
		return op.call(ctx, op.minInterval(), func(ctx context.Context, s session) error {
			es, ok := s.(eventSession)
			if !ok {
				return errNoEvents(op.t.HardwareType)
			}
			var err error
			sub, err = es.createSubscription(ctx, req)
			return err
		})
	})
	return sub, o, err
}

// Subscriptions reads the BMC's subscriptions collection as it sent it
// (Ironic's get_all_subscriptions answers with that document).
func (m *Manager) Subscriptions(ctx context.Context, t Target) (map[string]any, Outcome, error) {
	var out map[string]any
	o, err := m.runEvents(ctx, t, "get_all_subscriptions", func(ctx context.Context, s eventSession) error {
		var err error
		out, err = s.subscriptions(ctx)
		return err
	})
	return out, o, err
}

// GetSubscription reads one subscription (ErrNoSubscription if the BMC
// has none of that id).
func (m *Manager) GetSubscription(ctx context.Context, t Target, id string) (Subscription, Outcome, error) {
	var sub Subscription
	o, err := m.runEvents(ctx, t, "get_subscription", func(ctx context.Context, s eventSession) error {
		var err error
		sub, err = s.subscription(ctx, id)
		return err
	})
	return sub, o, err
}

// DeleteSubscription deletes one subscription (ErrNoSubscription if the
// BMC has none of that id).
func (m *Manager) DeleteSubscription(ctx context.Context, t Target, id string) (Outcome, error) {
	return m.runEvents(ctx, t, "delete_subscription", func(ctx context.Context, s eventSession) error {
		return s.deleteSubscription(ctx, id)
	})
}

// parseSubscription decodes an EventDestination resource.
func parseSubscription(body []byte) (Subscription, error) {
	obj, err := decodeObject(body)
	if err != nil {
		return Subscription{}, fmt.Errorf("subscription: %w", err)
	}
	sub := Subscription{Doc: obj, ID: str(obj["Id"])}
	if sub.ID == "" {
		sub.ID = lastElem(odataID(obj))
	}
	if sub.ID == "" {
		return Subscription{}, errors.New("subscription: no Id")
	}
	return sub, nil
}

// parseEventService reads the subscriptions collection's URI and the
// event types a subscription may name from an EventService resource.
func parseEventService(body []byte) (subs string, types []string, err error) {
	obj, err := decodeObject(body)
	if err != nil {
		return "", nil, fmt.Errorf("event service: %w", err)
	}
	subs = odataID(obj["Subscriptions"])
	if subs == "" {
		return "", nil, fmt.Errorf("%w: the BMC's EventService has no Subscriptions", ErrUnsupported)
	}
	list, _ := obj["EventTypesForSubscription"].([]any)
	for _, t := range list {
		if t, ok := t.(string); ok {
			types = append(types, t)
		}
	}
	return subs, types, nil
}

// eventService reads the service root's EventService.
func (s *redfishSession) eventService(c *gofish.APIClient) (string, []string, error) {
	body, _, err := getDoc(c, "/redfish/v1/")
	if err != nil {
		return "", nil, err
	}
	root, err := decodeObject(body)
	if err != nil {
		return "", nil, fmt.Errorf("service root: %w", err)
	}
	uri := odataID(root["EventService"])
	if uri == "" {
		return "", nil, fmt.Errorf("%w: the BMC has no EventService", ErrUnsupported)
	}
	body, _, err = getDoc(c, uri)
	if err != nil {
		return "", nil, err
	}
	return parseEventService(body)
}

// withEvents opens gofish and reads the EventService for fn.
func (s *redfishSession) withEvents(ctx context.Context, fn func(c *gofish.APIClient, subs string, types []string) error) error {
	s.tr.reset()
	c, err := s.gofish(ctx)
	if err != nil {
		return s.classify(ctx, err)
	}
	subs, types, err := s.eventService(c)
	if err == nil {
		err = fn(c, subs, types)
	}
	if err != nil && !errors.Is(err, ErrNoSubscription) && !errors.Is(err, ErrUnsupported) {
		return s.classify(ctx, err)
	}
	return err
}

// memberURI is the subscription id under the collection at subs (some
// BMCs leave the collection's trailing slash off, as Ironic notes). The id
// comes from an API user: one that is not a plain path segment ("/",
// "..", a query, an escape) could name another resource of the BMC, which
// anvil would then read or delete with the BMC's admin credentials, so it
// is no subscription of this BMC.
func memberURI(subs, id string) (string, error) {
	if !validSubscriptionID(id) {
		return "", fmt.Errorf("%w: %q is not a subscription id", ErrNoSubscription, id)
	}
	return strings.TrimSuffix(subs, "/") + "/" + id, nil
}

// validSubscriptionID accepts what BMCs use as member ids: letters,
// digits, '-', '_' and '.', but not "." or "..".
func validSubscriptionID(id string) bool {
	if id == "" || id == "." || id == ".." || len(id) > 256 {
		return false
	}
	for _, r := range id {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.':
		default:
			return false
		}
	}
	return true
}

// eventsError names a gofish failure; a 404 is ErrNoSubscription.
func eventsError(what string, err error) error {
	if httpStatus(err) == http.StatusNotFound {
		return fmt.Errorf("%w: %s: HTTP 404: %s", ErrNoSubscription, what, redfishMessages(err))
	}
	return &bmclibError{msg: fmt.Sprintf("%s: %s", what, redfishMessages(err)), cause: err}
}

func (s *redfishSession) eventTypes(ctx context.Context) ([]string, error) {
	var out []string
	err := s.withEvents(ctx, func(_ *gofish.APIClient, _ string, types []string) error {
		out = types
		return nil
	})
	return out, err
}

func (s *redfishSession) createSubscription(ctx context.Context, req SubscriptionRequest) (Subscription, error) {
	var sub Subscription
	err := s.withEvents(ctx, func(c *gofish.APIClient, subs string, _ []string) error {
		payload := map[string]any{"Destination": req.Destination, "Context": req.Context, "Protocol": req.Protocol,
			"EventTypes": req.EventTypes}
		if len(req.HTTPHeaders) > 0 {
			payload["HttpHeaders"] = req.HTTPHeaders
		}
		resp, err := c.Post(subs, payload)
		if err != nil {
			return eventsError("POST "+subs, err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(io.LimitReader(resp.Body, maxDoc))
		if got, perr := parseSubscription(body); perr == nil {
			sub = got
			return nil
		}
		// A BMC may answer 201 with only a Location: read it there.
		loc := resp.Header.Get("Location")
		if i := strings.Index(loc, "/redfish/"); i > 0 {
			loc = loc[i:]
		}
		if loc == "" {
			return fmt.Errorf("POST %s: HTTP %d without the subscription (no body, no Location)", subs, resp.StatusCode)
		}
		body, _, err = getDoc(c, loc)
		if err != nil {
			return err
		}
		sub, err = parseSubscription(body)
		return err
	})
	return sub, err
}

func (s *redfishSession) subscriptions(ctx context.Context) (map[string]any, error) {
	var out map[string]any
	err := s.withEvents(ctx, func(c *gofish.APIClient, subs string, _ []string) error {
		body, _, err := getDoc(c, subs)
		if err != nil {
			return err
		}
		out, err = decodeObject(body)
		if err != nil {
			return fmt.Errorf("subscriptions %s: %w", subs, err)
		}
		if m, _ := out["Members"].([]any); len(m) > maxSubscriptions {
			return fmt.Errorf("subscriptions %s: more than %d members", subs, maxSubscriptions)
		}
		return nil
	})
	return out, err
}

func (s *redfishSession) subscription(ctx context.Context, id string) (Subscription, error) {
	var sub Subscription
	err := s.withEvents(ctx, func(c *gofish.APIClient, subs string, _ []string) error {
		uri, err := memberURI(subs, id)
		if err != nil {
			return err
		}
		resp, err := c.Get(uri)
		if err != nil {
			return eventsError("GET "+uri, err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, maxDoc))
		if err != nil {
			return err
		}
		sub, err = parseSubscription(body)
		return err
	})
	return sub, err
}

func (s *redfishSession) deleteSubscription(ctx context.Context, id string) error {
	return s.withEvents(ctx, func(c *gofish.APIClient, subs string, _ []string) error {
		uri, err := memberURI(subs, id)
		if err != nil {
			return err
		}
		resp, err := c.Delete(uri)
		if err != nil {
			return eventsError("DELETE "+uri, err)
		}
		resp.Body.Close()
		return nil
	})
}

// fakeEvents is the fake BMC's EventService: subscriptions in memory,
// no events sent.
type fakeEvents struct {
	mu   sync.Mutex
	next int
	subs map[string]map[string]map[string]any // node -> id -> resource
}

// fakeEventTypes are the event types the fake BMC takes.
func fakeEventTypes() []string {
	return []string{"Alert", "ResourceAdded", "ResourceRemoved", "ResourceUpdated", "StatusChange"}
}

func (s fakeSession) events() *fakeEvents { return &s.f.events }

func (s fakeSession) eventTypes(context.Context) ([]string, error) {
	return fakeEventTypes(), s.f.do(s.id, "get_event_service", func(*FakeNodeState, FakeKnobs) error { return nil })
}

func (s fakeSession) createSubscription(_ context.Context, req SubscriptionRequest) (Subscription, error) {
	if err := s.f.do(s.id, "create_subscription "+req.Destination, func(*FakeNodeState, FakeKnobs) error { return nil }); err != nil {
		return Subscription{}, err
	}
	e := s.events()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.next++
	id := strconv.Itoa(e.next)
	doc := map[string]any{"@odata.id": "/redfish/v1/EventService/Subscriptions/" + id, "Id": id,
		"Destination": req.Destination, "Context": req.Context, "Protocol": req.Protocol, "EventTypes": slices.Clone(req.EventTypes)}
	if e.subs == nil {
		e.subs = map[string]map[string]map[string]any{}
	}
	if e.subs[s.id] == nil {
		e.subs[s.id] = map[string]map[string]any{}
	}
	e.subs[s.id][id] = doc
	return Subscription{Doc: cloneDoc(doc), ID: id}, nil
}

func (s fakeSession) subscriptions(context.Context) (map[string]any, error) {
	if err := s.f.do(s.id, "get_subscriptions", func(*FakeNodeState, FakeKnobs) error { return nil }); err != nil {
		return nil, err
	}
	e := s.events()
	e.mu.Lock()
	defer e.mu.Unlock()
	ids := make([]string, 0, len(e.subs[s.id]))
	for id := range e.subs[s.id] {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	members := make([]any, 0, len(ids))
	for _, id := range ids {
		members = append(members, map[string]any{"@odata.id": "/redfish/v1/EventService/Subscriptions/" + id})
	}
	return map[string]any{"@odata.id": "/redfish/v1/EventService/Subscriptions", "Name": "Event Subscriptions Collection",
		"Members": members, "Members@odata.count": len(members)}, nil
}

func (s fakeSession) subscription(_ context.Context, id string) (Subscription, error) {
	if err := s.f.do(s.id, "get_subscription "+id, func(*FakeNodeState, FakeKnobs) error { return nil }); err != nil {
		return Subscription{}, err
	}
	e := s.events()
	e.mu.Lock()
	defer e.mu.Unlock()
	doc, ok := e.subs[s.id][id]
	if !ok {
		return Subscription{}, fmt.Errorf("%w: %s", ErrNoSubscription, id)
	}
	return Subscription{Doc: cloneDoc(doc), ID: id}, nil
}

func (s fakeSession) deleteSubscription(_ context.Context, id string) error {
	if err := s.f.do(s.id, "delete_subscription "+id, func(*FakeNodeState, FakeKnobs) error { return nil }); err != nil {
		return err
	}
	e := s.events()
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.subs[s.id][id]; !ok {
		return fmt.Errorf("%w: %s", ErrNoSubscription, id)
	}
	delete(e.subs[s.id], id)
	return nil
}

func cloneDoc(m map[string]any) map[string]any {
	b, _ := json.Marshal(m)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	return out
}
