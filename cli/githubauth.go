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
// secret in the file of `whilly app create` — and nil when it is not. fromFile says the
// client came from the file.
func (a *app) githubSignIn() (gs web.GitHubSignIn, fromFile bool, err error) {
	id := a.cfg.String(config.GitHubClientID)
	secret, err := a.cfg.Secret(config.GitHubClientSecret)
	if err != nil {
		return nil, false, envErr(err)
	}
	if id == "" {
		cred, ok, err := a.appCredentials()
		if err != nil {
			return nil, false, err
		}
		if !ok {
			return nil, false, nil
		}
		id, secret, fromFile = cred.ClientID, cred.ClientSecret, true
	}
	if id == "" || secret == "" {
		return nil, false, nil
	}
	if err := a.cfg.Err(config.GitHubAPIURL); err != nil {
		return nil, false, envErr(err)
	}
	o, err := ghapp.NewOAuth(ghapp.OAuthConfig{ClientID: id, ClientSecret: secret, APIURL: a.cfg.Raw(config.GitHubAPIURL), Log: a.log})
	if err != nil {
		return nil, false, envf("sign in with GitHub: %w", err)
	}
	return oauthSignIn{o}, fromFile, nil
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
// for admin sessions. access asks GitHub whether a user may still write when they press
// a button (nil without the App: GitHub users may then press none).
//
// GitHub's sign-in needs an https WHILLY_PUBLIC_URL (http on localhost): with the client
// in the variables, any other stops the command here, before a port is opened; with the
// client of `whilly app create`'s file and no WHILLY_PUBLIC_URL at all (the pull mode
// the file also serves, whose App has no callback URL), sign-in is not offered and the
// log says why.
func (a *app) mountOperator(ctx context.Context, srv *control.Server, dash *web.Handler, rc *river.Client[pgx.Tx], access web.WriteAccess) error {
	gs, fromFile, err := a.githubSignIn()
	if err != nil {
		return err
	}
	public := a.cfg.String(config.PublicURL)
	switch {
	case gs == nil:
	case fromFile && public == "":
		a.log.WarnContext(ctx, "sign in with GitHub is not offered: WHILLY_PUBLIC_URL is unset (set it to the dashboard's https address to offer it)")
	default:
		if err := dash.EnableGitHubSignIn(gs, public, access); err != nil {
			return envf("%w", err)
		}
		if access == nil {
			a.log.WarnContext(ctx, "users signed in with GitHub may press no buttons: without the App (WHILLY_GITHUB_APP_ID) whilly cannot ask GitHub whether they still have write access")
		}
		a.log.InfoContext(ctx, "the dashboard offers sign in with GitHub", "callback", strings.TrimRight(public, "/")+web.GitHubCallbackPath)
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
