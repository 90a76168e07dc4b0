package vbmc

// Redfish sessions: the SessionService, logins (bounded by the table's
// size and by the SessionLimit fault) and logouts, and the counters tests
// read to check that a client does not run the BMC out of sessions.

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
)

// PeakSessions is the most Redfish sessions that were open at once, and
// Logins the sessions created so far, for tests of clients that must
// not run the BMC out of sessions.
func (s *Server) PeakSessions() (peak, logins int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.peak, s.nextID
}

// OpenSessions is the number of Redfish sessions open now.
func (s *Server) OpenSessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.order)
}

func (s *Server) sessionService(w http.ResponseWriter, _ *http.Request) {
	ss := odata("/redfish/v1/SessionService", "#SessionService.v1_1_8.SessionService")
	ss["Id"] = "SessionService"
	ss["Name"] = "Session Service"
	ss["ServiceEnabled"] = true
	ss["SessionTimeout"] = 1800
	ss["Sessions"] = link("/redfish/v1/SessionService/Sessions")
	writeJSON(w, http.StatusOK, ss)
}

func (s *Server) listSessions(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	var members []string
	for _, tok := range s.order {
		members = append(members, "/redfish/v1/SessionService/Sessions/"+s.sessions[tok])
	}
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, collection("/redfish/v1/SessionService/Sessions", "#SessionCollection.SessionCollection", "Session Collection", members))
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	var body struct{ UserName, Password string }
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		redfishError(w, http.StatusBadRequest, "MalformedJSON", "The request body submitted was malformed JSON.")
		return
	}
	if (s.username != "" || s.password != "" || s.getFaults().RejectAuth) && !s.credentialsOK(body.UserName, body.Password) {
		// Never log the password, not even a wrong one.
		s.log.Info("vbmc: login rejected", "user", body.UserName)
		redfishError(w, http.StatusUnauthorized, "InvalidCredentials", "Invalid username or password.")
		return
	}
	buf := make([]byte, 16)
	_, _ = rand.Read(buf)
	tok := hex.EncodeToString(buf)
	s.mu.Lock()
	if lim := s.faults.SessionLimit; lim > 0 && len(s.order) >= lim {
		s.mu.Unlock()
		s.log.Info("vbmc: fault: session limit reached", "limit", lim)
		redfishError(w, http.StatusServiceUnavailable, "SessionLimitExceeded", "RAC0218: The maximum number of user sessions is reached.")
		return
	}
	s.nextID++
	id := fmt.Sprintf("%d", s.nextID)
	s.sessions[tok] = id
	s.order = append(s.order, tok)
	if len(s.order) > maxSessions {
		delete(s.sessions, s.order[0])
		s.order = s.order[1:]
	}
	s.peak = max(s.peak, len(s.order))
	s.mu.Unlock()
	loc := "/redfish/v1/SessionService/Sessions/" + id
	w.Header().Set("X-Auth-Token", tok)
	w.Header().Set("Location", loc)
	sess := odata(loc, "#Session.v1_3_0.Session")
	sess["Id"] = id
	sess["Name"] = "User Session"
	sess["UserName"] = body.UserName
	writeJSON(w, http.StatusCreated, sess)
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	found := slices.ContainsFunc(s.order, func(tok string) bool { return s.sessions[tok] == id })
	s.mu.Unlock()
	if !found {
		redfishError(w, http.StatusNotFound, "ResourceMissingAtURI", "No such session.")
		return
	}
	loc := "/redfish/v1/SessionService/Sessions/" + id
	sess := odata(loc, "#Session.v1_3_0.Session")
	sess["Id"] = id
	sess["Name"] = "User Session"
	writeJSON(w, http.StatusOK, sess)
}

func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, tok := range s.order {
		if s.sessions[tok] == id {
			delete(s.sessions, tok)
			s.order = slices.Delete(s.order, i, i+1)
			w.WriteHeader(http.StatusNoContent)
			return
		}
	}
	redfishError(w, http.StatusNotFound, "ResourceMissingAtURI", "No such session.")
}
