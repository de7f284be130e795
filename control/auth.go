package control

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"

	"github.com/whilly-go/whilly/queue"
)

// role is what a route requires of the caller's token.
type role int

const (
	roleWorker    role = iota // a worker token
	roleReader                // any valid token: worker, read, admin or bootstrap
	roleAdmin                 // an admin API token or the bootstrap token
	roleRegistrar             // registers workers: the bootstrap token or an admin token
)

// principal is who a request's token belongs to.
type principal struct {
	worker *queue.Worker   // a worker token
	token  *queue.APIToken // an API token
	boot   bool            // the bootstrap token
}

func (p principal) admin() bool { return p.boot || (p.token != nil && p.token.Admin) }

type principalKey struct{}

func principalFrom(ctx context.Context) principal {
	p, _ := ctx.Value(principalKey{}).(principal)
	return p
}

// bearer returns the token of an "Authorization: Bearer …" header (scheme case-insensitive).
func bearer(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, tok, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	tok = strings.TrimSpace(tok)
	return tok, tok != "" && len(tok) <= 1024
}

// equalSecret compares two secrets in constant time, whatever their lengths.
func equalSecret(a, b string) bool {
	ha, hb := sha256.Sum256([]byte(a)), sha256.Sum256([]byte(b))
	return subtle.ConstantTimeCompare(ha[:], hb[:]) == 1
}

// authenticate resolves the bearer token: the bootstrap token (no database), a worker
// token, then an API token. Stored tokens are looked up by their SHA-256, never compared
// byte by byte.
func (s *Server) authenticate(r *http.Request) (principal, error) {
	tok, ok := bearer(r)
	if !ok {
		return principal{}, errorf(http.StatusUnauthorized, codeUnauthorized, "An Authorization: Bearer token is required.")
	}
	if s.cfg.BootstrapToken != "" && equalSecret(tok, s.cfg.BootstrapToken) {
		return principal{boot: true}, nil
	}
	ctx := r.Context()
	w, err := s.store.AuthenticateWorker(ctx, tok)
	if err == nil {
		return principal{worker: &w}, nil
	}
	if !errors.Is(err, queue.ErrUnauthorized) {
		return principal{}, err
	}
	t, err := s.store.AuthenticateToken(ctx, tok)
	if err == nil {
		return principal{token: &t}, nil
	}
	if !errors.Is(err, queue.ErrUnauthorized) {
		return principal{}, err
	}
	return principal{}, errorf(http.StatusUnauthorized, codeUnauthorized, "The token is unknown, revoked or expired.")
}

// auth authenticates the request before anything else is read and checks its role:
// 401 without a valid token, 403 with a valid token of the wrong kind.
func (s *Server) auth(need role) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, err := s.authenticate(r)
			if err != nil {
				s.writeError(w, r, err)
				return
			}
			var deny string
			switch need {
			case roleWorker:
				if p.worker == nil {
					deny = "This endpoint needs a worker token."
				}
			case roleAdmin:
				if !p.admin() {
					deny = "This endpoint needs an admin token."
				}
			case roleRegistrar:
				if !p.admin() {
					deny = "Registering a worker needs the bootstrap token or an admin token."
				}
			case roleReader:
			}
			if deny != "" {
				s.writeError(w, r, errorf(http.StatusForbidden, codeForbidden, "%s", deny))
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
		})
	}
}
