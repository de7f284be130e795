package control

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/whilly-go/whilly/queue"
)

// role is what a route requires of the caller's token.
type role int

const (
	roleWorker    role = iota // a worker token
	roleReader                // a worker, read or admin token, within its scopes
	roleAdmin                 // an admin API token
	roleRegistrar             // registers workers: a bootstrap (registrar) token or an admin token
)

// principal is who a request's token belongs to.
type principal struct {
	worker *queue.Worker   // a worker token
	token  *queue.APIToken // an API token
	boot   bool            // the bootstrap token of the environment (an unscoped registrar)
}

func (p principal) admin() bool { return p.token != nil && p.token.Admin }

// by names the principal in the events of the changes it makes: an API token's owner.
func (p principal) by() string {
	switch {
	case p.token != nil:
		return "token:" + p.token.Owner
	case p.worker != nil:
		return "worker:" + p.worker.ID
	}
	return ""
}

// registrar reports whether the token may only register workers: the bootstrap token of
// the environment, or one minted with --bootstrap.
func (p principal) registrar() bool { return p.boot || (p.token != nil && p.token.Registrar) }

// scopes are what the principal may read and claim (and what the workers a registrar
// registers inherit); empty is everything.
func (p principal) scopes() queue.Scopes {
	switch {
	case p.worker != nil:
		return p.worker.Scopes
	case p.token != nil && !p.token.Admin:
		return p.token.Scopes
	}
	return nil
}

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

// workerCache remembers the worker tokens the worker protocol's routes have seen, so that
// claims and transitions do not look the token up every time. Revocation stays immediate
// where it matters: the claim statement hands nothing to a revoked worker, heartbeats
// check the worker, and every other route of the protocol needs a lease, which revoking
// a worker takes away. An entry is trusted for workerCacheTTL at most, only while the
// listener is up and has seen no revocation since the entry was made.
type workerCache struct {
	mu      sync.Mutex
	entries map[[sha256.Size]byte]workerEntry
}

type workerEntry struct {
	worker queue.Worker
	at     time.Time
	epoch  uint64 // the listener's Revocations() when the token was checked
}

const (
	workerCacheTTL = 5 * time.Second
	workerCacheMax = 10_000
)

// get returns the worker of token, when the cache may still vouch for it.
func (c *workerCache) get(key [sha256.Size]byte, epoch uint64) (queue.Worker, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[key]
	if !ok || e.epoch != epoch || time.Since(e.at) > workerCacheTTL {
		return queue.Worker{}, false
	}
	return e.worker, true
}

func (c *workerCache) put(key [sha256.Size]byte, w queue.Worker, epoch uint64, at time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.entries == nil || len(c.entries) >= workerCacheMax {
		c.entries = map[[sha256.Size]byte]workerEntry{}
	}
	c.entries[key] = workerEntry{worker: w, at: at, epoch: epoch}
}

// authenticateWorker resolves a worker token for the worker protocol's routes, through
// the cache while the listener can tell it of revocations.
func (s *Server) authenticateWorker(r *http.Request) (principal, error) {
	tok, ok := bearer(r)
	if !ok || !s.listener.Ready() {
		return s.authenticate(r)
	}
	key, epoch, at := sha256.Sum256([]byte(tok)), s.listener.Revocations(), time.Now()
	if w, ok := s.workers.get(key, epoch); ok {
		return principal{worker: &w}, nil
	}
	p, err := s.authenticate(r)
	if err == nil && p.worker != nil {
		s.workers.put(key, *p.worker, epoch, at)
	}
	return p, err
}

// auth authenticates the request before anything else is read and checks its role:
// 401 without a valid token, 403 with a valid token of the wrong kind.
func (s *Server) auth(need role) func(http.Handler) http.Handler {
	authenticate := s.authenticate
	if need == roleWorker {
		authenticate = s.authenticateWorker
	}
	return func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			p, err := authenticate(r)
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
				if !p.admin() && !p.registrar() {
					deny = "Registering a worker needs the bootstrap token or an admin token."
				}
			case roleReader:
				if p.registrar() {
					deny = "A bootstrap token may only register workers (POST /v1/workers/register)."
				}
			}
			if deny != "" {
				s.writeError(w, r, errorf(http.StatusForbidden, codeForbidden, "%s", deny))
				return
			}
			next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
		})
	}
}
