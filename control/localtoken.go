package control

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/whilly-go/whilly/queue"
)

// Lifetime of a LocalToken by default: it is renewed well before it expires, so its
// process may run for days, while a token left behind by one that was killed lapses
// within the hour.
const (
	LocalTokenTTL   = time.Hour
	LocalTokenRenew = 30 * time.Minute
)

// LocalTokenConfig tunes NewLocalToken.
type LocalTokenConfig struct {
	Owner string        // the token's owner, as `whilly admin token list` shows it
	TTL   time.Duration // each token's lifetime; 0: LocalTokenTTL
	Renew time.Duration // how often a new one replaces it; 0: LocalTokenRenew
	Log   *slog.Logger
}

// LocalToken is a read token that a process holding the database mints for itself, to
// read a control plane it runs in process over HTTP like any client (whilly dashboard
// without --connect). As an http.RoundTripper it presents the current token on every
// request; it renews the token in the background and revokes its tokens on Stop.
type LocalToken struct {
	st   *queue.Store
	cfg  LocalTokenConfig
	next http.RoundTripper
	cur  atomic.Pointer[mintedToken]

	mu sync.Mutex
	// stale are the prefixes of tokens to revoke: the one renewal replaced (requests may
	// still be on their way with it), revoked at the next renewal, and any whose
	// revocation failed.
	stale   []string
	cancel  context.CancelFunc
	renewed sync.WaitGroup
}

type mintedToken struct{ secret, prefix string }

// NewLocalToken mints the first token and starts renewing it until Stop.
func NewLocalToken(ctx context.Context, st *queue.Store, cfg LocalTokenConfig) (*LocalToken, error) {
	if cfg.TTL <= 0 {
		cfg.TTL = LocalTokenTTL
	}
	if cfg.Renew <= 0 {
		cfg.Renew = LocalTokenRenew
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	t := &LocalToken{st: st, cfg: cfg, next: http.DefaultTransport.(*http.Transport).Clone()}
	if err := t.mint(ctx); err != nil {
		return nil, err
	}
	renewCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	t.cancel = cancel
	t.renewed.Go(func() { t.renew(renewCtx) })
	return t, nil
}

// mint replaces the current token with a new one; the one before it is revoked now
// (requests may still be on their way with the one just replaced).
func (t *LocalToken) mint(ctx context.Context) error {
	exp := time.Now().Add(t.cfg.TTL)
	secret, info, err := t.st.MintToken(ctx, t.cfg.Owner, false, &exp)
	if err != nil {
		return err
	}
	old := t.cur.Swap(&mintedToken{secret: secret, prefix: info.Prefix})
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stale = t.revoke(ctx, t.stale)
	if old != nil {
		t.stale = append(t.stale, old.prefix)
	}
	return nil
}

// revoke revokes the tokens of prefixes and returns those it could not revoke.
func (t *LocalToken) revoke(ctx context.Context, prefixes []string) []string {
	var left []string
	for _, p := range prefixes {
		if err := t.st.RevokeToken(ctx, p); err != nil && !errors.Is(err, queue.ErrNotFound) {
			t.warn(ctx, "revoke a token", err)
			left = append(left, p)
		}
	}
	return left
}

func (t *LocalToken) renew(ctx context.Context) {
	tick := time.NewTicker(t.cfg.Renew)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			// Not cancelled by Stop half-way: a token minted, or one replaced, and then
			// forgotten would stay valid after Stop.
			if err := t.mint(context.WithoutCancel(ctx)); err != nil {
				t.warn(ctx, "renew the token", err)
			}
		}
	}
}

func (t *LocalToken) warn(ctx context.Context, action string, err error) {
	t.cfg.Log.WarnContext(ctx, "local token upkeep failed", "owner", t.cfg.Owner, "action", action, "error", err)
}

// Stop ends renewal and revokes the tokens.
func (t *LocalToken) Stop(ctx context.Context) {
	t.cancel()
	t.renewed.Wait()
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stale = t.revoke(ctx, append(t.stale, t.cur.Load().prefix))
}

// RoundTrip sends req with the current token. A request refused (401) because its token
// was revoked while it was on its way — two renewals passed meanwhile, as on a machine
// slow enough or with a short Renew — is sent again with the token that replaced it,
// when its body can be sent again: up to maxResends times, since on such a machine the
// next one can be overtaken too.
func (t *LocalToken) RoundTrip(req *http.Request) (*http.Response, error) {
	for sent := 0; ; sent++ {
		tok := t.cur.Load()
		resp, err := t.send(req, tok)
		if err != nil || resp.StatusCode != http.StatusUnauthorized || t.cur.Load() == tok ||
			(req.Body != nil && req.GetBody == nil) || sent == maxResends {
			return resp, err
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10)) // so that its connection is reused
		_ = resp.Body.Close()
	}
}

// maxResends bounds how often RoundTrip sends a request again after its token was revoked
// on the way.
const maxResends = 3

// send sends a copy of req (and of its body) with tok.
func (t *LocalToken) send(req *http.Request, tok *mintedToken) (*http.Response, error) {
	r := req.Clone(req.Context())
	if req.GetBody != nil {
		body, err := req.GetBody()
		if err != nil {
			return nil, err
		}
		r.Body = body
	}
	r.Header.Set("Authorization", "Bearer "+tok.secret)
	return t.next.RoundTrip(r)
}
