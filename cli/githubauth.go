package cli

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"

	ghapp "github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/internal/config"
	"github.com/whilly-go/whilly/web"
)

// githubSignIn is the dashboard's "Sign in with GitHub" when the App's OAuth client is
// known — WHILLY_GITHUB_CLIENT_ID and WHILLY_GITHUB_CLIENT_SECRET, else the client id and
// secret in the file of `whilly app create` — and nil when it is not.
func (a *app) githubSignIn() (web.GitHubSignIn, error) {
	id := a.cfg.String(config.GitHubClientID)
	secret, err := a.cfg.Secret(config.GitHubClientSecret)
	if err != nil {
		return nil, envErr(err)
	}
	if id == "" {
		cred, ok, err := a.appCredentials()
		if err != nil {
			return nil, err
		}
		if !ok {
			return nil, nil
		}
		id, secret = cred.ClientID, cred.ClientSecret
	}
	if id == "" || secret == "" {
		return nil, nil
	}
	if err := a.cfg.Err(config.GitHubAPIURL); err != nil {
		return nil, envErr(err)
	}
	o, err := ghapp.NewOAuth(ghapp.OAuthConfig{ClientID: id, ClientSecret: secret, APIURL: a.cfg.Raw(config.GitHubAPIURL), Log: a.log})
	if err != nil {
		return nil, envf("sign in with GitHub: %w", err)
	}
	return oauthSignIn{o}, nil
}

// oauthSignIn is app.OAuth in the shape the dashboard asks for.
type oauthSignIn struct{ *ghapp.OAuth }

func (s oauthSignIn) SignIn(ctx context.Context, code, redirectURI, verifier string) (web.GitHubUser, error) {
	ua, err := s.OAuth.SignIn(ctx, code, redirectURI, verifier)
	if err != nil {
		return web.GitHubUser{}, fmt.Errorf("sign in with GitHub: %w", err)
	}
	return web.GitHubUser{Login: ua.Login, ReadRepos: ua.ReadRepos(), WriteRepos: ua.WriteRepos()}, nil
}

// mountOperator adds to the dashboard what the operator gets besides its pages: "Sign in
// with GitHub" when the App's OAuth client is configured, and River's UI at /riverui/
// for admin sessions.
func (a *app) mountOperator(ctx context.Context, srv *control.Server, dash *web.Handler, rc *river.Client[pgx.Tx]) error {
	gs, err := a.githubSignIn()
	if err != nil {
		return err
	}
	if gs != nil {
		dash.EnableGitHubSignIn(gs, a.cfg.String(config.PublicURL))
		callback := a.cfg.String(config.PublicURL)
		if callback == "" {
			callback = "<the browser's address: WHILLY_PUBLIC_URL is unset>"
		}
		a.log.InfoContext(ctx, "the dashboard offers sign in with GitHub", "callback", strings.TrimRight(callback, "/")+web.GitHubCallbackPath)
	}
	rui, err := newRiverUI(rc, a.log)
	if err != nil {
		return err
	}
	ui := dash.RequireAdmin(rui)
	srv.Mount(riverUIPath, ui) // River UI sends it on to /riverui/
	srv.Mount(riverUIPath+"/*", ui)
	return nil
}
