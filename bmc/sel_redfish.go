package bmc

// The SEL over Redfish, read through gofish on the bmclib session (as the
// BIOS and virtual media). Not through bmclib's GetSystemEventLog: it reads
// every log service of every manager, entry by entry, and an iDRAC's
// Lifecycle log alone holds thousands. Here only the SEL-like services are
// read: a service whose Id is SEL (iDRAC, OpenBMC, Supermicro, anvil-vbmc)
// or IML (HPE iLO's equivalent), or whose LogEntryType is SEL; the
// managers of the node's system first, then the system itself. Each
// service's own document is read to tell (a GET each, a handful), never the
// entries of the others.

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stmcginnis/gofish"
)

// maxSELFetches bounds the entries read one by one when a BMC does not
// expand them in the collection.
const maxSELFetches = 200

func (s *redfishSession) sel(ctx context.Context) ([]SELEntry, error) {
	s.tr.reset()
	c, err := s.gofish(ctx)
	if err != nil {
		return nil, s.classify(ctx, err)
	}
	out, err := s.readSEL(c)
	if err != nil {
		return nil, s.classify(ctx, err)
	}
	return out, nil
}

func (s *redfishSession) readSEL(c *gofish.APIClient) ([]SELEntry, error) {
	_, sys, err := s.systemDoc(c)
	if err != nil {
		return nil, err
	}
	var holders []string // documents with a LogServices link
	links, _ := sys["Links"].(map[string]any)
	managers, _ := links["ManagedBy"].([]any)
	for _, m := range managers {
		if uri := odataID(m); uri != "" {
			holders = append(holders, uri)
		}
	}
	var services []string
	for _, h := range holders {
		body, _, err := getDoc(c, h)
		if err != nil {
			return nil, err
		}
		doc, err := decodeObject(body)
		if err != nil {
			return nil, fmt.Errorf("manager %s: %w", h, err)
		}
		if ls := odataID(doc["LogServices"]); ls != "" {
			services = append(services, ls)
		}
	}
	if ls := odataID(sys["LogServices"]); ls != "" {
		services = append(services, ls)
	}
	for _, coll := range services {
		entries, found, err := readSELServices(c, coll)
		if err != nil {
			return nil, err
		}
		if found {
			return entries, nil
		}
	}
	return nil, fmt.Errorf("%w: the BMC offers no SEL log service for this system", ErrUnsupported)
}

// readSELServices reads the SEL-like services of a LogServices collection
// (found false: it has none).
func readSELServices(c *gofish.APIClient, coll string) ([]SELEntry, bool, error) {
	body, _, err := getDoc(c, coll)
	if err != nil {
		return nil, false, err
	}
	doc, err := decodeObject(body)
	if err != nil {
		return nil, false, fmt.Errorf("log services %s: %w", coll, err)
	}
	members, _ := doc["Members"].([]any)
	var out []SELEntry
	found := false
	for _, m := range members {
		uri := odataID(m)
		if uri == "" {
			continue
		}
		body, _, err := getDoc(c, uri)
		if err != nil {
			return nil, false, err
		}
		svc, err := decodeObject(body)
		if err != nil {
			return nil, false, fmt.Errorf("log service %s: %w", uri, err)
		}
		if !isSELName(str(svc["Id"])) && !isSELName(lastElem(uri)) && !strings.EqualFold(str(svc["LogEntryType"]), "SEL") {
			continue
		}
		found = true
		entries, err := readLogEntries(c, odataID(svc["Entries"]))
		if err != nil {
			return nil, false, err
		}
		out = append(out, entries...)
	}
	sortSEL(out)
	return out, found, nil
}

func isSELName(id string) bool {
	switch strings.ToLower(strings.ReplaceAll(id, " ", "")) {
	case "sel", "ipmisel", "iml", "systemeventlog":
		return true
	}
	return false
}

// readLogEntries reads a LogEntry collection: the members expanded in it
// when the BMC does so, else each (at most maxSELFetches, the last listed).
func readLogEntries(c *gofish.APIClient, coll string) ([]SELEntry, error) {
	if coll == "" {
		return nil, nil
	}
	body, _, err := getDoc(c, coll)
	if err != nil {
		return nil, err
	}
	doc, err := decodeObject(body)
	if err != nil {
		return nil, fmt.Errorf("log entries %s: %w", coll, err)
	}
	members, _ := doc["Members"].([]any)
	var out []SELEntry
	fetches := 0
	for i, m := range members {
		obj, _ := m.(map[string]any)
		if obj == nil {
			continue
		}
		if _, inline := obj["Message"]; !inline {
			uri := odataID(obj)
			if uri == "" || len(members)-i > maxSELFetches || fetches >= maxSELFetches {
				continue
			}
			fetches++
			body, _, err := getDoc(c, uri)
			if err != nil {
				return nil, err
			}
			if obj, err = decodeObject(body); err != nil {
				return nil, fmt.Errorf("log entry %s: %w", uri, err)
			}
		}
		out = append(out, SELEntry{ID: str(obj["Id"]), Created: str(obj["Created"]),
			Sensor: cmp.Or(str(obj["SensorType"]), str(obj["Description"]), str(obj["Name"])), Message: str(obj["Message"])})
	}
	return out, nil
}

// sortSEL orders entries oldest first when every time parses (BMCs list
// newest or oldest first), else leaves the BMC's order.
func sortSEL(es []SELEntry) {
	at := make(map[int]time.Time, len(es))
	for i, e := range es {
		t, err := time.Parse(time.RFC3339, e.Created)
		if err != nil {
			return
		}
		at[i] = t
	}
	idx := make([]int, len(es))
	for i := range idx {
		idx[i] = i
	}
	slices.SortStableFunc(idx, func(a, b int) int { return at[a].Compare(at[b]) })
	sorted := make([]SELEntry, len(es))
	for i, j := range idx {
		sorted[i] = es[j]
	}
	copy(es, sorted)
}
