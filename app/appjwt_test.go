package app

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/golang-jwt/jwt/v4"

	"github.com/whilly-go/whilly/testkit"
)

type countingSigner struct {
	ghinstallation.Signer
	n atomic.Int32
}

func (c *countingSigner) Sign(claims jwt.Claims) (string, error) {
	c.n.Add(1)
	return c.Signer.Sign(claims)
}

// TestTheAppsJWTIsReusedWhileYoung: the App's requests — a push token minted for each
// claim — share one RSA signature while the JWT has a minute of validity left, and the
// fake GitHub (which checks every JWT's signature and times) accepts each; past that, the
// next request signs anew.
func TestTheAppsJWTIsReusedWhileYoung(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gh := testkit.NewGitHub(t)
	gh.Install(7, "acme/app")
	f, err := NewFactory(Config{AppID: gh.AppID, PrivateKey: gh.KeyPEM, APIURL: gh.URL()})
	if err != nil {
		t.Fatal(err)
	}
	signs := &countingSigner{Signer: f.jwt.signer}
	now := time.Now()
	f.jwt.signer, f.jwt.now = signs, func() time.Time { return now }
	ac, err := f.App(ctx)
	if err != nil {
		t.Fatal(err)
	}
	mint := func(n int) {
		t.Helper()
		for range n {
			if _, err := ac.RepoToken(ctx, 7, Repo{Owner: "acme", Name: "app"}); err != nil {
				t.Fatal(err)
			}
		}
	}
	mint(20)
	if n := signs.n.Load(); n != 1 {
		t.Fatalf("20 push tokens minted: %d JWT signatures, want 1", n)
	}
	now = now.Add(31 * time.Second) // less than a minute of the 90 s left
	mint(1)
	if n := signs.n.Load(); n != 2 {
		t.Fatalf("a push token minted 31 s later: %d JWT signatures in all, want 2", n)
	}
}
