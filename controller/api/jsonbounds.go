package api

import (
	"bytes"
	"strconv"

	"github.com/anvil-metal/anvil/protocol"
)

// maxFieldJSON bounds each stored dict field of a resource (a node's
// extra, properties, driver_info, network_data, target_raid_config; the
// extra and similar dicts of the other resources), as Ironic's TEXT
// columns do (MySQL's TEXT holds 65,535 bytes). A node's instance_info
// may carry a configdrive: it is bounded by maxBody instead, the most one
// request can send, so PATCHes cannot grow it past what a create could.
const maxFieldJSON = 64 << 10

// checkBody refuses a request body the store could not keep or clients
// could not read back (protocol.CheckStoredJSON): readBody runs it on every
// body before it is decoded. A syntax error is left to the decoder that
// follows, whose messages clients know.
func checkBody(body []byte) error {
	if err := protocol.CheckStoredJSON(body); err != nil {
		return badRequest("Malformed JSON body: %v", err)
	}
	return nil
}

// boundField refuses a dict field (v, decoded from JSON) of what (Ironic's
// schema name: "node", "port", "patch") nested deeper than
// protocol.MaxJSONDepth or longer than max bytes as the API shows it. A
// PATCH can nest a value under a path and add keys one by one, so it is
// the result that is checked, not only the body. Every resource's write
// path calls it on each dict field it stores, on create and on PATCH. What
// the strings hold needs no check here: they come from bodies readBody
// checked.
func boundField(what, field string, v any, max int) error {
	if deeper(v, protocol.MaxJSONDepth) {
		return badRequest("Schema error for %s: %s is nested deeper than %d levels", what, field, protocol.MaxJSONDepth)
	}
	var scratch bytes.Buffer
	size, err := jsonLen(v, &scratch)
	if err != nil {
		return badRequest("Schema error for %s: %s cannot be encoded as JSON: %v", what, field, err)
	}
	if size > max {
		return badRequest("Schema error for %s: %s is %s bytes as JSON; at most %s are allowed", what, field, thousands(size), thousands(max))
	}
	return nil
}

// jsonLen is the length of v as appendValue writes it, counted without
// writing it whole: a megabyte configdrive is neither copied nor escaped,
// keys are not sorted. What needs appendValue's rules (a string with
// bytes to escape, a number) is written to scratch and counted there.
func jsonLen(v any, scratch *bytes.Buffer) (int, error) {
	switch x := v.(type) {
	case string:
		return stringLen(x, scratch), nil
	case map[string]any:
		n := 2 + max(len(x)-1, 0) // braces and commas
		for k, e := range x {
			m, err := jsonLen(e, scratch)
			if err != nil {
				return 0, err
			}
			n += stringLen(k, scratch) + 1 + m // key, colon, value
		}
		return n, nil
	case []any:
		n := 2 + max(len(x)-1, 0)
		for _, e := range x {
			m, err := jsonLen(e, scratch)
			if err != nil {
				return 0, err
			}
			n += m
		}
		return n, nil
	}
	scratch.Reset()
	err := appendValue(scratch, v)
	return scratch.Len(), err
}

// stringLen is the length of s as appendString writes it.
func stringLen(s string, scratch *bytes.Buffer) int {
	if protocol.PlainLen(s) == len(s) {
		return len(s) + 2
	}
	scratch.Reset()
	appendString(scratch, s)
	return scratch.Len()
}

// deeper reports whether v nests objects and arrays more than n levels,
// looking no deeper than that.
func deeper(v any, n int) bool {
	switch x := v.(type) {
	case map[string]any:
		if n == 0 {
			return true
		}
		for _, e := range x {
			if deeper(e, n-1) {
				return true
			}
		}
	case []any:
		if n == 0 {
			return true
		}
		for _, e := range x {
			if deeper(e, n-1) {
				return true
			}
		}
	}
	return false
}

// thousands writes a size with comma separators (70,123), so that a size
// near a limit reads at a glance.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
