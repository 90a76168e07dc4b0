package inspectrules

// The actions (Ironic's actions.py), on the run's copies. Unlike Ironic,
// set-attribute and its kin write only the node fields an operator may
// PATCH (SettableNodeFields): never uuid, provision_state, power_state,
// driver_internal_info or the like, which only the conductor writes.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-metal/anvil/bmc"
)

// SettableNodeFields are the node fields rules may write: those of
// Ironic's node PATCH that describe the machine, not its operation
// (instance_uuid, maintenance, protected and traits, which add-trait
// writes, are left out).
var SettableNodeFields = []string{"name", "description", "driver", "driver_info", "properties", "extra",
	"instance_info", "resource_class", "owner", "lessee", "conductor_group", "shard", "automated_clean",
	"network_data", "retired", "retired_reason",
	"bios_interface", "boot_interface", "console_interface", "deploy_interface", "firmware_interface",
	"inspect_interface", "management_interface", "network_interface", "power_interface", "raid_interface",
	"rescue_interface", "storage_interface", "vendor_interface"}

// SettablePortFields are the port fields rules may write.
var SettablePortFields = []string{"name", "extra", "local_link_connection", "physical_network", "pxe_enabled", "is_smartnic"}

// maxTraits is Ironic's limit of traits on a node.
const maxTraits = 50

var traitRe = regexp.MustCompile(`^[A-Z0-9_]+$`)

func actionFailure(format string, a ...any) error {
	return errorf("Inspection rule action execution failed. Reason: %s", fmt.Sprintf(format, a...))
}

// shown is a value as an error may show it: never a sensitive rule's.
func (r *run) shown(v any) string {
	if r.rule.Sensitive {
		return "***"
	}
	return pyStr(v, secretKey)
}

func str(v any) string { s, _ := v.(string); return s }

// apply runs one action on its interpolated arguments; what is the
// change for the history ("" if nothing changed).
func (r *run) apply(op string, a map[string]any) (string, error) {
	switch op {
	case "fail":
		return "", &ExecError{Rule: r.rule.UUID, Msg: fmt.Sprintf("Failed to inspect hardware. Reason: %s", pyStr(a["msg"], nil))}
	case "log":
		return "", r.logMsg(a)
	case "set-attribute", "extend-attribute", "del-attribute":
		return r.attribute(op, r.res.Node, "", SettableNodeFields, r.o.CheckNode, a)
	case "set-port-attribute", "extend-port-attribute", "del-port-attribute":
		port := r.port(pyStr(a["port_id"], nil))
		if port == nil {
			return "", errorf("Port %s could not be found.", pyStr(a["port_id"], nil))
		}
		what, err := r.attribute(strings.Replace(op, "-port", "", 1), port, " for port "+str(port["uuid"]),
			SettablePortFields, r.o.CheckPort, a)
		if err == nil && what != "" {
			if id := str(port["uuid"]); !contains(r.res.PortsChanged, id) {
				r.res.PortsChanged = append(r.res.PortsChanged, id)
			}
			what = "port " + str(port["uuid"]) + " " + what
		}
		return what, err
	case "add-trait", "remove-trait":
		return r.trait(op, a["name"])
	case "set-capability", "unset-capability":
		return r.capability(op, a)
	case "set-plugin-data", "extend-plugin-data", "unset-plugin-data":
		return "", r.pluginData(op, a)
	case "api-call":
		return "", r.apiCall(a)
	case ActionManage:
		r.res.Manage = true
		return "(manage requested)", nil
	}
	return "", errorf("Unsupported action '%s'.", op)
}

func (r *run) logMsg(a map[string]any) error {
	level := "info"
	if l, ok := a["level"]; ok {
		level = strings.ToLower(pyStr(l, nil))
	}
	lv := map[string]slog.Level{"debug": slog.LevelDebug, "info": slog.LevelInfo, "warning": slog.LevelWarn,
		"error": slog.LevelError, "critical": slog.LevelError + 4}
	l, ok := lv[level]
	if !ok {
		return execFailure("Invalid log level: %s. Choose from debug, info, warning, error, critical", level)
	}
	msg := pyStr(a["msg"], secretKey)
	if r.rule.Sensitive {
		msg = "(message of a sensitive rule not shown)"
	}
	r.log.Log(r.ctx, l, msg, "rule", r.rule.UUID, "node", r.res.Node["uuid"])
	return nil
}

func (r *run) port(id string) map[string]any {
	for _, p := range r.res.Ports {
		if str(p["uuid"]) == id || strings.EqualFold(str(p["address"]), id) && id != "" {
			return p
		}
	}
	return nil
}

// normalizePath is Ironic's normalize_path: slashes if there are any,
// else dots.
func normalizePath(p string) []string {
	if strings.Contains(p, "/") {
		return strings.Split(strings.Trim(p, "/"), "/")
	}
	return strings.Split(p, ".")
}

// attribute sets, extends or deletes a field (or a key inside a dict
// field) of doc, a node or a port.
func (r *run) attribute(op string, doc map[string]any, of string, settable []string, checkField func(string, any) error,
	a map[string]any) (string, error) {
	path := pyStr(a["path"], nil)
	parts := normalizePath(path)
	field := parts[0]
	wrap := func(err error) error {
		switch op {
		case "set-attribute":
			return actionFailure("Failed to set attribute %s%s with value %s: %v", path, of, r.shown(a["value"]), err)
		case "extend-attribute":
			return actionFailure("Failed to extend attribute %s%s: %v", path, of, err)
		}
		return actionFailure("Failed to delete attribute at %s%s: %v", path, of, err)
	}
	if !contains(settable, field) {
		return "", wrap(errorf("%s cannot be changed by an inspection rule", quotePy(field)))
	}
	before := deepCopy(doc[field])
	if err := editPath(op, doc, parts, a); err != nil {
		doc[field] = before
		return "", wrap(err)
	}
	if checkField != nil {
		if err := checkField(field, doc[field]); err != nil {
			doc[field] = before
			return "", wrap(err)
		}
	}
	return strings.Join(parts, "/"), nil
}

// editPath does the edit on doc along parts.
func editPath(op string, doc map[string]any, parts []string, a map[string]any) error {
	cur := doc
	for i, p := range parts[:len(parts)-1] {
		next, ok := cur[p]
		if !ok || next == nil {
			if op == "del-attribute" && i > 0 {
				return nil // a missing key is already gone
			}
			next = map[string]any{}
			cur[p] = next
		}
		m, ok := next.(map[string]any)
		if !ok {
			return errorf("%s object has no attribute 'setdefault'", quotePy(pyType(next)))
		}
		cur = m
	}
	last := parts[len(parts)-1]
	switch op {
	case "set-attribute":
		cur[last] = a["value"]
	case "extend-attribute":
		v, ok := cur[last]
		if !ok || v == nil {
			v = []any{}
		}
		l, ok := v.([]any)
		if !ok {
			return errorf("Cannot extend non-list attribute %s", strings.Join(parts, "/"))
		}
		if !Truthy(a["unique"]) || !containsEq(l, a["value"]) {
			l = append(l, a["value"])
		}
		cur[last] = l
	case "del-attribute":
		if len(parts) == 1 {
			cur[last] = nil // a field is reset, not removed
		} else {
			delete(cur, last)
		}
	}
	return nil
}

func containsEq(l []any, v any) bool {
	for _, x := range l {
		if pyEq(x, v) {
			return true
		}
	}
	return false
}

func (r *run) trait(op string, name any) (string, error) {
	n, ok := name.(string)
	verb := map[string]string{"add-trait": "add new", "remove-trait": "remove"}[op]
	if !ok || len(n) > 255 || !traitRe.MatchString(n) {
		return "", actionFailure("Failed to %s trait %s: a trait is a standard trait or CUSTOM_ and upper-case letters, digits and underscores, at most 255 characters",
			verb, r.shown(name))
	}
	traits, _ := r.res.Node["traits"].([]any)
	i := -1
	for j, t := range traits {
		if t == n {
			i = j
		}
	}
	if op == "remove-trait" {
		if i < 0 {
			r.log.Warn("inspection rule removes a trait the node does not have", "rule", r.rule.UUID, "trait", n)
			return "", nil
		}
		r.res.Node["traits"] = append(traits[:i:i], traits[i+1:]...)
		return n, nil
	}
	if i >= 0 {
		return "", nil
	}
	if len(traits) >= maxTraits {
		return "", actionFailure("Failed to add new trait %s: a node has at most %d traits", n, maxTraits)
	}
	r.res.Node["traits"] = append(traits, n)
	return n, nil
}

// capability sets or unsets name in properties/capabilities, Ironic's
// "k1:v1,k2:v2" string. Setting replaces the name's entry where Ironic
// would add a second one.
func (r *run) capability(op string, a map[string]any) (string, error) {
	name := pyStr(a["name"], nil)
	verb := map[string]string{"set-capability": "set", "unset-capability": "unset"}[op]
	props, ok := r.res.Node["properties"].(map[string]any)
	if !ok {
		props = map[string]any{}
	}
	raw, has := props["capabilities"]
	caps, isStr := raw.(string)
	if has && raw != nil && !isStr {
		return "", actionFailure("Failed to %s capability %s: properties/capabilities is not a string", verb, name)
	}
	var kept []string
	if caps != "" {
		for _, c := range strings.Split(caps, ",") {
			if !strings.HasPrefix(c, name+":") {
				kept = append(kept, c)
			}
		}
	}
	if op == "set-capability" {
		v, ok := a["value"].(string)
		if !ok {
			return "", actionFailure("Failed to set capability %s: sequence item 1: expected str instance, %s found", name, pyType(a["value"]))
		}
		kept = append(kept, name+":"+v)
	} else if !has {
		return "", nil
	}
	props["capabilities"] = strings.Join(kept, ",")
	if r.o.CheckNode != nil {
		if err := r.o.CheckNode("properties", props); err != nil {
			return "", actionFailure("Failed to %s capability %s: %v", verb, name, err)
		}
	}
	r.res.Node["properties"] = props
	return name, nil
}

// pluginData edits the plugin data along a dotted path (Ironic splits
// these on dots only).
func (r *run) pluginData(op string, a map[string]any) error {
	path := pyStr(a["path"], nil)
	keys := strings.Split(path, ".")
	cur := r.res.PluginData
	var parents []map[string]any
	for _, k := range keys[:len(keys)-1] {
		next, ok := cur[k].(map[string]any)
		if !ok {
			if _, there := cur[k]; there || op == "unset-plugin-data" {
				if op == "unset-plugin-data" {
					r.log.Warn("inspection rule unsets plugin data that is not there", "rule", r.rule.UUID, "path", path)
					return nil
				}
				return actionFailure("Failed to %s plugin data at %s: %s is not a dict", map[string]string{
					"set-plugin-data": "set", "extend-plugin-data": "extend"}[op], path, k)
			}
			next = map[string]any{}
			cur[k] = next
		}
		parents = append(parents, cur)
		cur = next
	}
	last := keys[len(keys)-1]
	switch op {
	case "set-plugin-data":
		cur[last] = a["value"]
	case "extend-plugin-data":
		l, ok := cur[last].([]any)
		if !ok && cur[last] != nil {
			return actionFailure("Failed to extend plugin data at %s: 'list' object expected, got %s", path, quotePy(pyType(cur[last])))
		}
		if !Truthy(a["unique"]) || !containsEq(l, a["value"]) {
			l = append(l, a["value"])
		}
		cur[last] = l
	case "unset-plugin-data":
		if _, ok := cur[last]; !ok {
			r.log.Warn("inspection rule unsets plugin data that is not there", "rule", r.rule.UUID, "path", path)
			return nil
		}
		delete(cur, last)
		// An emptied dict goes too, as Ironic's _unset_nested_dict.
		if len(cur) == 0 && len(parents) > 0 {
			delete(parents[len(parents)-1], keys[len(keys)-2])
		}
	}
	return nil
}

// maxCallTimeout bounds each api-call request and callBudget all of one
// action's tries: a slow hook never holds an inspection for long.
const (
	maxCallTimeout = 30 * time.Second
	callBudget     = 60 * time.Second
	maxRetries     = 5
)

// apiCall is Ironic's api-call (31.0): a GET of url, retried on 429 and
// 5xx; anything but a 2xx answer in the end fails the rule.
func (r *run) apiCall(a map[string]any) error {
	u := pyStr(a["url"], nil)
	num := func(k string, def float64) (float64, error) {
		v, ok := a[k]
		if !ok || v == nil {
			return def, nil
		}
		if f, ok := v.(float64); ok {
			return f, nil
		}
		f, err := strconv.ParseFloat(pyStr(v, nil), 64)
		if err != nil {
			return 0, actionFailure("Invalid parameter: could not convert %s to a number: %s", k, quotePy(pyStr(v, nil)))
		}
		return f, nil
	}
	timeout, err := num("timeout", 5)
	if err != nil {
		return err
	}
	if timeout <= 0 {
		return actionFailure("Invalid parameter: timeout must be greater than zero")
	}
	retries, err := num("retries", 3)
	if err != nil {
		return err
	}
	backoff, err := num("backoff_factor", 0.3)
	if err != nil {
		return err
	}
	per := min(time.Duration(timeout*float64(time.Second)), maxCallTimeout)
	tries := int(min(max(retries, 0), maxRetries)) + 1
	pu, err := url.Parse(u)
	if err != nil || (pu.Scheme != "http" && pu.Scheme != "https") || pu.Host == "" {
		return actionFailure("Invalid parameter: %s is not an http(s) URL", quotePy(u))
	}
	client := r.o.HTTPClient
	if client == nil {
		client = http.DefaultClient
	}
	// a redirect never turns an https call into a plain-http one, which
	// would send the rule's headers and query in the clear
	nc := *client
	nc.CheckRedirect = bmc.NoDowngrade
	client = &nc
	if px, ok := a["proxies"].(map[string]any); ok && len(px) > 0 {
		proxy, err := url.Parse(pyStr(px[pu.Scheme], nil))
		if px[pu.Scheme] != nil && err == nil {
			c := *client
			tr := http.DefaultTransport.(*http.Transport).Clone()
			tr.Proxy = http.ProxyURL(proxy)
			c.Transport = tr
			client = &c
		}
	}
	if r.rule.Sensitive {
		u = "***" // from here on only in errors: a sensitive rule's URL may carry a credential
	}
	ctx, cancel := context.WithTimeout(r.ctx, callBudget)
	defer cancel()
	var last error
	for i := 0; i < tries; i++ {
		if i > 0 {
			wait := time.Duration(backoff * float64(time.Second) * float64(int(1)<<(i-1)))
			select {
			case <-ctx.Done():
				return actionFailure("Request to %s failed: %v", u, ctx.Err())
			case <-time.After(min(wait, 10*time.Second)):
			}
		}
		status, err := r.get(ctx, client, pu.String(), per, a["headers"])
		if err == nil && status < 400 {
			return nil
		}
		if err == nil {
			last = errorf("%d Error for url: %s", status, u)
			if status != 429 && status < 500 {
				break
			}
			continue
		}
		last = err
	}
	return actionFailure("Request to %s failed: %v", u, last)
}

func (r *run) get(ctx context.Context, c *http.Client, u string, timeout time.Duration, headers any) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	if h, ok := headers.(map[string]any); ok {
		for k, v := range h {
			req.Header.Set(k, pyStr(v, nil))
		}
	}
	resp, err := c.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			err = ue.Err // the URL is in the caller's message (or hidden)
		}
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
