package api

import (
	"errors"
	"net/http"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

const maxLimit = 1000

// query is a request's query string checked against the parameters a
// handler accepts; Ironic refuses unknown ones with 400.
type query struct {
	v url.Values
}

func parseQuery(r *http.Request, allowed ...string) (query, error) {
	v := r.URL.Query()
	var unknown []string
	for k := range v {
		ok := false
		for _, a := range allowed {
			if k == a {
				ok = true
				break
			}
		}
		if !ok {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return query{}, badRequest("Unknown argument(s): %s", strings.Join(unknown, ", "))
	}
	return query{v: v}, nil
}

func (q query) has(k string) bool { return q.v.Has(k) }

func (q query) str(k string) *string {
	if !q.v.Has(k) {
		return nil
	}
	s := q.v.Get(k)
	return &s
}

// parseBool accepts Ironic's spellings (oslo strutils).
func parseBool(s string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "1", "t", "true", "on", "y", "yes":
		return true, nil
	case "0", "f", "false", "off", "n", "no":
		return false, nil
	}
	return false, errors.New("not a boolean")
}

func (q query) boolean(k string) (*bool, error) {
	if !q.v.Has(k) {
		return nil, nil
	}
	b, err := parseBool(q.v.Get(k))
	if err != nil {
		return nil, badRequest("Invalid value for %s: %q is not a boolean", k, q.v.Get(k))
	}
	return &b, nil
}

// limit reads the limit parameter, capped at most (most when absent): the
// collections and the results lists check it alike.
func (q query) limit(most int) (int, error) {
	if !q.v.Has("limit") {
		return most, nil
	}
	n, err := strconv.Atoi(q.v.Get("limit"))
	if err != nil {
		return most, badRequest("Invalid limit %q: not an integer", q.v.Get("limit"))
	}
	if n <= 0 {
		return most, badRequest("Limit must be positive")
	}
	return min(n, most), nil
}

// page reads limit, marker, sort_key and sort_dir.
type pageArgs struct {
	limit   int
	marker  string
	sortKey string
	desc    bool
}

func (q query) page(sortKeys []string) (pageArgs, error) {
	p := pageArgs{sortKey: "id"}
	var err error
	if p.limit, err = q.limit(maxLimit); err != nil {
		return p, err
	}
	p.marker = q.v.Get("marker")
	if k := q.v.Get("sort_key"); k != "" {
		ok := false
		for _, s := range sortKeys {
			if s == k {
				ok = true
			}
		}
		if !ok {
			return p, badRequest("The sort_key value %q is an invalid field for sorting", k)
		}
		p.sortKey = k
	}
	switch d := q.v.Get("sort_dir"); d {
	case "", "asc":
	case "desc":
		p.desc = true
	default:
		return p, badRequest("Invalid sort direction: %s. Acceptable values are 'asc' or 'desc'", d)
	}
	return p, nil
}

// nextURL builds the "next" link of a full page: the same query with marker.
func nextURL(base, path string, q url.Values, marker string, p pageArgs) string {
	out := url.Values{}
	for k, v := range q {
		out[k] = v
	}
	out.Set("marker", marker)
	out.Set("limit", strconv.Itoa(p.limit))
	out.Set("sort_key", p.sortKey)
	if p.desc {
		out.Set("sort_dir", "desc")
	} else {
		out.Set("sort_dir", "asc")
	}
	return base + path + "?" + out.Encode()
}

// fieldsArg reads ?fields=a,b (1.8+).
// stringList is Ironic's args.string_list: the comma-separated values of
// k, trimmed, lower-cased, without empty ones or repeats; nil when k is
// absent, empty (not nil) when it lists nothing.
func (q query) stringList(k string) []string {
	if !q.v.Has(k) {
		return nil
	}
	out := []string{}
	for _, x := range strings.Split(q.v.Get(k), ",") {
		if x = strings.ToLower(strings.TrimSpace(x)); x != "" && !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

func fieldsArg(q query) []string {
	f := q.v.Get("fields")
	if f == "" {
		return nil
	}
	var out []string
	for _, x := range strings.Split(f, ",") {
		if x = strings.TrimSpace(x); x != "" {
			out = append(out, x)
		}
	}
	return out
}

// webobQuery parses a query string as Ironic's WebOb 1.8 does
// (webob.compat.parse_qsl_text): '+' is a space, pairs are separated by '&'
// and by ';', empty pairs are skipped, a pair without '=' has the empty
// value, and a '%' that starts no valid escape stays as it is. Go's own
// parser drops such pairs, and every pair after a ';', without a word, so
// "?limit=-5;" would silently lose its limit. Names and values must be
// UTF-8 (WebOb fails to decode them otherwise).
func webobQuery(raw string) (url.Values, error) {
	v := url.Values{}
	for _, amp := range strings.Split(strings.ReplaceAll(raw, "+", " "), "&") {
		for _, pair := range strings.Split(amp, ";") {
			if pair == "" {
				continue
			}
			k, val, _ := strings.Cut(pair, "=")
			k, val = unquoteLenient(k), unquoteLenient(val)
			if !utf8.ValidString(k) || !utf8.ValidString(val) {
				return nil, badRequest("Invalid query string: parameter %q is not UTF-8", strings.ToValidUTF8(k, "\uFFFD"))
			}
			v[k] = append(v[k], val)
		}
	}
	return v, nil
}

// unquoteLenient decodes %XX escapes like Python's unquote_to_bytes: an
// invalid escape is kept literally.
func unquoteLenient(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) && isHex(s[i+1]) && isHex(s[i+2]) {
			b.WriteByte(unhex(s[i+1])<<4 | unhex(s[i+2]))
			i += 2
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

func isHex(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func unhex(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

// collectionArgs reads the query of Ironic's newer collections (conductors,
// deploy templates): fields or detail=true (not both), with defaults shown
// when neither is given, and a page sorted by one of sortKeys; noSort are
// fields Ironic refuses to sort by. view is nil for every field.
func collectionArgs(r *http.Request, fieldMin map[string]int, defaults, sortKeys, noSort []string) (view []string, p pageArgs, err error) {
	view, p, _, err = collectionQuery(r, fieldMin, defaults, sortKeys, noSort)
	return view, p, err
}

// collectionQuery is collectionArgs for a collection that takes more
// parameters (extra), which the query it returns holds.
func collectionQuery(r *http.Request, fieldMin map[string]int, defaults, sortKeys, noSort []string, extra ...string) (view []string, p pageArgs, q query, err error) {
	q, err = parseQuery(r, append([]string{"fields", "detail", "limit", "marker", "sort_key", "sort_dir"}, extra...)...)
	if err != nil {
		return nil, p, q, err
	}
	view, p, err = collectionView(r, q, fieldMin, defaults, sortKeys, noSort)
	return view, p, q, err
}

func collectionView(r *http.Request, q query, fieldMin map[string]int, defaults, sortKeys, noSort []string) (view []string, p pageArgs, err error) {
	detail, err := q.boolean("detail")
	if err != nil {
		return nil, p, err
	}
	fields := fieldsArg(q)
	if err := checkFields(r.Context(), fields, fieldMin); err != nil {
		return nil, p, err
	}
	all := detail != nil && *detail
	if all && fields != nil {
		return nil, p, badRequest("Can not specify ?detail=True and fields in the same request.")
	}
	if k := q.v.Get("sort_key"); slices.Contains(noSort, k) {
		return nil, p, badRequest("The sort_key value %s is an invalid field for sorting", k)
	}
	if p, err = q.page(sortKeys); err != nil {
		return nil, p, err
	}
	switch {
	case all:
		return nil, p, nil
	case fields == nil:
		return defaults, p, nil
	}
	return fields, p, nil
}
