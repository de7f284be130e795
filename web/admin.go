package web

import (
	"net/http"

	"github.com/whilly-go/whilly/queue"
)

// RequireAdmin lets through the requests of admin sessions only (an admin API token's,
// checked again at every request): without a session the browser goes to sign-in; any
// other session gets 404, as for a page that does not exist.
func (h *Handler) RequireAdmin(next http.Handler) http.Handler {
	return h.RequireSession(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if s, _ := SessionFrom(r.Context()); s.Principal.Kind != queue.PrincipalToken || !s.Principal.Admin {
			h.fail(w, r, http.StatusNotFound, "There is no page "+r.URL.EscapedPath()+".")
			return
		}
		next.ServeHTTP(w, r)
	}))
}
