// Package redact takes secrets out of URLs before they are logged, shown
// or stored: the controller (virtual media images, BMC answers) and the
// agent (deploy images) both need it, and neither may import the other.
package redact

import (
	"errors"
	"net/url"
)

// unparseable stands for a URL that does not parse: it might hold a
// secret anywhere.
const unparseable = "(unparseable URL)"

// URL returns raw without its user information, query and fragment:
// signed (temporary) URLs such as Swift temp URLs and S3 presigned URLs
// carry their secrets there, and a user:password@ is a credential.
// Redacting twice changes nothing.
func URL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || raw == unparseable {
		return unparseable
	}
	u.User, u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = nil, "", false, "", ""
	return u.String()
}

// Errors redacts, in place, the URL of every *url.Error in err's chain
// (net/http's client errors quote the whole URL).
func Errors(err error) {
	for err != nil {
		if ue, ok := err.(*url.Error); ok {
			ue.URL = URL(ue.URL)
		}
		if j, ok := err.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				Errors(e)
			}
			return
		}
		err = errors.Unwrap(err)
	}
}
