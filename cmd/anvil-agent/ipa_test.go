package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/anvil-metal/anvil/agent"
)

// TestIPAConfigPins: the IPA adapter is given the controller certificate's
// fingerprint (anvil.api_fingerprint= or --api-fingerprint), as anvil mode
// is, so that it pins Ironic's certificate too.
func TestIPAConfigPins(t *testing.T) {
	const pin = "sha256:0102030000000000000000000000000000000000000000000000000000000000"
	for name, tc := range map[string]struct {
		o    options
		want string
	}{
		"pinned":     {options{apiPin: pin, ipaArgs: agent.IPAArgs{APIURL: "https://ironic.example:6385"}}, pin},
		"not pinned": {options{ipaArgs: agent.IPAArgs{APIURL: "https://ironic.example:6385", Insecure: true}}, ""},
	} {
		t.Run(name, func(t *testing.T) {
			cfg, err := ipaConfig(tc.o)
			require.NoError(t, err)
			assert.Equal(t, tc.want, cfg.Fingerprint)
		})
	}
}
