package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
)

func TestDeviceLines(t *testing.T) {
	for name, tc := range map[string]struct {
		result string
		want   []string
	}{
		"erase": {`{"devices":[{"plan":{"device":"/dev/sda","reason":"whole disk"},"status":"erased","method":"overwrite","bytes":1048576,"seconds":2.25},
			{"plan":{"device":"/dev/sr0","reason":"optical drive"},"status":"skipped"},
			{"plan":{"device":"/dev/sdb"},"status":"failed","error":"write error","bytes":4096}]}`,
			[]string{"/dev/sda erased by overwrite, 1048576 bytes, 2.2 s", "/dev/sr0 skipped: optical drive", "/dev/sdb failed, 4096 bytes: write error"}},
		"metadata":   {`{"devices":[{"device":"/dev/vda","status":"skipped","reason":"read-only"}]}`, []string{"/dev/vda skipped: read-only"}},
		"no devices": {`{"image":"x"}`, nil},
		"not json":   {`"text"`, nil},
		"empty":      {``, nil},
	} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, tc.want, deviceLines(json.RawMessage(tc.result)))
		})
	}
}
