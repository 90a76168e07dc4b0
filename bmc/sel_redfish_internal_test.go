package bmc

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/stmcginnis/gofish"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// An iDRAC-like manager: a Lifecycle log with many entries and a SEL whose
// entries are listed as links, newest first. Only the SEL is read, each
// entry fetched, and the result is oldest first.
func TestReadSELServicesSkipsOtherLogs(t *testing.T) {
	docs := map[string]any{
		"/redfish/v1/": map[string]any{"@odata.id": "/redfish/v1/"},
		"/redfish/v1/Managers/iDRAC/LogServices": map[string]any{"Members": []any{
			map[string]any{"@odata.id": "/redfish/v1/Managers/iDRAC/LogServices/Lclog"},
			map[string]any{"@odata.id": "/redfish/v1/Managers/iDRAC/LogServices/Sel"},
		}},
		"/redfish/v1/Managers/iDRAC/LogServices/Lclog": map[string]any{"Id": "Lclog", "LogEntryType": "Oem",
			"Entries": map[string]any{"@odata.id": "/redfish/v1/Managers/iDRAC/LogServices/Lclog/Entries"}},
		"/redfish/v1/Managers/iDRAC/LogServices/Sel": map[string]any{"Id": "Sel", "LogEntryType": "SEL",
			"Entries": map[string]any{"@odata.id": "/redfish/v1/Managers/iDRAC/LogServices/Sel/Entries"}},
		"/redfish/v1/Managers/iDRAC/LogServices/Sel/Entries": map[string]any{"Members": []any{
			map[string]any{"@odata.id": "/redfish/v1/Managers/iDRAC/LogServices/Sel/Entries/2"},
			map[string]any{"@odata.id": "/redfish/v1/Managers/iDRAC/LogServices/Sel/Entries/1"},
		}},
		"/redfish/v1/Managers/iDRAC/LogServices/Sel/Entries/2": map[string]any{"Id": "2", "Created": "2026-11-29T03:40:00-05:00",
			"SensorType": "Memory", "Message": "Correctable memory error rate exceeded for DIMM_A1."},
		"/redfish/v1/Managers/iDRAC/LogServices/Sel/Entries/1": map[string]any{"Id": "1", "Created": "2026-11-29T08:00:00Z",
			"Description": "Log Entry 1", "Message": "The process of installing an operating system or hypervisor is successfully completed."},
	}
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		got = append(got, r.URL.Path)
		mu.Unlock()
		d, ok := docs[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(d)
	}))
	defer srv.Close()
	c, err := gofish.ConnectContext(context.Background(), gofish.ClientConfig{Endpoint: srv.URL, HTTPClient: srv.Client()})
	require.NoError(t, err)

	entries, found, err := readSELServices(c, "/redfish/v1/Managers/iDRAC/LogServices")
	require.NoError(t, err)
	assert.True(t, found)
	assert.Equal(t, []SELEntry{
		{ID: "1", Created: "2026-11-29T08:00:00Z", Sensor: "Log Entry 1", Message: "The process of installing an operating system or hypervisor is successfully completed."},
		{ID: "2", Created: "2026-11-29T03:40:00-05:00", Sensor: "Memory", Message: "Correctable memory error rate exceeded for DIMM_A1."},
	}, entries, "oldest first (08:00Z is before 03:40-05:00)")
	assert.NotContains(t, got, "/redfish/v1/Managers/iDRAC/LogServices/Lclog/Entries", "the Lifecycle log's entries are never read")
}

func TestIsSELName(t *testing.T) {
	for name, want := range map[string]bool{"SEL": true, "Sel": true, "IPMI SEL": true, "IML": true, "Lclog": false, "EventLog": false, "Journal": false} {
		assert.Equal(t, want, isSELName(name), name)
	}
}
