package vbmc

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// ChassisControl is the body of `anvil-vbmc chassis-control`, the program
// ipmi_sim runs for chassis_control. ipmi_sim calls it as
//
//	<program> <mc> get power|boot        → prints "power:1", "boot:pxe"
//	<program> <mc> set <param> <value>   → power 0|1, reset 1, shutdown 1, boot <dev>, identify ...
//
// and it forwards each call to nodeURL (http://127.0.0.1:8000/control/<node>).
// ipmi_sim runs it again when ipmitool retransmits, so it must be fast:
// one loopback HTTP request, no retries.
func ChassisControl(ctx context.Context, hc *http.Client, nodeURL, username, password string, args []string, stdout io.Writer) error {
	if len(args) < 3 {
		return fmt.Errorf("%w: usage: <mc> get|set <param> [value]", ErrControl)
	}
	u, err := url.Parse(strings.TrimSuffix(nodeURL, "/"))
	if err != nil {
		return fmt.Errorf("%w: control url: %w", ErrControl, err)
	}
	if h := u.Hostname(); h != "localhost" && !strings.HasPrefix(h, "127.") && h != "::1" {
		// The control endpoint powers machines: keep it on loopback.
		return fmt.Errorf("%w: control url must be on loopback, got %s", ErrControl, h)
	}
	verb, param := args[1], args[2]
	endpoint := u.String() + "/" + url.PathEscape(param)
	var req *http.Request
	switch verb {
	case "get":
		req, err = http.NewRequestWithContext(ctx, http.MethodGet, endpoint, nil)
	case "set":
		val := ""
		if len(args) > 3 {
			val = strings.Join(args[3:], " ")
		}
		req, err = http.NewRequestWithContext(ctx, http.MethodPost, endpoint, strings.NewReader(val))
	default:
		return fmt.Errorf("%w: unknown verb %q", ErrControl, verb)
	}
	if err != nil {
		return fmt.Errorf("%w: %w", ErrControl, err)
	}
	if username != "" || password != "" {
		req.SetBasicAuth(username, password)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%w: %w", ErrControl, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%w: %s %s: %s: %s", ErrControl, verb, param, resp.Status, strings.TrimSpace(string(body)))
	}
	if verb == "get" {
		_, err = stdout.Write(body)
	}
	return err
}
