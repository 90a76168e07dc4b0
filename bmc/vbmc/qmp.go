package vbmc

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"time"
)

// QMP runs one QEMU Machine Protocol command over the unix socket at path
// and returns its "return" value. One connection per command keeps this
// simple and robust to QEMU restarts; QMP greets, negotiates capabilities
// and answers in well under a millisecond on loopback.
func QMP(ctx context.Context, path, command string, args any) (json.RawMessage, error) {
	var d net.Dialer
	conn, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return nil, fmt.Errorf("qmp %s: %w", command, err)
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Now().Add(5 * time.Second))
	}
	r := bufio.NewReader(conn)
	enc := json.NewEncoder(conn)

	// Greeting, then capabilities negotiation.
	if _, err := readQMP(r); err != nil {
		return nil, fmt.Errorf("qmp greeting: %w", err)
	}
	if err := enc.Encode(map[string]any{"execute": "qmp_capabilities"}); err != nil {
		return nil, fmt.Errorf("qmp capabilities: %w", err)
	}
	if _, err := readQMP(r); err != nil {
		return nil, fmt.Errorf("qmp capabilities: %w", err)
	}
	msg := map[string]any{"execute": command}
	if args != nil {
		msg["arguments"] = args
	}
	if err := enc.Encode(msg); err != nil {
		return nil, fmt.Errorf("qmp %s: %w", command, err)
	}
	ret, err := readQMP(r)
	if err != nil {
		return nil, fmt.Errorf("qmp %s: %w", command, err)
	}
	return ret, nil
}

// readQMP reads the next reply, skipping asynchronous events.
func readQMP(r *bufio.Reader) (json.RawMessage, error) {
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return nil, err
		}
		var m struct {
			QMP    json.RawMessage `json:"QMP"`
			Return json.RawMessage `json:"return"`
			Event  string          `json:"event"`
			Error  *struct {
				Class string `json:"class"`
				Desc  string `json:"desc"`
			} `json:"error"`
		}
		if err := json.Unmarshal(line, &m); err != nil {
			return nil, fmt.Errorf("bad QMP message %q: %w", line, err)
		}
		switch {
		case m.Event != "":
			continue
		case m.Error != nil:
			return nil, fmt.Errorf("%s: %s", m.Error.Class, m.Error.Desc)
		case m.QMP != nil:
			return m.QMP, nil
		default:
			return m.Return, nil
		}
	}
}

// QMPStatus returns the VM run state from query-status ("running",
// "paused", "shutdown", ...).
func QMPStatus(ctx context.Context, path string) (string, error) {
	ret, err := QMP(ctx, path, "query-status", nil)
	if err != nil {
		return "", err
	}
	var st struct {
		Status string `json:"status"`
	}
	if err := json.Unmarshal(ret, &st); err != nil {
		return "", fmt.Errorf("query-status: %w", err)
	}
	return st.Status, nil
}
