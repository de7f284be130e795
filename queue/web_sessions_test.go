package queue_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

func TestSessionsEndWithTheirLifetimeTheirTokenAndSignOut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := queue.NewStore(testkit.DB(t), nil, queue.Config{})
	_, tok, err := st.Mint(ctx, queue.TokenSpec{Owner: "a@example.com", Scopes: queue.Scopes{"plan:p"}})
	if err != nil {
		t.Fatal(err)
	}
	p := queue.Principal{Kind: queue.PrincipalToken, Name: tok.Owner, TokenPrefix: tok.Prefix, Admin: true} // Admin is not the token's
	id, _, err := st.CreateSession(ctx, p, time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	s, err := st.AuthenticateSession(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	if s.Principal.Admin || len(s.Principal.Scopes) != 1 || s.CSRF == "" || s.CSRF == id {
		t.Fatalf("a token session takes the token's rights and a CSRF token of its own: %+v", s)
	}
	if _, err := st.AuthenticateSession(ctx, id+"x"); !errors.Is(err, queue.ErrUnauthorized) {
		t.Fatalf("an unknown id: %v", err)
	}

	short, _, err := st.CreateSession(ctx, p, time.Microsecond)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.AuthenticateSession(ctx, short); !errors.Is(err, queue.ErrUnauthorized) {
		t.Fatalf("an expired session: %v", err)
	}
	if err := st.RevokeSession(ctx, id); err != nil {
		t.Fatal(err)
	}
	if _, err := st.AuthenticateSession(ctx, id); !errors.Is(err, queue.ErrUnauthorized) {
		t.Fatalf("a revoked session: %v", err)
	}
	if _, _, err := st.CreateSession(ctx, queue.Principal{Kind: queue.PrincipalToken, TokenPrefix: "nope"}, time.Hour); !errors.Is(err, queue.ErrUnauthorized) {
		t.Fatalf("a session for an unknown token: %v", err)
	}
	if _, _, err := st.CreateSession(ctx, queue.Principal{Kind: "root"}, time.Hour); !errors.Is(err, queue.ErrInvalid) {
		t.Fatalf("a session for an unknown kind of principal: %v", err)
	}
}

func TestGitHubPrincipalsReadAndWriteTheirRepositoriesOnly(t *testing.T) {
	t.Parallel()
	gh := queue.Principal{Kind: queue.PrincipalGitHub, Name: "octo", ReadRepos: []string{"acme/shop", "Acme/Docs"}, WriteRepos: []string{"acme/shop"}}
	shop := queue.PlanInfo{ID: "p1", Repo: "Acme/Shop"}
	docs := queue.PlanInfo{ID: "p2", Repo: "acme/docs"}
	other := queue.PlanInfo{ID: "p3", Repo: "evil/x"}
	local := queue.PlanInfo{ID: "p4"}
	for _, tc := range []struct {
		p           queue.PlanInfo
		read, write bool
	}{{shop, true, true}, {docs, true, false}, {other, false, false}, {local, false, false}} {
		if gh.CanRead(tc.p) != tc.read || gh.CanWrite(tc.p) != tc.write {
			t.Errorf("plan of %q: read %v write %v, want %v %v", tc.p.Repo, gh.CanRead(tc.p), gh.CanWrite(tc.p), tc.read, tc.write)
		}
	}
	if gh.By() != "@octo" {
		t.Errorf("by = %q", gh.By())
	}
	none := queue.Principal{Kind: queue.PrincipalGitHub, Name: "nobody"}
	if sc, ok := none.ReadScopes(); ok || none.CanRead(local) {
		t.Fatalf("a GitHub user with no repository reads %v (ok %v): no scopes must not mean every plan", sc, ok)
	}
	if _, ok := none.Actor(); ok {
		t.Fatal("a GitHub user with no writable repository may pause plans")
	}
	a, ok := gh.Actor()
	if !ok || len(a.Scopes) != 1 || a.Scopes[0] != "repo:acme/shop" || a.By != "@octo" {
		t.Fatalf("actor of a writer: %+v %v", a, ok)
	}
	reader := queue.Principal{Kind: queue.PrincipalToken, Name: "r"}
	if reader.CanWrite(local) {
		t.Fatal("a read token may write")
	}
	if _, ok := reader.Actor(); ok {
		t.Fatal("a read token is an actor")
	}
}
