package vbmc

// The EventService: event subscriptions (Redfish EventDestination) that
// clients create, list and delete, and the events the virtual BMC POSTs
// to each subscriber's Destination when a node's power state changes and
// when virtual media is inserted or ejected. Events go out as real BMCs
// send them: one Event document per change with an Events array
// (EventType, MessageId, OriginOfCondition...), the subscription's
// Context, and the subscription's HttpHeaders on the request.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
	"time"
)

const (
	eventServicePath  = "/redfish/v1/EventService"
	subscriptionsPath = eventServicePath + "/Subscriptions"
	// maxSubscriptions bounds the subscription table.
	maxSubscriptions = 64
	// deliveryTimeout bounds one event POST.
	deliveryTimeout = 5 * time.Second
)

// EventTypes are the event types a subscription may name. "Alert" is
// the catch-all many BMCs (iDRAC) send everything as; Ironic subscribes
// to it by default.
func EventTypes() []string {
	return []string{"Alert", "ResourceAdded", "ResourceRemoved", "ResourceUpdated", "StatusChange"}
}

// subscription is one EventDestination.
type subscription struct {
	ID          string
	Destination string
	Context     string
	Protocol    string
	EventTypes  []string
	Headers     []map[string]string
}

// events is the EventService's state.
type events struct {
	mu     sync.Mutex
	next   int
	eventN int
	subs   []*subscription
	client *http.Client
	wg     sync.WaitGroup // deliveries under way
}

func newEvents() *events {
	return &events{client: &http.Client{Timeout: deliveryTimeout}}
}

func (s *Server) eventRoutes(mux *http.ServeMux) {
	mux.HandleFunc("GET "+eventServicePath, s.auth(s.getEventService))
	mux.HandleFunc("GET "+subscriptionsPath, s.auth(s.listSubscriptions))
	mux.HandleFunc("POST "+subscriptionsPath, s.auth(s.createSubscription))
	mux.HandleFunc("GET "+subscriptionsPath+"/{sub}", s.auth(s.getSubscription))
	mux.HandleFunc("DELETE "+subscriptionsPath+"/{sub}", s.auth(s.deleteSubscription))
}

func (s *Server) getEventService(w http.ResponseWriter, _ *http.Request) {
	es := odata(eventServicePath, "#EventService.v1_7_0.EventService")
	es["Id"], es["Name"] = "EventService", "Event Service"
	es["ServiceEnabled"] = true
	es["Status"] = map[string]any{"State": "Enabled", "Health": "OK"}
	es["DeliveryRetryAttempts"], es["DeliveryRetryIntervalSeconds"] = 0, 0
	es["EventTypesForSubscription"] = EventTypes()
	es["Subscriptions"] = link(subscriptionsPath)
	writeJSON(w, http.StatusOK, es)
}

func (s *Server) listSubscriptions(w http.ResponseWriter, _ *http.Request) {
	s.events.mu.Lock()
	var members []string
	for _, sub := range s.events.subs {
		members = append(members, subscriptionsPath+"/"+sub.ID)
	}
	s.events.mu.Unlock()
	writeJSON(w, http.StatusOK, collection(subscriptionsPath, "#EventDestinationCollection.EventDestinationCollection",
		"Event Subscriptions Collection", members))
}

// subscriptionDoc is the resource; HttpHeaders are never read back, as
// the schema requires (they may carry credentials).
func subscriptionDoc(sub *subscription) map[string]any {
	d := odata(subscriptionsPath+"/"+sub.ID, "#EventDestination.v1_7_0.EventDestination")
	d["Id"], d["Name"] = sub.ID, "Event Subscription "+sub.ID
	d["Destination"], d["Context"], d["Protocol"] = sub.Destination, sub.Context, sub.Protocol
	d["EventTypes"] = sub.EventTypes
	d["HttpHeaders"] = []any{}
	d["SubscriptionType"] = "RedfishEvent"
	return d
}

func (s *Server) createSubscription(w http.ResponseWriter, r *http.Request) {
	var body struct {
		Destination *string
		Context     *string
		Protocol    *string
		EventTypes  []string
		HttpHeaders []map[string]string //nolint:revive // Redfish's name
	}
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		redfishError(w, http.StatusBadRequest, "MalformedJSON", "The request body submitted was malformed JSON: "+err.Error())
		return
	}
	if body.Destination == nil {
		redfishError(w, http.StatusBadRequest, "PropertyMissing", "The property Destination is a required property and must be included in the request.")
		return
	}
	if u, err := url.Parse(*body.Destination); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		redfishError(w, http.StatusBadRequest, "PropertyValueFormatError", fmt.Sprintf("The value %q for the property Destination is of a different format than the property can accept.", *body.Destination))
		return
	}
	sub := &subscription{Destination: *body.Destination, Protocol: "Redfish", EventTypes: body.EventTypes, Headers: body.HttpHeaders}
	if body.Protocol != nil {
		if *body.Protocol != "Redfish" {
			redfishError(w, http.StatusBadRequest, "PropertyValueNotInList", fmt.Sprintf("The value %q for the property Protocol is not in the list of acceptable values.", *body.Protocol))
			return
		}
	}
	if body.Context != nil {
		sub.Context = *body.Context
	}
	for _, t := range body.EventTypes {
		if !slices.Contains(EventTypes(), t) {
			redfishError(w, http.StatusBadRequest, "PropertyValueNotInList", fmt.Sprintf("The value %q for the property EventTypes is not in the list of acceptable values.", t))
			return
		}
	}
	if sub.EventTypes == nil {
		sub.EventTypes = []string{}
	}
	e := s.events
	e.mu.Lock()
	if len(e.subs) >= maxSubscriptions {
		e.mu.Unlock()
		redfishError(w, http.StatusServiceUnavailable, "CreateLimitReachedForResource", "The create operation failed because the resource has reached the limit of possible resources.")
		return
	}
	e.next++
	sub.ID = strconv.Itoa(e.next)
	e.subs = append(e.subs, sub)
	doc := subscriptionDoc(sub)
	e.mu.Unlock()
	s.log.Info("vbmc: event subscription created", "id", sub.ID, "destination", sub.Destination)
	w.Header().Set("Location", subscriptionsPath+"/"+sub.ID)
	writeJSON(w, http.StatusCreated, doc)
}

// lookupSubscription finds the subscription the path names; 404 if none.
func (s *Server) lookupSubscription(w http.ResponseWriter, r *http.Request) (int, bool) {
	id := r.PathValue("sub")
	i := slices.IndexFunc(s.events.subs, func(sub *subscription) bool { return sub.ID == id })
	if i < 0 {
		redfishError(w, http.StatusNotFound, "ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", r.URL.Path))
		return 0, false
	}
	return i, true
}

func (s *Server) getSubscription(w http.ResponseWriter, r *http.Request) {
	s.events.mu.Lock()
	i, ok := s.lookupSubscription(w, r)
	if !ok {
		s.events.mu.Unlock()
		return
	}
	doc := subscriptionDoc(s.events.subs[i])
	s.events.mu.Unlock()
	writeJSON(w, http.StatusOK, doc)
}

func (s *Server) deleteSubscription(w http.ResponseWriter, r *http.Request) {
	s.events.mu.Lock()
	i, ok := s.lookupSubscription(w, r)
	if ok {
		s.events.subs = slices.Delete(s.events.subs, i, i+1)
	}
	s.events.mu.Unlock()
	if ok {
		s.log.Info("vbmc: event subscription deleted", "id", r.PathValue("sub"))
		w.WriteHeader(http.StatusNoContent)
	}
}

// Event is one entry of an Event document's Events array.
type Event struct {
	EventType string
	MessageID string
	Message   string
	Args      []string
	Origin    string // OriginOfCondition
	Severity  string
}

// Emit sends ev to every subscriber that asked for its type (or for
// Alert, or for every type). Deliveries run in the background; Wait
// waits for them.
func (s *Server) Emit(ev Event) {
	e := s.events
	e.mu.Lock()
	e.eventN++
	id := strconv.Itoa(e.eventN)
	var targets []subscription
	for _, sub := range e.subs {
		if len(sub.EventTypes) == 0 || slices.Contains(sub.EventTypes, ev.EventType) || slices.Contains(sub.EventTypes, "Alert") {
			targets = append(targets, *sub)
		}
	}
	e.mu.Unlock()
	for _, sub := range targets {
		typ := ev.EventType
		if len(sub.EventTypes) > 0 && !slices.Contains(sub.EventTypes, typ) {
			typ = "Alert"
		}
		doc := odata("", "#Event.v1_4_0.Event")
		delete(doc, "@odata.id")
		doc["Id"], doc["Name"], doc["Context"] = id, "Event Array", sub.Context
		doc["Events"] = []any{map[string]any{
			"EventType": typ, "EventId": id, "EventTimestamp": time.Now().UTC().Format(time.RFC3339),
			"Severity": ev.Severity, "Message": ev.Message, "MessageId": ev.MessageID, "MessageArgs": ev.Args,
			"OriginOfCondition": link(ev.Origin), "Context": sub.Context,
		}}
		e.wg.Add(1)
		go func() {
			defer e.wg.Done()
			s.deliver(sub, doc)
		}()
	}
}

// WaitEvents waits for the deliveries under way.
func (s *Server) WaitEvents() { s.events.wg.Wait() }

func (s *Server) deliver(sub subscription, doc map[string]any) {
	body, _ := json.Marshal(doc)
	ctx, cancel := context.WithTimeout(context.Background(), deliveryTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, sub.Destination, bytes.NewReader(body))
	if err != nil {
		s.log.Warn("vbmc: event not delivered", "subscription", sub.ID, "err", err)
		return
	}
	req.Header.Set("Content-Type", "application/json")
	for _, h := range sub.Headers {
		for k, v := range h {
			req.Header.Set(k, v)
		}
	}
	resp, err := s.events.client.Do(req)
	if err != nil {
		s.log.Warn("vbmc: event not delivered", "subscription", sub.ID, "destination", sub.Destination, "err", err)
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxBody))
	resp.Body.Close()
	s.log.Debug("vbmc: event delivered", "subscription", sub.ID, "status", resp.StatusCode)
}

// powerEvent announces a node's power change.
func (s *Server) powerEvent(n *Node, on bool) {
	msg, word := "ResourceEvent.1.3.ResourcePoweredOff", "off"
	if on {
		msg, word = "ResourceEvent.1.3.ResourcePoweredOn", "on"
	}
	s.Emit(Event{EventType: "StatusChange", MessageID: msg, Severity: "OK", Args: []string{n.SystemID()},
		Message: fmt.Sprintf("The resource %s has powered %s.", n.SystemID(), word), Origin: "/redfish/v1/Systems/" + n.SystemID()})
}

// mediaEvent announces a virtual media insert or eject.
func (s *Server) mediaEvent(n *Node, what string) {
	uri := "/redfish/v1/Managers/" + n.Name + "/VirtualMedia/Cd"
	s.Emit(Event{EventType: "ResourceUpdated", MessageID: "ResourceEvent.1.3.ResourceChanged", Severity: "OK", Args: []string{uri},
		Message: fmt.Sprintf("Virtual media %s: one or more properties of %s changed.", what, uri), Origin: uri})
}
