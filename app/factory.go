package app

import (
	"context"
	"crypto/rsa"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/bradleyfalzon/ghinstallation/v2"
	"github.com/golang-jwt/jwt/v4"
	"github.com/google/go-github/v62/github"
)

// DefaultAPIURL is GitHub's REST API.
const DefaultAPIURL = "https://api.github.com/"

// Config identifies whilly to GitHub.
type Config struct {
	// AppID and PrivateKey (PEM) are the GitHub App's (WHILLY_GITHUB_APP_ID,
	// WHILLY_GITHUB_PRIVATE_KEY or …_FILE).
	AppID      int64
	PrivateKey []byte
	// Token is a plain token (WHILLY_GITHUB_TOKEN), used for installation 0 — `whilly
	// forge intake` without the App.
	Token string
	// APIURL is the REST base URL (WHILLY_GITHUB_API_URL): GitHub Enterprise Server's
	// https://HOST/api/v3/, or a test server. Default DefaultAPIURL.
	APIURL string
	// Timeout bounds each API call, token exchange included; default 20 s.
	Timeout time.Duration
	// Transport, when set, replaces the shared HTTP transport (tests).
	Transport http.RoundTripper
	// Metrics, when set, counts the API requests and keeps the rate limit left, by
	// installation.
	Metrics *Metrics
	// SealKey is the secret the push tokens of leases are sealed with
	// (WHILLY_TOKEN_SEAL_KEY), at least 32 bytes; every control plane of one database
	// needs the same. Empty with the App: a random key of this process, which no other
	// process or restart can open (tests, a single short-lived process).
	SealKey []byte
	// OldSealKeys are former SealKeys (WHILLY_TOKEN_SEAL_KEY_OLD): they seal nothing but
	// still open the tokens sealed under them, for their revocation after a rotation.
	OldSealKeys [][]byte
}

// Factory hands out GitHub clients: one per installation, cached with its
// ghinstallation transport (which caches the installation token until a minute before
// it expires), all over one shared http.Transport. It is safe for concurrent use.
type Factory struct {
	cfg  Config
	base *url.URL
	tr   http.RoundTripper
	key  *rsa.PrivateKey // the App's key; nil with a token only
	jwt  *reusingSigner  // signs with key
	seal *sealer         // seals push tokens; nil with a token only

	mu      sync.Mutex
	clients map[int64]*ghClient
	app     *ghApp
	logins  map[int64]string // Login's answers
}

// NewFactory checks the configuration (a parsable key when an App id is given) and
// returns the factory.
func NewFactory(cfg Config) (*Factory, error) {
	if cfg.APIURL == "" {
		cfg.APIURL = DefaultAPIURL
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 20 * time.Second
	}
	if !strings.HasSuffix(cfg.APIURL, "/") {
		cfg.APIURL += "/"
	}
	base, err := url.Parse(cfg.APIURL)
	if err != nil || (base.Scheme != "https" && base.Scheme != "http") || base.Host == "" {
		return nil, fmt.Errorf("GitHub API URL %q is not an http(s) URL", cfg.APIURL)
	}
	f := &Factory{cfg: cfg, base: base, tr: cfg.Transport, clients: map[int64]*ghClient{}, logins: map[int64]string{}}
	if f.tr == nil {
		f.tr = newTransport()
	}
	if cfg.AppID != 0 {
		if len(cfg.PrivateKey) == 0 {
			return nil, errors.New("the GitHub App needs its private key")
		}
		key, err := jwt.ParseRSAPrivateKeyFromPEM(cfg.PrivateKey)
		if err != nil {
			return nil, fmt.Errorf("read the GitHub App's private key (an RSA key in PEM): %w", err)
		}
		f.key, f.jwt = key, newReusingSigner(key)
		if f.seal, err = newSealKeys(cfg.SealKey, cfg.OldSealKeys, key); err != nil {
			return nil, err
		}
	}
	if f.key == nil && cfg.Token == "" {
		return nil, errors.New("neither a GitHub App nor a token is configured")
	}
	return f, nil
}

// newTransport is the shared transport: bounded dials, handshakes and header waits, and
// idle connections kept for reuse across installations.
func newTransport() *http.Transport {
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   10 * time.Second,
		ResponseHeaderTimeout: 30 * time.Second,
		ExpectContinueTimeout: time.Second,
		MaxIdleConns:          100,
		MaxIdleConnsPerHost:   32,
		IdleConnTimeout:       90 * time.Second,
	}
}

// HasApp reports whether the App (not only a token) is configured.
func (f *Factory) HasApp() bool { return f.key != nil }

// appsTransport signs requests with the App's JWT (f.jwt, shared). Each installation
// gets its own transport: ghinstallation's token refresh writes to the AppsTransport it
// uses, so sharing one between installations would race.
func (f *Factory) appsTransport() (*ghinstallation.AppsTransport, error) {
	atr, err := ghinstallation.NewAppsTransportWithOptions(f.tr, f.cfg.AppID, ghinstallation.WithSigner(f.jwt))
	if err != nil {
		return nil, fmt.Errorf("the GitHub App's transport: %w", err)
	}
	atr.BaseURL = strings.TrimSuffix(f.cfg.APIURL, "/")
	return atr, nil
}

func (f *Factory) newGitHub(rt http.RoundTripper, installation string) *github.Client {
	gh := github.NewClient(&http.Client{Transport: f.cfg.Metrics.transport(rt, installation), Timeout: f.cfg.Timeout})
	gh.BaseURL = f.base
	gh.UserAgent = "whilly"
	return gh
}

// Installation returns the installation's client. Installation 0 is the static token.
func (f *Factory) Installation(_ context.Context, id int64) (Client, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.clients[id]; ok {
		return c, nil
	}
	var c *ghClient
	switch {
	case id == 0 && f.cfg.Token != "":
		c = &ghClient{gh: f.newGitHub(f.tr, installationLabel(0)).WithAuthToken(f.cfg.Token), graphQL: f.GraphQLURL()}
	case id == 0:
		return nil, errors.New("no installation is known for this repository and WHILLY_GITHUB_TOKEN is not set")
	case f.key == nil:
		return nil, fmt.Errorf("installation %d: %w", id, ErrNoApp)
	default:
		atr, err := f.appsTransport()
		if err != nil {
			return nil, err
		}
		c = &ghClient{gh: f.newGitHub(ghinstallation.NewFromAppsTransport(atr, id), installationLabel(id)), graphQL: f.GraphQLURL()}
	}
	f.clients[id] = c
	return c, nil
}

// Login returns the login whilly writes as through installation id: the App's bot,
// SLUG[bot], for an installation; the token's user for installation 0. It is asked of
// GitHub once and remembered.
func (f *Factory) Login(ctx context.Context, id int64) (string, error) {
	f.mu.Lock()
	login, ok := f.logins[id]
	f.mu.Unlock()
	if ok {
		return login, nil
	}
	if id == 0 {
		c, err := f.Installation(ctx, 0)
		if err != nil {
			return "", err
		}
		u, err := c.User(ctx, "") // the authenticated user
		if err != nil {
			return "", fmt.Errorf("read the token's user: %w", err)
		}
		login = u.Login
	} else {
		ac, err := f.App(ctx)
		if err != nil {
			return "", err
		}
		self, err := ac.Self(ctx)
		if err != nil {
			return "", err
		}
		if self.Slug == "" {
			return "", errors.New("the GitHub App has no slug")
		}
		login = self.Slug + "[bot]"
	}
	f.mu.Lock()
	f.logins[id] = login
	f.mu.Unlock()
	return login, nil
}

// App returns the App's own client (JWT-authenticated).
func (f *Factory) App(_ context.Context) (AppClient, error) {
	if f.key == nil {
		return nil, ErrNoApp
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.app == nil {
		atr, err := f.appsTransport()
		if err != nil {
			return nil, err
		}
		f.app = &ghApp{gh: f.newGitHub(atr, "app")}
	}
	return f.app, nil
}

// GraphQLURL is the GraphQL endpoint beside the REST API: https://api.github.com/graphql,
// or GitHub Enterprise Server's https://HOST/api/graphql for https://HOST/api/v3/.
func (f *Factory) GraphQLURL() string {
	u := *f.base
	if p, ok := strings.CutSuffix(u.Path, "/api/v3/"); ok {
		u.Path = p + "/api/graphql"
	} else {
		u.Path += "graphql"
	}
	return u.String()
}

// GitURL is the HTTPS clone URL of repo on the GitHub the API belongs to:
// https://github.com/OWNER/NAME.git for api.github.com, https://SUB.ghe.com/… for
// api.SUB.ghe.com, and https://HOST/… for GitHub Enterprise Server's https://HOST/api/v3/
// (and a test server's URL).
func (f *Factory) GitURL(repo Repo) string {
	u := webBase(f.base)
	u.Path += "/" + repo.Owner + "/" + repo.Name + ".git"
	return u.String()
}

// webBase is the web side of the GitHub the API at base belongs to, without a trailing
// slash: https://github.com for api.github.com, https://SUB.ghe.com for api.SUB.ghe.com,
// https://HOST for GitHub Enterprise Server's https://HOST/api/v3/, and a test server's
// own URL.
func webBase(base *url.URL) url.URL {
	u := url.URL{Scheme: base.Scheme, Host: base.Host}
	host := base.Hostname()
	if h, ok := strings.CutPrefix(host, "api."); ok && (h == "github.com" || strings.HasSuffix(h, ".ghe.com")) {
		u.Host = h
		if port := base.Port(); port != "" {
			u.Host = net.JoinHostPort(h, port)
		}
	}
	u.Path = strings.TrimSuffix(strings.TrimSuffix(base.Path, "/"), "/api/v3")
	return u
}

// GitHost is the host name of the web and git side (github.com, or the GHES host).
func (f *Factory) GitHost() string {
	u, err := url.Parse(f.GitURL(Repo{Owner: "o", Name: "r"}))
	if err != nil {
		return "github.com"
	}
	return u.Hostname()
}

// UserCanWrite asks GitHub, through the App's installation on repo (installationID, or
// the one GitHub names when it is 0), whether user may write to repo now (write,
// maintain or admin). A user GitHub does not know there may not.
func (f *Factory) UserCanWrite(ctx context.Context, repo Repo, installationID int64, user string) (bool, error) {
	if installationID == 0 {
		ac, err := f.App(ctx)
		if err != nil {
			return false, err
		}
		if installationID, err = ac.RepoInstallation(ctx, repo); err != nil {
			return false, err
		}
	}
	c, err := f.Installation(ctx, installationID)
	if err != nil {
		return false, err
	}
	perm, err := c.Permission(ctx, repo, user)
	if err != nil {
		return false, err
	}
	return CanWrite(perm), nil
}
