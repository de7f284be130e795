package server

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/riverqueue/river"
	"riverqueue.com/riverui"

	ghapp "github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/web"
)

// riverUIPath is where the control plane mounts River's own UI, for admin sessions of
// the dashboard only.
const riverUIPath = "/riverui"

// githubSignIn is the dashboard's "Sign in with GitHub" when the App's OAuth client is
// known (cfg.SignIn), and nil when it is not.
func githubSignIn(cfg Config, log *slog.Logger) (web.GitHubSignIn, error) {
	id, secret := cfg.SignIn.ClientID, cfg.SignIn.ClientSecret
	if id == "" || secret == "" {
		return nil, nil
	}
	o, err := ghapp.NewOAuth(ghapp.OAuthConfig{ClientID: id, ClientSecret: secret, APIURL: cfg.GitHub.APIURL, Log: log})
	if err != nil {
		return nil, configErrorf("sign in with GitHub: %w", err)
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
// for admin sessions. access asks GitHub whether a user may still write when they press
// a button (nil without the App: GitHub users may then press none).
//
// GitHub's sign-in needs an https PublicURL (http on localhost): with the client in the
// variables, any other stops the control plane here, before a port is opened; with the
// client of `whilly app create`'s file and no PublicURL at all (the pull mode the file
// also serves, whose App has no callback URL), sign-in is not offered and the log says
// why.
func mountOperator(ctx context.Context, srv *control.Server, dash *web.Handler, rc *river.Client[pgx.Tx], access web.WriteAccess, cfg Config, log *slog.Logger) error {
	gs, err := githubSignIn(cfg, log)
	if err != nil {
		return err
	}
	public := cfg.PublicURL
	switch {
	case gs == nil:
	case cfg.SignIn.FromFile && public == "":
		log.WarnContext(ctx, "sign in with GitHub is not offered: WHILLY_PUBLIC_URL is unset (set it to the dashboard's https address to offer it)")
	default:
		if err := dash.EnableGitHubSignIn(gs, public, access); err != nil {
			return asConfigError(err)
		}
		if access == nil {
			log.WarnContext(ctx, "users signed in with GitHub may press no buttons: without the App (WHILLY_GITHUB_APP_ID) whilly cannot ask GitHub whether they still have write access")
		}
		log.InfoContext(ctx, "the dashboard offers sign in with GitHub", "callback", strings.TrimRight(public, "/")+web.GitHubCallbackPath)
	}
	rui, err := newRiverUI(rc, log)
	if err != nil {
		return err
	}
	ui := dash.RequireAdmin(rui)
	srv.Mount(riverUIPath, ui) // River UI sends it on to /riverui/
	srv.Mount(riverUIPath+"/*", ui)
	return nil
}

// newRiverUI is River's UI (riverui, its assets embedded in the binary) over the control
// plane's River client: jobs by state, their errors and attempts, queues, and the
// retry, cancel, delete and pause buttons.
//
// The handler is not started: started, it would refresh its job counts in the
// background every ten seconds, for ever, whether anyone looks or not; unstarted, each
// page view counts with one bounded query, and an idle control plane queries nothing.
func newRiverUI(rc *river.Client[pgx.Tx], log *slog.Logger) (http.Handler, error) {
	h, err := riverui.NewHandler(&riverui.HandlerOpts{
		Endpoints: riverui.NewEndpoints(rc, nil),
		Logger:    log.With("component", "riverui"),
		Prefix:    riverUIPath,
		// Job arguments name plans, tasks and deliveries; shown on demand.
		JobListHideArgsByDefault: true,
	})
	if err != nil {
		return nil, fmt.Errorf("build the River UI: %w", err)
	}
	// Its buttons post to its API: refuse posts from other sites (Sec-Fetch-Site, Origin)
	// besides the session cookie being SameSite=Strict.
	return http.NewCrossOriginProtection().Handler(h), nil
}
