package api

import (
	"net/http"
	"sort"

	"github.com/gorilla/mux"

	"github.com/anvil-metal/anvil/controller/conductor"
	"github.com/anvil-metal/anvil/controller/store"
)

const maxTraits = 50

func (s *Server) getTraits(w http.ResponseWriter, r *http.Request) error {
	if err := atLeast(r.Context(), 37); err != nil {
		return err
	}
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	writeJSON(w, http.StatusOK, map[string]any{"traits": n.Traits})
	return nil
}

// setTraits replaces or edits the trait set under the usual update rules
// and answers 204, as every trait write does.
func (s *Server) setTraits(w http.ResponseWriter, r *http.Request, edit func(set map[string]bool) error) error {
	if err := atLeast(r.Context(), 37); err != nil {
		return err
	}
	n, err := s.loadNode(r)
	if err != nil {
		return err
	}
	_, err = store.MutateNode(r.Context(), s.st, n.UUID, func(m *store.Node) error {
		if err := conductor.CheckUnlocked(m); err != nil {
			return err
		}
		set := map[string]bool{}
		for _, t := range m.Traits {
			set[t] = true
		}
		if err := edit(set); err != nil {
			return err
		}
		if len(set) > maxTraits {
			return badRequest("Node %s cannot have more than %d traits", m.UUID, maxTraits)
		}
		m.Traits = m.Traits[:0]
		for t := range set {
			m.Traits = append(m.Traits, t)
		}
		sort.Strings(m.Traits)
		return nil
	})
	if err != nil {
		return err
	}
	w.WriteHeader(http.StatusNoContent)
	return nil
}

func (s *Server) putTraits(w http.ResponseWriter, r *http.Request) error {
	var b struct {
		Traits *[]string `json:"traits"`
	}
	if err := decodeBody(r, &b); err != nil {
		return err
	}
	if b.Traits == nil {
		return badRequest("Missing argument: traits")
	}
	for _, t := range *b.Traits {
		if err := s.traitNames.check("body", t); err != nil {
			return err
		}
	}
	return s.setTraits(w, r, func(set map[string]bool) error {
		clear(set)
		for _, t := range *b.Traits {
			set[t] = true
		}
		return nil
	})
}

func (s *Server) putTrait(w http.ResponseWriter, r *http.Request) error {
	t := mux.Vars(r)["trait"]
	if err := s.traitNames.check("trait", t); err != nil {
		return err
	}
	return s.setTraits(w, r, func(set map[string]bool) error { set[t] = true; return nil })
}

func (s *Server) deleteTrait(w http.ResponseWriter, r *http.Request) error {
	t := mux.Vars(r)["trait"]
	return s.setTraits(w, r, func(set map[string]bool) error {
		if !set[t] {
			return notFound("Trait", t)
		}
		delete(set, t)
		return nil
	})
}

func (s *Server) deleteTraits(w http.ResponseWriter, r *http.Request) error {
	return s.setTraits(w, r, func(set map[string]bool) error { clear(set); return nil })
}
