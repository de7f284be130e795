package app

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/google/go-github/v62/github"
)

// OAuthCallbackPath is where GitHub sends the browser back after "Sign in with GitHub",
// under WHILLY_PUBLIC_URL; the App's manifest lists it among its callback URLs.
const OAuthCallbackPath = "/auth/github/callback"

// OAuthConfig is the App's OAuth client, for "Sign in with GitHub" (the user-to-server
// flow): the client id and secret `whilly app create` saves, and the GitHub whose API
// is at APIURL (the authorize and token pages are on its web side).
type OAuthConfig struct {
	ClientID     string
	ClientSecret string
	// APIURL is the REST base URL (WHILLY_GITHUB_API_URL); default DefaultAPIURL.
	APIURL string
	// Timeout bounds each call to GitHub; default 20 s.
	Timeout time.Duration
	// Transport, when set, replaces the shared HTTP transport (tests).
	Transport http.RoundTripper
	// Log hears of a user token SignIn could not revoke; nil: discarded.
	Log *slog.Logger
}

// OAuth signs users in with GitHub through the App: it builds the authorize URL,
// exchanges the code for a user token, and reads with that token who the user is and
// which repositories of the App's installations they can reach, with their permission.
// It keeps no token: the caller decides what to keep of the answer.
type OAuth struct {
	cfg  OAuthConfig
	base *url.URL // REST API
	web  url.URL  // github.com or the GHES host
	hc   *http.Client
	tr   http.RoundTripper
}

// NewOAuth checks the configuration and returns the client.
func NewOAuth(cfg OAuthConfig) (*OAuth, error) {
	if cfg.ClientID == "" || cfg.ClientSecret == "" {
		return nil, errors.New("sign in with GitHub needs the App's client id and client secret")
	}
	base, err := parseAPIURL(cfg.APIURL)
	if err != nil {
		return nil, err
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 20 * time.Second
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	tr := cfg.Transport
	if tr == nil {
		tr = newTransport()
	}
	return &OAuth{cfg: cfg, base: base, web: webBase(base), hc: &http.Client{Transport: tr, Timeout: cfg.Timeout}, tr: tr}, nil
}

// NewVerifier returns a fresh PKCE code verifier (RFC 7636): 32 random bytes, base64url.
func NewVerifier() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b) // crypto/rand never fails on supported platforms
	return base64.RawURLEncoding.EncodeToString(b)
}

// AuthorizeURL is GitHub's page that asks the user to authorize the App and then sends
// the browser to redirectURI with a code and state. verifier's S256 challenge binds the
// code to whoever holds the verifier.
func (o *OAuth) AuthorizeURL(redirectURI, state, verifier string) string {
	sum := sha256.Sum256([]byte(verifier))
	u := o.web
	u.Path += "/login/oauth/authorize"
	u.RawQuery = url.Values{
		"client_id":             {o.cfg.ClientID},
		"redirect_uri":          {redirectURI},
		"state":                 {state},
		"code_challenge":        {base64.RawURLEncoding.EncodeToString(sum[:])},
		"code_challenge_method": {"S256"},
		"allow_signup":          {"false"},
	}.Encode()
	return u.String()
}

// OAuthError is GitHub's refusal of a code exchange (it answers 200 with an error field):
// bad_verification_code, incorrect_client_credentials, redirect_uri_mismatch …
type OAuthError struct {
	Code        string
	Description string
}

func (e *OAuthError) Error() string {
	if e.Description == "" {
		return "GitHub refused the sign-in: " + e.Code
	}
	return fmt.Sprintf("GitHub refused the sign-in: %s (%s)", e.Code, e.Description)
}

// maxTokenAnswer bounds the token endpoint's answer read into memory.
const maxTokenAnswer = 64 << 10

// Exchange trades the authorization code for the user's token (POST
// /login/oauth/access_token), presenting the PKCE verifier.
func (o *OAuth) Exchange(ctx context.Context, code, redirectURI, verifier string) (string, error) {
	u := o.web
	u.Path += "/login/oauth/access_token"
	form := url.Values{
		"client_id":     {o.cfg.ClientID},
		"client_secret": {o.cfg.ClientSecret},
		"code":          {code},
		"redirect_uri":  {redirectURI},
		"code_verifier": {verifier},
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), strings.NewReader(form.Encode()))
	if err != nil {
		return "", fmt.Errorf("exchange the sign-in code: %w", err)
	}
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Accept", "application/json")
	req.Header.Set("User-Agent", "whilly")
	resp, err := o.hc.Do(req)
	if err != nil {
		return "", fmt.Errorf("exchange the sign-in code: %w", err)
	}
	defer func() { _ = resp.Body.Close() }()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxTokenAnswer))
	if err != nil {
		return "", fmt.Errorf("exchange the sign-in code: read GitHub's answer: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("exchange the sign-in code: %w", &StatusError{Status: resp.StatusCode, Message: "the token endpoint answered " + resp.Status})
	}
	var tok struct {
		AccessToken string `json:"access_token"`
		TokenType   string `json:"token_type"`
		Error       string `json:"error"`
		Description string `json:"error_description"`
	}
	if err := json.Unmarshal(body, &tok); err != nil {
		return "", fmt.Errorf("exchange the sign-in code: GitHub's answer is not JSON: %w", err)
	}
	if tok.Error != "" {
		return "", fmt.Errorf("exchange the sign-in code: %w", &OAuthError{Code: tok.Error, Description: tok.Description})
	}
	if tok.AccessToken == "" || !strings.EqualFold(tok.TokenType, "bearer") {
		return "", errors.New("exchange the sign-in code: GitHub's answer carries no bearer token")
	}
	return tok.AccessToken, nil
}

// RepoAccess is a repository a user reaches through one of the App's installations,
// and the highest permission they hold on it (PermissionAdmin, "maintain",
// PermissionWrite, "triage", PermissionRead).
type RepoAccess struct {
	Repo         Repo
	Installation int64
	Permission   string
}

// UserAccess is who signed in, and what they may see.
type UserAccess struct {
	Login string
	ID    int64
	// Repos are sorted by owner/name (lower case), one entry per repository.
	Repos []RepoAccess
}

// ReadRepos are the user's repositories, owner/name.
func (u UserAccess) ReadRepos() []string {
	out := make([]string, 0, len(u.Repos))
	for _, r := range u.Repos {
		out = append(out, r.Repo.String())
	}
	return out
}

// WriteRepos are the user's repositories where they may steer whilly (CanWrite: write,
// maintain or admin), owner/name.
func (u UserAccess) WriteRepos() []string {
	var out []string
	for _, r := range u.Repos {
		if CanWrite(r.Permission) {
			out = append(out, r.Repo.String())
		}
	}
	return out
}

// maxUserRepos bounds what one sign-in reads (100 per page): a user who reaches more
// repositories through the App than this sees the first ones only.
const maxUserRepos = 5000

// UserAccess reads, with the user's token, who they are (GET /user) and the repositories
// of the App's installations they can read (GET /user/installations, then
// /user/installations/{id}/repositories for each, every page).
func (o *OAuth) UserAccess(ctx context.Context, token string) (UserAccess, error) {
	gh := github.NewClient(o.hc).WithAuthToken(token)
	gh.BaseURL = o.base
	gh.UserAgent = "whilly"
	u, resp, err := gh.Users.Get(ctx, "")
	if err != nil {
		return UserAccess{}, mapErr("read the signed-in user", resp, err)
	}
	ua := UserAccess{Login: u.GetLogin(), ID: u.GetID()}
	if ua.Login == "" {
		return UserAccess{}, errors.New("read the signed-in user: GitHub's answer has no login")
	}
	var insts []int64
	for opt := (github.ListOptions{PerPage: 100}); ; {
		page, resp, err := gh.Apps.ListUserInstallations(ctx, &opt)
		if err != nil {
			return UserAccess{}, mapErr("list the user's installations of the App", resp, err)
		}
		for _, in := range page {
			insts = append(insts, in.GetID())
		}
		if resp.NextPage == 0 || len(insts) >= maxUserRepos {
			break
		}
		opt.Page = resp.NextPage
	}
	seen := map[string]int{}
	for _, id := range insts {
		for opt := (github.ListOptions{PerPage: 100}); len(ua.Repos) < maxUserRepos; {
			list, resp, err := gh.Apps.ListUserRepos(ctx, id, &opt)
			if err != nil {
				return UserAccess{}, mapErr(fmt.Sprintf("list the user's repositories of installation %d", id), resp, err)
			}
			for _, r := range list.Repositories {
				ra := RepoAccess{Repo: Repo{Owner: r.GetOwner().GetLogin(), Name: r.GetName()}, Installation: id, Permission: permissionOf(r.GetPermissions())}
				if ra.Repo.Owner == "" || ra.Repo.Name == "" || ra.Permission == PermissionNone {
					continue
				}
				key := strings.ToLower(ra.Repo.String())
				if i, ok := seen[key]; ok {
					if permissionRank(ra.Permission) > permissionRank(ua.Repos[i].Permission) {
						ua.Repos[i] = ra
					}
					continue
				}
				seen[key] = len(ua.Repos)
				ua.Repos = append(ua.Repos, ra)
			}
			if resp.NextPage == 0 {
				break
			}
			opt.Page = resp.NextPage
		}
	}
	slices.SortFunc(ua.Repos, func(a, b RepoAccess) int {
		return strings.Compare(strings.ToLower(a.Repo.String()), strings.ToLower(b.Repo.String()))
	})
	return ua, nil
}

type permissionLevel struct{ level, flag string }

// permissionLevels are GitHub's repository permissions, weakest first, with the name
// of the flag in a repository's permissions object.
func permissionLevels() []permissionLevel {
	return []permissionLevel{
		{PermissionRead, "pull"}, {"triage", "triage"}, {PermissionWrite, "push"}, {"maintain", "maintain"}, {PermissionAdmin, "admin"},
	}
}

// permissionOf is the highest level a repository's permissions object grants.
func permissionOf(p map[string]bool) string {
	level := PermissionNone
	for _, l := range permissionLevels() {
		if p[l.flag] {
			level = l.level
		}
	}
	return level
}

func permissionRank(level string) int {
	return slices.IndexFunc(permissionLevels(), func(l permissionLevel) bool { return l.level == level })
}

// Revoke deletes the user's token on GitHub (DELETE /applications/{client_id}/token,
// authenticated as the App's OAuth client), so that it is of no use to anyone once
// whilly has read what it needed.
func (o *OAuth) Revoke(ctx context.Context, token string) error {
	gh := github.NewClient(&http.Client{Timeout: o.cfg.Timeout, Transport: &github.BasicAuthTransport{
		Username: o.cfg.ClientID, Password: o.cfg.ClientSecret, Transport: o.tr}})
	gh.BaseURL = o.base
	gh.UserAgent = "whilly"
	resp, err := gh.Authorizations.Revoke(ctx, o.cfg.ClientID, token)
	return mapErr("revoke the user's token", resp, err)
}

// SignIn is the end of "Sign in with GitHub": it exchanges the code for the user's
// token, reads with it what the user reaches (UserAccess), and revokes the token, so
// that whilly keeps no GitHub credential of the user. A failed revocation is logged and
// does not fail the sign-in: the token expires within eight hours anyway.
func (o *OAuth) SignIn(ctx context.Context, code, redirectURI, verifier string) (UserAccess, error) {
	tok, err := o.Exchange(ctx, code, redirectURI, verifier)
	if err != nil {
		return UserAccess{}, err
	}
	ua, err := o.UserAccess(ctx, tok)
	if rerr := o.Revoke(context.WithoutCancel(ctx), tok); rerr != nil {
		o.cfg.Log.WarnContext(ctx, "the signed-in user's GitHub token could not be revoked; it expires by itself", "error", rerr)
	}
	if err != nil {
		return UserAccess{}, err
	}
	return ua, nil
}
