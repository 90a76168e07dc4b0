package vbmc

// The System Event Log, as a Redfish LogService "SEL" under each node's
// manager (where iDRAC and bmclib's GetSystemEventLog look), and the NMIs
// the node was sent (ComputerSystem.Reset with ResetType Nmi), each also
// logged in the SEL like a real BMC's "diagnostic interrupt" entry.

import (
	"fmt"
	"net/http"
	"time"
)

// SELEntry is one entry of a node's SEL.
type SELEntry struct {
	ID      int
	Created time.Time
	Sensor  string
	Message string
}

// maxSEL bounds a node's SEL; the oldest entries go first.
const maxSEL = 512

// seedSEL is what every node's SEL holds when the vbmc starts: the
// entries a freshly racked server has.
func seedSEL(start time.Time) []SELEntry {
	return []SELEntry{
		{ID: 1, Created: start, Sensor: "Event Log", Message: "Log area reset/cleared"},
		{ID: 2, Created: start, Sensor: "System Boot", Message: "Initiated by power up"},
		{ID: 3, Created: start, Sensor: "Power Supply PS1", Message: "Presence detected"},
	}
}

// SEL returns node's SEL, oldest first.
func (s *Server) SEL(node string) []SELEntry {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]SELEntry(nil), s.selOf(node)...)
}

// AddSEL appends an entry to node's SEL (tests: a hardware fault).
func (s *Server) AddSEL(node, sensor, message string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.addSEL(node, sensor, message)
}

// NMIs is the number of NMIs node was sent.
func (s *Server) NMIs(node string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nmis[node]
}

// selOf is node's SEL, seeded on first use. Called with s.mu held.
func (s *Server) selOf(node string) []SELEntry {
	if _, ok := s.sel[node]; !ok {
		s.sel[node] = seedSEL(time.Now().UTC())
	}
	return s.sel[node]
}

// addSEL is AddSEL with s.mu held.
func (s *Server) addSEL(node, sensor, message string) {
	log := s.selOf(node)
	id := 1
	if len(log) > 0 {
		id = log[len(log)-1].ID + 1
	}
	log = append(log, SELEntry{ID: id, Created: time.Now().UTC(), Sensor: sensor, Message: message})
	if len(log) > maxSEL {
		log = log[len(log)-maxSEL:]
	}
	s.sel[node] = log
}

// noteNMI records an NMI sent to n.
func (s *Server) noteNMI(n *Node) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nmis[n.Name]++
	s.addSEL(n.Name, "NMI", "Diagnostic interrupt (NMI) asserted")
	s.log.Info("vbmc: NMI", "node", n.Name)
}

func (s *Server) listLogServices(w http.ResponseWriter, _ *http.Request, n *Node) {
	id := "/redfish/v1/Managers/" + n.Name + "/LogServices"
	writeJSON(w, http.StatusOK, collection(id, "#LogServiceCollection.LogServiceCollection", "Log Service Collection", []string{id + "/SEL"}))
}

func (s *Server) getSELService(w http.ResponseWriter, _ *http.Request, n *Node) {
	id := "/redfish/v1/Managers/" + n.Name + "/LogServices/SEL"
	ls := odata(id, "#LogService.v1_1_0.LogService")
	ls["Id"], ls["Name"], ls["LogEntryType"] = "SEL", "System Event Log", "SEL"
	ls["MaxNumberOfRecords"], ls["OverWritePolicy"] = maxSEL, "WrapsWhenFull"
	ls["Entries"] = link(id + "/Entries")
	writeJSON(w, http.StatusOK, ls)
}

// listSELEntries serves the entries expanded in the collection, as
// iDRAC does; each is also served on its own (gofish reads them one by
// one).
func (s *Server) listSELEntries(w http.ResponseWriter, _ *http.Request, n *Node) {
	id := "/redfish/v1/Managers/" + n.Name + "/LogServices/SEL/Entries"
	members := []any{}
	for _, e := range s.SEL(n.Name) {
		members = append(members, logEntry(id, e))
	}
	c := odata(id, "#LogEntryCollection.LogEntryCollection")
	c["Name"] = "Log Service Collection"
	c["Members"], c["Members@odata.count"] = members, len(members)
	writeJSON(w, http.StatusOK, c)
}

func (s *Server) getSELEntry(w http.ResponseWriter, r *http.Request, n *Node) {
	id := "/redfish/v1/Managers/" + n.Name + "/LogServices/SEL/Entries"
	for _, e := range s.SEL(n.Name) {
		if fmt.Sprint(e.ID) == r.PathValue("entry") {
			writeJSON(w, http.StatusOK, logEntry(id, e))
			return
		}
	}
	redfishError(w, http.StatusNotFound, "ResourceMissingAtURI", fmt.Sprintf("The resource at the URI %s was not found.", r.URL.Path))
}

func logEntry(coll string, e SELEntry) map[string]any {
	le := odata(fmt.Sprintf("%s/%d", coll, e.ID), "#LogEntry.v1_4_0.LogEntry")
	le["Id"], le["Name"], le["EntryType"] = fmt.Sprint(e.ID), "Log Entry "+fmt.Sprint(e.ID), "SEL"
	le["Created"], le["Description"], le["Message"] = e.Created.Format(time.RFC3339), e.Sensor, e.Message
	le["Severity"] = "OK"
	return le
}
