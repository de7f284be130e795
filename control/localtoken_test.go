package control_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// A local token reads the API while it is renewed under it: each renewal revokes the
// token before the one it replaces, and Stop revokes what is left, after which the
// client is refused.
func TestLocalTokenRenewsAndRevokes(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	const owner = "whilly dashboard on test (pid 1)"
	tok, err := control.NewLocalToken(ctx, e.store, control.LocalTokenConfig{Owner: owner, Renew: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	api, err := client.New(e.url, "", client.Options{HTTPClient: &http.Client{Transport: tok}})
	if err != nil {
		t.Fatal(err)
	}
	mine := func() []queue.APIToken {
		all, err := e.store.ListTokens(ctx)
		if err != nil {
			t.Fatal(err)
		}
		var out []queue.APIToken
		for _, tk := range all {
			if tk.Owner == owner {
				out = append(out, tk)
			}
		}
		return out
	}
	testkit.Eventually(t, 20*time.Second, "three renewals, the API answering throughout", func() bool {
		if _, err := api.ListPlans(ctx, client.PlanQuery{Limit: 1}); err != nil {
			t.Fatalf("read with the local token while it is renewed: %v", err)
		}
		return len(mine()) >= 4
	})
	toks := mine()
	slices.SortFunc(toks, func(a, b queue.APIToken) int { return a.CreatedAt.Compare(b.CreatedAt) })
	if toks[0].RevokedAt == nil {
		t.Errorf("the first token is still valid after three renewals: %+v", toks[0])
	}
	for _, tk := range toks {
		if tk.Admin || tk.Registrar || tk.ExpiresAt == nil || tk.ExpiresAt.Sub(tk.CreatedAt) > control.LocalTokenTTL+time.Minute {
			t.Errorf("token %+v, want a read token expiring within %s", tk, control.LocalTokenTTL)
		}
	}

	tok.Stop(ctx)
	for _, tk := range mine() {
		if tk.RevokedAt == nil {
			t.Errorf("token %s is still valid after Stop", tk.Prefix)
		}
	}
	if _, err := api.ListPlans(ctx, client.PlanQuery{Limit: 1}); !client.IsUnauthorized(err) {
		t.Errorf("read after Stop = %v, want 401", err)
	}
}

// A request still on its way when two renewals have revoked the token it carries is
// refused by the API (401), and sent again with the current token: the caller never sees
// the renewal. A proxy in front of the API holds the first request until then.
func TestLocalTokenResendsARequestWhoseTokenWasRevokedOnTheWay(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	const owner = "whilly dashboard on test (pid 2)"
	tok, err := control.NewLocalToken(ctx, e.store, control.LocalTokenConfig{Owner: owner, Renew: 20 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	defer tok.Stop(ctx)
	target, err := url.Parse(e.url)
	if err != nil {
		t.Fatal(err)
	}
	api := httputil.NewSingleHostReverseProxy(target)
	var held, refused atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if held.Add(1) == 1 {
			// Until its token has been revoked: its token is the newest of those minted
			// so far, and renewals revoke them oldest first.
			minted, _ := ownedTokens(t, e.store, owner)
			testkit.Eventually(t, 20*time.Second, "renewals revoking the held request's token", func() bool {
				_, revoked := ownedTokens(t, e.store, owner)
				return revoked >= minted
			})
		}
		rec := httptest.NewRecorder()
		api.ServeHTTP(rec, r)
		if rec.Code == http.StatusUnauthorized {
			refused.Add(1)
		}
		for k, v := range rec.Header() {
			w.Header()[k] = v
		}
		w.WriteHeader(rec.Code)
		_, _ = w.Write(rec.Body.Bytes())
	}))
	defer proxy.Close()
	c, err := client.New(proxy.URL, "", client.Options{HTTPClient: &http.Client{Transport: tok}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListPlans(ctx, client.PlanQuery{Limit: 1}); err != nil {
		t.Fatalf("a request held while its token was revoked: %v", err)
	}
	// On a slow machine a request sent again can be overtaken by two renewals as well,
	// and is sent again in turn.
	if refused.Load() < 1 || held.Load() != refused.Load()+1 {
		t.Errorf("the API refused %d requests of %d; want the held one refused, and each refused one sent again", refused.Load(), held.Load())
	}
}

// ownedTokens returns how many tokens owner has been given, and how many of them are revoked.
func ownedTokens(t *testing.T, st *queue.Store, owner string) (minted, revoked int) {
	all, err := st.ListTokens(context.Background())
	if err != nil {
		t.Error(err)
	}
	for _, tk := range all {
		if tk.Owner == owner {
			minted++
			if tk.RevokedAt != nil {
				revoked++
			}
		}
	}
	return minted, revoked
}
