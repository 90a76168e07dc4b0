package conductor

// Node vendor passthru: the methods of the node's vendor interface, as
// Ironic's conductor routes them (vendor_passthru,
// get_node_vendor_passthru_methods). Only the redfish vendor interface
// has methods (drivers/modules/redfish/vendor.py): BMC event
// subscriptions, and the older eject_vmedia. no-vendor has none.

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/controller/store"
)

// VendorRedfish is the redfish hardware type's vendor interface.
const VendorRedfish = "redfish"

// VendorMethod is a vendor method's metadata, as Ironic lists it.
type VendorMethod struct {
	HTTPMethods          []string `json:"http_methods"`
	Async                bool     `json:"async"`
	Description          string   `json:"description"`
	Attach               bool     `json:"attach"`
	RequireExclusiveLock bool     `json:"require_exclusive_lock"`
}

// redfishVendorMethods are the redfish vendor interface's methods, with
// Ironic's descriptions.
func redfishVendorMethods() map[string]VendorMethod {
	m := func(verb string, async bool, desc string) VendorMethod {
		return VendorMethod{HTTPMethods: []string{verb}, Async: async, Description: desc, RequireExclusiveLock: true}
	}
	return map[string]VendorMethod{
		"eject_vmedia": m("POST", true, "Eject a virtual media device. If no device is provided then all attached devices will be ejected. "+
			"Optional arguments: 'boot_device' - the boot device to eject, either 'cd', 'dvd', 'usb', or 'floppy'"),
		"create_subscription":   m("POST", false, "Creates a subscription on a node. Required argument: a dictionary of {'Destination': 'destination_url'}"),
		"delete_subscription":   m("DELETE", false, "Delete a subscription on a node. Required argument: a dictionary of {'id': 'subscription_bmc_id'}"),
		"get_all_subscriptions": m("GET", false, "Returns all subscriptions on the node."),
		"get_subscription":      m("GET", false, "Get a subscription on the node. Required argument: a dictionary of {'id': 'subscription_bmc_id'}"),
	}
}

// vendorMethods are the methods of the node's vendor interface.
func (v *nodeCalls) vendorMethods(n *store.Node) map[string]VendorMethod {
	if n.Interfaces.Vendor == VendorRedfish && n.Driver == bmc.HardwareRedfish {
		return redfishVendorMethods()
	}
	return map[string]VendorMethod{}
}

// VendorPassthruMethods lists the node's vendor methods.
func (v *nodeCalls) VendorPassthruMethods(ctx context.Context, ident string) (map[string]VendorMethod, error) {
	n, err := v.st.GetNode(ctx, ident)
	if err != nil {
		return nil, err
	}
	return v.vendorMethods(n), nil
}

// VendorResult is what a vendor method answered: its return value, and
// whether it ran asynchronously (202, no body).
type VendorResult struct {
	Return any
	Async  bool
}

// VendorPassthru calls a vendor method of the node with the request's
// HTTP method and body, under the node's lock.
func (v *nodeCalls) VendorPassthru(ctx context.Context, ident, method, httpMethod string, args map[string]any) (VendorResult, error) {
	n, err := v.st.GetNode(ctx, ident)
	if err != nil {
		return VendorResult{}, err
	}
	meta, ok := v.vendorMethods(n)[method]
	if !ok {
		return VendorResult{}, Invalid("No handler for method %s", method)
	}
	httpMethod = strings.ToUpper(httpMethod)
	if !slices.Contains(meta.HTTPMethods, httpMethod) {
		return VendorResult{}, Invalid("The method %s does not support HTTP %s", method, httpMethod)
	}
	n, release, err := v.hold(ctx, n.UUID, func(*store.Node) error { return nil })
	if err != nil {
		return VendorResult{}, err
	}
	defer release()
	d, t, err := v.bmcFor(n, "vendor")
	if err != nil {
		return VendorResult{}, err
	}
	rv := redfishVendor{v: v, d: d, t: t, n: n}
	var ret any
	switch method {
	case "create_subscription":
		ret, err = rv.createSubscription(ctx, args)
	case "delete_subscription":
		err = rv.deleteSubscription(ctx, args)
	case "get_subscription":
		ret, err = rv.getSubscription(ctx, args)
	case "get_all_subscriptions":
		ret, err = rv.allSubscriptions(ctx)
	case "eject_vmedia":
		err = rv.ejectVmedia(ctx, args)
	}
	return VendorResult{Return: ret, Async: meta.Async}, err
}

// redfishVendor is Ironic's RedfishVendorPassthru for one node.
type redfishVendor struct {
	v *nodeCalls
	d *BMCDriver
	t bmc.Target
	n *store.Node
}

// redfishError is Ironic's RedfishError (500 unless code says otherwise).
func redfishError(code Code, err error, format string, a ...any) error {
	return Wrap(code, err, "Redfish exception occurred. Error: %s", fmt.Sprintf(format, a...))
}

// subscriptionFields are the fields Ironic answers of a subscription
// (SUBSCRIPTION_COMMON_FIELDS).
func subscriptionFields(doc map[string]any) map[string]any {
	out := map[string]any{}
	for _, k := range []string{"Id", "Context", "Protocol", "Destination", "EventTypes"} {
		if v, ok := doc[k]; ok {
			out[k] = v
		}
	}
	return out
}

// validateSubscription is Ironic's _validate_create_subscription.
func (rv redfishVendor) validateSubscription(ctx context.Context, args map[string]any) (bmc.SubscriptionRequest, error) {
	req := bmc.SubscriptionRequest{Protocol: "Redfish", EventTypes: []string{"Alert"}}
	if raw, ok := args["EventTypes"]; ok && raw != nil {
		allowed, _, err := rv.d.m.EventTypes(ctx, rv.t)
		if err != nil {
			return req, driverFailure(err, "Redfish exception occurred. Error: %v", err)
		}
		list, isList := raw.([]any)
		req.EventTypes = nil
		ok := isList
		for _, e := range list {
			s, isStr := e.(string)
			ok = ok && isStr && slices.Contains(allowed, s)
			req.EventTypes = append(req.EventTypes, s)
		}
		if !ok {
			return req, Invalid("EventTypes %s is not a valid value, allowed values %s", pyStr(raw), pySet(allowed))
		}
	}
	if raw, ok := args["Context"]; ok {
		s, isStr := raw.(string)
		if !isStr {
			return req, Invalid("Context %s is not a valid string", pyStr(raw))
		}
		req.Context = s
	}
	if raw, ok := args["Protocol"]; ok {
		s, isStr := raw.(string)
		if !isStr {
			return req, Invalid("Protocol %s is not a string", pyStr(raw))
		}
		req.Protocol = s
	}
	if raw, ok := args["HttpHeaders"]; ok && raw != nil {
		list, isList := raw.([]any)
		if !isList {
			return req, Invalid("HttpHeaders %s is not a list of headers", pyStr(raw))
		}
		for _, h := range list {
			obj, _ := h.(map[string]any)
			hdr := map[string]string{}
			for k, val := range obj {
				s, isStr := val.(string)
				if !isStr {
					return req, Invalid("HttpHeaders %s is not a list of headers", pyStr(raw))
				}
				hdr[k] = s
			}
			if obj == nil {
				return req, Invalid("HttpHeaders %s is not a list of headers", pyStr(raw))
			}
			req.HTTPHeaders = append(req.HTTPHeaders, hdr)
		}
	}
	dest, _ := args["Destination"].(string)
	u, err := url.Parse(dest)
	if dest == "" || err != nil || u.Scheme == "" || u.Host == "" {
		return req, Invalid("Destination %s is not a valid URI", pyStr(args["Destination"]))
	}
	req.Destination = dest
	return req, nil
}

func (rv redfishVendor) createSubscription(ctx context.Context, args map[string]any) (any, error) {
	req, err := rv.validateSubscription(ctx, args)
	if err != nil {
		return nil, err
	}
	sub, _, err := rv.d.m.CreateSubscription(ctx, rv.t, req)
	if err != nil {
		// Ironic's payload in its order; the headers (credentials, often)
		// are left out of the message.
		payload := fmt.Sprintf("{'Destination': %s, 'Protocol': %s, 'Context': %s, 'EventTypes': %s}",
			pyRepr(req.Destination), pyRepr(req.Protocol), pyRepr(req.Context), pyStr(req.EventTypes))
		return nil, redfishError(0, err, "Failed to create subscription on node %s. Subscription payload: %s. Error: %v", rv.n.UUID, payload, err)
	}
	rv.v.event(ctx, rv.n.UUID, "INFO", "vendor", fmt.Sprintf("BMC event subscription %s created for %s", sub.ID, req.Destination))
	return subscriptionFields(sub.Doc), nil
}

func subscriptionID(args map[string]any) (string, error) {
	id, _ := args["id"].(string)
	if id == "" {
		return "", Invalid("id can't be None")
	}
	return id, nil
}

func (rv redfishVendor) deleteSubscription(ctx context.Context, args map[string]any) error {
	id, err := subscriptionID(args)
	if err != nil {
		return err
	}
	if _, err := rv.d.m.DeleteSubscription(ctx, rv.t, id); err != nil {
		return redfishError(CodeNotFound, err, "Redfish delete_subscription failed for subscription %s on node %s. Error: %v", id, rv.n.UUID, err)
	}
	rv.v.event(ctx, rv.n.UUID, "INFO", "vendor", "BMC event subscription "+id+" deleted")
	return nil
}

func (rv redfishVendor) getSubscription(ctx context.Context, args map[string]any) (any, error) {
	id, err := subscriptionID(args)
	if err != nil {
		return nil, err
	}
	sub, _, err := rv.d.m.GetSubscription(ctx, rv.t, id)
	if err != nil {
		return nil, redfishError(0, err, "Redfish get_subscription failed for subscription %s on node %s. Error: %v", id, rv.n.UUID, err)
	}
	return subscriptionFields(sub.Doc), nil
}

func (rv redfishVendor) allSubscriptions(ctx context.Context) (any, error) {
	coll, _, err := rv.d.m.Subscriptions(ctx, rv.t)
	if err != nil {
		return nil, redfishError(0, err, "Redfish get_subscriptions failed for node %s. Error: %v", rv.n.UUID, err)
	}
	return coll, nil
}

// ejectVmedia is Ironic's deprecated eject_vmedia: boot_device names a
// Redfish media type (sushy's "cd", "dvd", "usb", "floppy").
func (rv redfishVendor) ejectVmedia(ctx context.Context, args map[string]any) error {
	var types []string
	if dev, _ := args["boot_device"].(string); dev != "" {
		mt := map[string]string{"cd": bmc.MediaCD, "dvd": bmc.MediaDVD, "usb": bmc.MediaUSBStick, "floppy": bmc.MediaFloppy}[strings.ToLower(dev)]
		if mt == "" {
			return Invalid("Boot device %s is not a valid value ", dev)
		}
		types = []string{mt}
	}
	if err := rv.v.agentCD(rv.n, nil); err != nil && (len(types) == 0 || types[0] == bmc.MediaCD || types[0] == bmc.MediaDVD) {
		return err
	}
	if _, err := rv.d.m.DetachMedia(ctx, rv.t, types); err != nil {
		return driverFailure(err, "Redfish exception occurred. Error: %v", err)
	}
	return nil
}

// pyStr formats v as Python's str() does for the JSON values Ironic
// echoes in its messages.
func pyStr(v any) string {
	switch x := v.(type) {
	case nil:
		return "None"
	case string:
		return x
	case bool:
		if x {
			return "True"
		}
		return "False"
	case []string:
		items := make([]any, len(x))
		for i, s := range x {
			items[i] = s
		}
		return pyStr(items)
	case []any:
		parts := make([]string, len(x))
		for i, e := range x {
			parts[i] = pyRepr(e)
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		parts := make([]string, len(keys))
		for i, k := range keys {
			parts[i] = pyRepr(k) + ": " + pyRepr(x[k])
		}
		return "{" + strings.Join(parts, ", ") + "}"
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

func pyRepr(v any) string {
	if s, ok := v.(string); ok {
		return "'" + strings.ReplaceAll(s, "'", `\'`) + "'"
	}
	return pyStr(v)
}

// pySet formats a set of strings as Python prints one (sorted here;
// Python's order is arbitrary).
func pySet(items []string) string {
	s := slices.Clone(items)
	sort.Strings(s)
	parts := make([]string, len(s))
	for i, e := range s {
		parts[i] = pyRepr(e)
	}
	return "{" + strings.Join(parts, ", ") + "}"
}
