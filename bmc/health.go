package bmc

// Node health (Ironic API 1.109): what the BMC says of the hardware's
// condition, read with the power state so that power sync learns it
// without a request of its own.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
)

// Health is a node's health as Ironic names it (common/health_states.py).
// HealthUnknown ("") is Ironic's None: the BMC did not say, or the
// protocol has no health (IPMI, as Ironic's ipmitool management).
type Health string

// Health states.
const (
	HealthOK       Health = "OK"
	HealthWarning  Health = "Warning"
	HealthCritical Health = "Critical"
	HealthUnknown  Health = ""
)

// ParseHealth maps a Redfish Status.Health value to a Health as Ironic's
// redfish management does (HEALTH_MAP): OK, Warning and Critical; anything
// else is unknown.
func ParseHealth(s string) Health {
	switch Health(s) {
	case HealthOK, HealthWarning, HealthCritical:
		return Health(s)
	}
	return HealthUnknown
}

// healthSession is a session that knows the health of the system it last
// read the power state of (Redfish: the ComputerSystem's Status.Health,
// the same document; fake: a knob).
type healthSession interface {
	health() Health
}

// PowerHealth reads the power state and, from the same BMC operation, the
// node's health (HealthUnknown for IPMI). On Redfish the health comes from
// the ComputerSystem document the power state is read from, so it costs
// no extra request.
func (m *Manager) PowerHealth(ctx context.Context, t Target) (PowerState, Health, Outcome, error) {
	var st PowerState
	h := HealthUnknown
	out, err := m.run(ctx, t, "power_state", func(ctx context.Context, op *operation) error {
		var err error
		if st, err = op.readPower(ctx); err != nil {
			return err
		}
		if hs, ok := op.sess.(healthSession); ok {
			h = hs.health()
		}
		return nil
	})
	return st, h, out, err
}

func (s *redfishSession) health() Health { return s.tr.systemHealth() }

// systemHealth is the Status.Health of the last ComputerSystem read.
func (tr *redfishTransport) systemHealth() Health {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	return tr.health
}

// isSystemPath reports whether p is a ComputerSystem
// (/redfish/v1/Systems/<id>), not the collection or a sub-resource.
func isSystemPath(p string) bool {
	id, ok := strings.CutPrefix(p, systemsPath+"/")
	return ok && id != "" && !strings.Contains(id, "/")
}

// maxSystemDoc bounds the ComputerSystem document read for its health.
const maxSystemDoc = 4 << 20

// noteHealth records the Status.Health of a ComputerSystem answer and
// gives the caller the body back untouched (a document larger than
// maxSystemDoc is passed on whole, its health unknown). Called with tr.mu
// held.
func (tr *redfishTransport) noteHealth(resp *http.Response) (*http.Response, error) {
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxSystemDoc))
	if err != nil {
		resp.Body.Close()
		tr.netErr = err
		return nil, err
	}
	if len(body) == maxSystemDoc {
		tr.health = HealthUnknown
		resp.Body = struct {
			io.Reader
			io.Closer
		}{io.MultiReader(bytes.NewReader(body), resp.Body), resp.Body}
		return resp, nil
	}
	resp.Body.Close()
	tr.health = decodeSystemHealth(body)
	return replaceBody(resp, body), nil
}

// decodeSystemHealth reads Status.Health from a ComputerSystem document;
// a document that does not decode, or says nothing usable, is unknown.
func decodeSystemHealth(body []byte) Health {
	var sys struct {
		Status struct {
			Health any
		}
	}
	if json.Unmarshal(body, &sys) != nil {
		return HealthUnknown
	}
	s, _ := sys.Status.Health.(string)
	return ParseHealth(s)
}

func (s fakeSession) health() Health {
	s.f.mu.Lock()
	defer s.f.mu.Unlock()
	return s.f.node(s.id).state.Health
}
