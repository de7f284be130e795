package control_test

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/internal/testkit"
	"github.com/whilly-go/whilly/queue"
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
