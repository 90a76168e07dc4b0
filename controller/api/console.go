// The node's serial console: Ironic's GET/PUT /v1/nodes/{node}/states/console
// and anvil's extensions beside it, the console's WebSocket
// (/v1/nodes/{node}/console/ws) and its kept scrollback as text
// (/v1/nodes/{node}/console/log).

package api

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"
	"github.com/gorilla/mux"

	"github.com/anvil-metal/anvil/bmc"
	"github.com/anvil-metal/anvil/controller/console"
	"github.com/anvil-metal/anvil/controller/store"
)

// ConsoleInterface is the console_interface that has a console: Ironic's
// ipmitool-socat, an IPMI Serial-over-LAN session (for ipmi nodes, and
// redfish nodes that also have ipmi_* driver_info).
const ConsoleInterface = "ipmitool-socat"

// Consoles holds the nodes' console sessions (controller/console).
type Consoles interface {
	Enable(n *store.Node) error
	Disable(nodeUUID string)
	Enabled(nodeUUID string) bool
	Token(nodeUUID string) string
	ScrollbackOf(n *store.Node) ([]byte, bool)
	Attach(nodeUUID string, wantInput bool) (*console.Viewer, error)
}

// ConsoleOwner names the controller that holds a node's console session
// in a group of controllers sharing a store (mine: this one). nil: this
// controller holds every console.
type ConsoleOwner func(ctx context.Context, nodeUUID string) (host string, mine bool, err error)

func (s *Server) consoleRoutes(r *mux.Router, authed func(handler) http.Handler) {
	n := "/nodes/{node}"
	r.Handle(n+"/states/console", authed(s.getConsole)).Methods(http.MethodGet)
	r.Handle(n+"/states/console", authed(s.putConsole)).Methods(http.MethodPut)
	r.Handle(n+"/console/log", authed(s.consoleLog)).Methods(http.MethodGet)
	r.Handle(n+"/console/ws", authed(s.consoleWS)).Methods(http.MethodGet)
}

// checkConsole is Ironic's console validate: the node's console interface
// must have a console and its driver_info what that needs.
func (s *Server) checkConsole(n *store.Node) error {
	if n.Interfaces.Console != ConsoleInterface || s.consoles == nil {
		return badRequest("Driver %s does not support console (disabled or not implemented).", n.Driver)
	}
	if a, _ := n.DriverInfo["ipmi_address"].(string); strings.TrimSpace(a) == "" {
		// ipmitool's _parse_driver_info
		return badRequest("Missing the following IPMI credentials in node's driver_info: ['ipmi_address'].")
	}
	if _, err := bmc.ParseDriverInfo(bmc.HardwareIPMI, n.DriverInfo); err != nil {
		return badRequest("%s", strings.TrimPrefix(err.Error(), bmc.ErrInvalidDriverInfo.Error()+" for hardware type ipmi: "))
	}
	return nil
}

func (s *Server) consoleOwner(ctx context.Context, nodeUUID string) (string, bool, error) {
	if s.consoleOwnerOf == nil {
		return "", true, nil
	}
	return s.consoleOwnerOf(ctx, nodeUUID)
}

// GET /v1/nodes/{node}/states/console: {console_enabled, console_info}.
// console_info is {type: "websocket", url} (the WebSocket of the
// controller holding the session), plus tcp_url and tcp_token when the
// TCP console port is configured.
func (s *Server) getConsole(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	if !n.ConsoleEnabled {
		writeJSON(w, http.StatusOK, map[string]any{"console_enabled": false, "console_info": nil})
		return nil
	}
	if err := s.checkConsole(n); err != nil {
		return err
	}
	info := map[string]any{"type": "websocket", "url": wsURL(s.baseURL(r)) + "/v1/nodes/" + n.UUID + "/console/ws"}
	host, mine, err := s.consoleOwner(r.Context(), n.UUID)
	if err != nil {
		return err
	}
	if !mine {
		info["controller"] = host
	} else if s.consoleTCP != "" {
		if tok := s.consoles.Token(n.UUID); tok != "" {
			info["tcp_url"], info["tcp_token"] = "tcp://"+s.consoleTCP, tok
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{"console_enabled": true, "console_info": info})
	return nil
}

func wsURL(base string) string {
	if rest, ok := strings.CutPrefix(base, "https://"); ok {
		return "wss://" + rest
	}
	return "ws://" + strings.TrimPrefix(base, "http://")
}

// PUT /v1/nodes/{node}/states/console {"enabled": true|false}: 202. The
// session is opened (or closed) in the background by the controller that
// holds the node's console; console_enabled says what was asked.
func (s *Server) putConsole(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	body, err := readBody(r)
	if err != nil {
		return err
	}
	var b map[string]json.RawMessage
	if err := json.Unmarshal(body, &b); err != nil {
		return badRequest("Invalid JSON body: %v", err)
	}
	raw, ok := b["enabled"]
	if !ok {
		return badRequest("Missing argument: \"enabled\"")
	}
	enabled, ok := parseBoolArg(raw)
	if !ok {
		// Ironic's args.boolean (strutils.bool_from_string, strict)
		return badRequest("Invalid enabled: Unrecognized value '%s', acceptable values are: '0', '1', 'f', 'false', 'n', 'no', 'off', 'on', 't', 'true', 'y', 'yes'",
			strings.Trim(string(raw), `"`))
	}
	if err := s.checkConsole(n); err != nil {
		return err
	}
	if n.ConsoleEnabled != enabled {
		n, err = store.MutateNode(r.Context(), s.st, n.UUID, func(m *store.Node) error {
			m.ConsoleEnabled = enabled
			m.LastError = nil
			return nil
		})
		if err != nil {
			return err
		}
	}
	if _, mine, err := s.consoleOwner(r.Context(), n.UUID); err == nil && mine {
		if enabled {
			if err := s.consoles.Enable(n); err != nil {
				return err
			}
		} else {
			s.consoles.Disable(n.UUID)
		}
	}
	w.Header().Set("Location", s.baseURL(r)+"/v1/nodes/"+mux.Vars(r)["node"]+"/states/console")
	w.WriteHeader(http.StatusAccepted)
	return nil
}

// parseBoolArg is Ironic's args.boolean (strutils.bool_from_string,
// strict): a JSON boolean or one of its words.
func parseBoolArg(raw json.RawMessage) (value, ok bool) {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return false, false
	}
	switch t := v.(type) {
	case bool:
		return t, true
	case string:
		switch strings.ToLower(strings.TrimSpace(t)) {
		case "1", "t", "true", "on", "y", "yes":
			return true, true
		case "0", "f", "false", "off", "n", "no":
			return false, true
		}
	}
	return false, false
}

// heldHere loads the node and checks that this controller holds its
// console, or says which one does (409).
func (s *Server) heldHere(r *http.Request) (*store.Node, error) {
	n, err := s.loadNode(r)
	if err != nil {
		return nil, err
	}
	if s.consoles == nil || n.Interfaces.Console != ConsoleInterface {
		return nil, badRequest("Driver %s does not support console (disabled or not implemented).", n.Driver)
	}
	host, mine, err := s.consoleOwner(r.Context(), n.UUID)
	if err != nil {
		return nil, err
	}
	if !mine {
		return nil, errf(http.StatusConflict, "The console of node %s is held by controller %s; connect to that controller.", n.UUID, host)
	}
	return n, nil
}

// GET /v1/nodes/{node}/console/log: the scrollback this controller kept
// (text/plain), also after the console was disabled.
func (s *Server) consoleLog(w http.ResponseWriter, r *http.Request) error {
	if _, err := parseQuery(r); err != nil {
		return err
	}
	n, err := s.heldHere(r)
	if err != nil {
		return err
	}
	b, ok := s.consoles.ScrollbackOf(n)
	if !ok {
		return errf(http.StatusNotFound, "Node %s has no console log: its console has not been enabled since this controller started or since the node changed owner, lessee or instance.", n.UUID)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(b)
	return nil
}

// GET /v1/nodes/{node}/console/ws (?input=false for a read-only viewer):
// a WebSocket carrying the console. Binary messages from the server are
// console output (scrollback first); text messages are anvil's status
// lines as JSON ({"input": true|false} on connecting). Binary or text
// messages from the client are typed into the console if this viewer
// holds the input. The socket closes when the console is disabled.
// Cross-site pages cannot open it: the Origin must be this host
// (websocket.Accept's check), as the browser's credentials ride along.
func (s *Server) consoleWS(w http.ResponseWriter, r *http.Request) error {
	q, err := parseQuery(r, "input")
	if err != nil {
		return err
	}
	n, err := s.heldHere(r)
	if err != nil {
		return err
	}
	wantInput := true
	in, err := q.boolean("input")
	if err != nil {
		return err
	}
	if in != nil {
		wantInput = *in
	}
	v, err := s.consoles.Attach(n.UUID, wantInput)
	if errors.Is(err, console.ErrNotEnabled) {
		return badRequest("The console of node %s is not enabled.", n.UUID)
	}
	if err != nil {
		return err
	}
	defer v.Close()
	// The API server's read and write timeouts are for requests; a console
	// stays open for hours.
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Time{})
	_ = rc.SetWriteDeadline(time.Time{})
	c, err := websocket.Accept(w, r, nil)
	if err != nil {
		return nil // Accept has answered
	}
	defer c.CloseNow()
	c.SetReadLimit(64 << 10)
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	status, _ := json.Marshal(map[string]any{"node": n.UUID, "input": v.CanWrite()})
	if err := c.Write(ctx, websocket.MessageText, status); err != nil {
		return nil
	}
	go func() {
		defer cancel()
		for {
			_, p, err := c.Read(ctx)
			if err != nil {
				return
			}
			if v.CanWrite() {
				if _, err := v.Write(p); err != nil {
					return
				}
			}
		}
	}()
	for {
		select {
		case <-ctx.Done():
			return nil
		case p, ok := <-v.Output():
			if !ok {
				_ = c.Close(websocket.StatusNormalClosure, "console disabled")
				return nil
			}
			wctx, wcancel := context.WithTimeout(ctx, 10*time.Second)
			err := c.Write(wctx, websocket.MessageBinary, p)
			wcancel()
			if err != nil {
				return nil
			}
		}
	}
}
