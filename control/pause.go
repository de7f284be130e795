package control

import (
	"net/http"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/queue"
)

// The pause and approval endpoints call the store's service functions
// (queue/pause.go), which hold the whole rule: these only read the request and name the
// actor.

// actor is who the request's principal is for the store: its name and its scopes.
func actor(r *http.Request) queue.Actor {
	p := principalFrom(r.Context())
	return queue.Actor{By: p.by(), Scopes: p.scopes()}
}

func fleetWire(f queue.Fleet) client.Fleet {
	return client.Fleet{Paused: f.Paused, PausedBy: f.PausedBy, PausedAt: f.PausedAt, Changed: f.Changed}
}

func (s *Server) getFleet(w http.ResponseWriter, r *http.Request) {
	f, err := s.store.GetFleet(r.Context())
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, fleetWire(f))
}

func (s *Server) pauseFleet(w http.ResponseWriter, r *http.Request) {
	f, err := s.store.PauseFleet(r.Context(), actor(r))
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if f.Changed {
		s.log.InfoContext(r.Context(), "fleet paused", "by", f.PausedBy)
	}
	writeJSON(w, http.StatusOK, fleetWire(f))
}

func (s *Server) resumeFleet(w http.ResponseWriter, r *http.Request) {
	a := actor(r)
	f, err := s.store.ResumeFleet(r.Context(), a)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if f.Changed {
		s.log.InfoContext(r.Context(), "fleet resumed", "by", a.By)
	}
	writeJSON(w, http.StatusOK, fleetWire(f))
}

func (s *Server) pausePlan(w http.ResponseWriter, r *http.Request) {
	s.changePlan(w, r, "paused", func(id string) (queue.PlanChange, error) {
		return s.store.PausePlan(r.Context(), id, actor(r))
	})
}

func (s *Server) resumePlan(w http.ResponseWriter, r *http.Request) {
	s.changePlan(w, r, "resumed", func(id string) (queue.PlanChange, error) {
		return s.store.ResumePlan(r.Context(), id, actor(r))
	})
}

// approvePlan takes an optional body {"digest": D}; without one the plan is approved as
// it is now.
func (s *Server) approvePlan(w http.ResponseWriter, r *http.Request) {
	var req client.ApproveRequest
	if r.ContentLength != 0 {
		if err := decode(w, r, s.cfg.MaxBodyBytes, &req); err != nil {
			s.writeError(w, r, err)
			return
		}
	}
	s.changePlan(w, r, "approved", func(id string) (queue.PlanChange, error) {
		return s.store.ApprovePlan(r.Context(), id, req.Digest, actor(r))
	})
}

// changePlan runs change on the plan of the path and answers with what it did; what
// names the change in the log.
func (s *Server) changePlan(w http.ResponseWriter, r *http.Request, what string, change func(id string) (queue.PlanChange, error)) {
	id, err := param(r, "plan")
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	ch, err := change(id)
	if err != nil {
		s.writeError(w, r, err)
		return
	}
	if ch.Changed {
		s.log.InfoContext(r.Context(), "plan pause state changed", "plan_id", id, "change", what, "by", principalFrom(r.Context()).by())
	}
	writeJSON(w, http.StatusOK, client.PlanChangeResponse{Plan: planWire(ch.Plan), Changed: ch.Changed, Digest: ch.Digest})
}
