package app

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v4"
	"github.com/google/go-github/v62/github"
)

// CredentialsFile is the name of the file `whilly app create` writes in the data
// directory and `whilly serve` reads when WHILLY_GITHUB_APP_ID is unset.
const CredentialsFile = "github-app.json"

// Credentials are what GitHub hands back when it creates an App from its manifest. Its
// LogValue hides the secrets.
type Credentials struct {
	AppID         int64  `json:"app_id"`
	Slug          string `json:"slug"`
	Name          string `json:"name"`
	Owner         string `json:"owner,omitempty"`
	HTMLURL       string `json:"html_url"`
	PrivateKey    string `json:"private_key"` // PEM
	WebhookSecret string `json:"webhook_secret"`
	ClientID      string `json:"client_id"`
	ClientSecret  string `json:"client_secret"`
}

// LogValue keeps the key and the secrets out of logs.
func (c Credentials) LogValue() slog.Value {
	return slog.GroupValue(slog.Int64("app_id", c.AppID), slog.String("slug", c.Slug), slog.String("owner", c.Owner))
}

// InstallURL is the page where the App is installed on accounts and repositories.
func (c Credentials) InstallURL() string {
	return strings.TrimRight(c.HTMLURL, "/") + "/installations/new"
}

// check refuses credentials whilly could not run with.
func (c Credentials) check() error {
	var missing []string
	if c.AppID <= 0 {
		missing = append(missing, "app_id")
	}
	if c.PrivateKey == "" {
		missing = append(missing, "private_key")
	}
	if c.WebhookSecret == "" {
		missing = append(missing, "webhook_secret")
	}
	if len(missing) > 0 {
		return fmt.Errorf("the App's credentials lack %s", strings.Join(missing, ", "))
	}
	if _, err := jwt.ParseRSAPrivateKeyFromPEM([]byte(c.PrivateKey)); err != nil {
		return fmt.Errorf("the App's private key is not an RSA key in PEM: %w", err)
	}
	return nil
}

// WriteCredentials writes c to path, readable by its owner only (0600). It never
// replaces a file: an existing one is an error, so a second `app create` cannot lose
// the first App's key.
func WriteCredentials(path string, c Credentials) error {
	if err := c.check(); err != nil {
		return err
	}
	b, err := json.MarshalIndent(c, "", "  ") //nolint:gosec // the credentials file is where the secrets belong (0600)
	if err != nil {
		return fmt.Errorf("encode the App's credentials: %w", err)
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return fmt.Errorf("create the directory of %s: %w", path, err)
	}
	// CreateTemp makes the file 0600; linking it into place fails when path exists.
	tmp, err := os.CreateTemp(filepath.Dir(path), ".github-app-*.json")
	if err != nil {
		return fmt.Errorf("write the App's credentials: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(append(b, '\n')); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write the App's credentials to %s: %w", tmp.Name(), err)
	}
	if err := tmp.Sync(); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write the App's credentials to %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write the App's credentials to %s: %w", tmp.Name(), err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return fmt.Errorf("%s already exists: move it away to create another App", path)
		}
		return fmt.Errorf("write the App's credentials to %s: %w", path, err)
	}
	return nil
}

// ReadCredentials reads a file written by WriteCredentials. A file others may read is
// refused, as ssh refuses such a key; fs.ErrNotExist is returned wrapped when there is
// no file.
func ReadCredentials(path string) (Credentials, error) {
	var c Credentials
	st, err := os.Stat(path)
	if err != nil {
		return c, fmt.Errorf("read the App's credentials: %w", err)
	}
	if st.Mode().Perm()&0o077 != 0 {
		return c, fmt.Errorf("%s is readable by others (mode %o): run chmod 600 on it", path, st.Mode().Perm())
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return c, fmt.Errorf("read the App's credentials: %w", err)
	}
	if err := json.Unmarshal(b, &c); err != nil {
		return c, fmt.Errorf("read %s: not the JSON `whilly app create` writes: %w", path, err)
	}
	if err := c.check(); err != nil {
		return c, fmt.Errorf("read %s: %w", path, err)
	}
	return c, nil
}

// NewAppURL is GitHub's page that registers an App from a manifest, for the signed-in
// user or for org, on the GitHub the API at apiURL belongs to.
func NewAppURL(apiURL, org, state string) (string, error) {
	base, err := parseAPIURL(apiURL)
	if err != nil {
		return "", err
	}
	u := webBase(base)
	if org != "" {
		if err := CheckOrg(org); err != nil {
			return "", err
		}
		u.Path += "/organizations/" + org + "/settings/apps/new"
	} else {
		u.Path += "/settings/apps/new"
	}
	u.RawQuery = url.Values{"state": {state}}.Encode()
	return u.String(), nil
}

func parseAPIURL(apiURL string) (*url.URL, error) {
	if apiURL == "" {
		apiURL = DefaultAPIURL
	}
	if !strings.HasSuffix(apiURL, "/") {
		apiURL += "/"
	}
	base, err := url.Parse(apiURL)
	if err != nil || (base.Scheme != "https" && base.Scheme != "http") || base.Host == "" {
		return nil, fmt.Errorf("GitHub API URL %q is not an http(s) URL", apiURL)
	}
	return base, nil
}

// accountName is the shape of a GitHub user or organization login.
var accountName = regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,37}[A-Za-z0-9])?$`)

// CheckOrg refuses what cannot be a GitHub organization's login.
func CheckOrg(org string) error {
	if !accountName.MatchString(org) {
		return fmt.Errorf("%q is not a GitHub organization name", org)
	}
	return nil
}

// manifestCode is the shape of the code GitHub's redirect carries; anything else (a
// path, a query) must not reach the conversion URL, which go-github does not escape.
var manifestCode = regexp.MustCompile(`^[A-Za-z0-9_-]{1,200}$`)

// CompleteManifest exchanges the code of the manifest flow's redirect for the new App's
// credentials (POST /app-manifests/{code}/conversions; it needs no authentication and
// works once per code, within an hour).
func CompleteManifest(ctx context.Context, apiURL, code string) (Credentials, error) {
	if !manifestCode.MatchString(code) {
		return Credentials{}, errors.New("the code GitHub sent back is malformed")
	}
	base, err := parseAPIURL(apiURL)
	if err != nil {
		return Credentials{}, err
	}
	gh := github.NewClient(&http.Client{Transport: newTransport(), Timeout: 30 * time.Second})
	gh.BaseURL = base
	gh.UserAgent = "whilly"
	cfg, resp, err := gh.Apps.CompleteAppManifest(ctx, code)
	if err != nil {
		return Credentials{}, mapErr("create the App from its manifest", resp, err)
	}
	c := Credentials{
		AppID: cfg.GetID(), Slug: cfg.GetSlug(), Name: cfg.GetName(), Owner: cfg.GetOwner().GetLogin(),
		HTMLURL: cfg.GetHTMLURL(), PrivateKey: cfg.GetPEM(), WebhookSecret: cfg.GetWebhookSecret(),
		ClientID: cfg.GetClientID(), ClientSecret: cfg.GetClientSecret(),
	}
	if err := c.check(); err != nil {
		return Credentials{}, fmt.Errorf("create the App from its manifest: %w", err)
	}
	return c, nil
}

// ManifestFlowConfig configures the local page of the manifest flow.
type ManifestFlowConfig struct {
	// Host is the listener's host:port; requests naming another Host are refused (DNS
	// rebinding).
	Host string
	// NewAppURL is GitHub's new-App page with the state (NewAppURL).
	NewAppURL string
	// State is the secret GitHub sends back with the code.
	State string
	// Manifest is the manifest JSON, its redirect_url pointing at Host's /callback.
	Manifest []byte
	// Complete exchanges the code (CompleteManifest).
	Complete func(ctx context.Context, code string) (Credentials, error)
	// Save keeps the credentials (WriteCredentials).
	Save func(Credentials) error
}

// ManifestFlow is the local web page of `whilly app create`: GET / posts the manifest to
// GitHub's new-App page; GitHub sends the browser back to /callback with a code and the
// state, which it exchanges for the App's credentials and saves, once.
type ManifestFlow struct {
	cfg  ManifestFlowConfig
	done chan FlowResult

	mu       sync.Mutex
	finished bool
}

// NewManifestFlow returns the flow's handler.
func NewManifestFlow(cfg ManifestFlowConfig) *ManifestFlow {
	return &ManifestFlow{cfg: cfg, done: make(chan FlowResult, 1)}
}

// FlowResult is how the flow ended: the saved credentials, or why there are none.
type FlowResult struct {
	Credentials Credentials
	Err         error
}

// Done receives the flow's result once GitHub has sent the browser back with a code.
func (f *ManifestFlow) Done() <-chan FlowResult { return f.done }

var flowPage = template.Must(template.New("flow").Parse(`<!doctype html>
<html><head><meta charset="utf-8"><title>whilly: {{.Title}}</title></head>
<body style="font-family: sans-serif; max-width: 40em; margin: 3em auto">
{{if .Action}}<form id="create" method="post" action="{{.Action}}">
<input type="hidden" name="manifest" value="{{.Manifest}}">
<p>whilly is sending its App manifest to GitHub. If nothing happens,
<button type="submit">create the GitHub App</button>.</p>
</form>
<script>document.getElementById("create").submit()</script>
{{else}}<h1>{{.Title}}</h1><p>{{.Message}}</p>
{{if .Link}}<p><a href="{{.Link}}">Install the App</a></p>{{end}}{{end}}
</body></html>
`))

type flowView struct {
	Title, Message, Action, Manifest, Link string
}

func (f *ManifestFlow) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Host != f.cfg.Host {
		page(w, http.StatusMisdirectedRequest, flowView{Title: "wrong host", Message: "Open the address whilly printed."})
		return
	}
	if r.Method != http.MethodGet {
		w.Header().Set("Allow", http.MethodGet)
		page(w, http.StatusMethodNotAllowed, flowView{Title: "method not allowed", Message: "Only GET is served here."})
		return
	}
	switch r.URL.Path {
	case "/":
		page(w, http.StatusOK, flowView{Title: "create the GitHub App", Action: f.cfg.NewAppURL, Manifest: string(f.cfg.Manifest)})
	case "/callback":
		f.callback(w, r)
	default:
		page(w, http.StatusNotFound, flowView{Title: "not found", Message: "Open the address whilly printed."})
	}
}

func (f *ManifestFlow) callback(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	state, code := q.Get("state"), q.Get("code")
	if subtle.ConstantTimeCompare([]byte(state), []byte(f.cfg.State)) != 1 || code == "" {
		page(w, http.StatusBadRequest, flowView{Title: "not from this flow",
			Message: "This link does not carry the state whilly sent to GitHub; it was ignored."})
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.finished {
		page(w, http.StatusGone, flowView{Title: "already done", Message: "The App was already created; return to your terminal."})
		return
	}
	// A code works once: whatever happens now ends the flow.
	f.finished = true
	c, err := f.cfg.Complete(r.Context(), code)
	if err == nil {
		err = f.cfg.Save(c)
	}
	f.done <- FlowResult{Credentials: c, Err: err}
	if err != nil {
		page(w, http.StatusBadGateway, flowView{Title: "the App could not be set up", Message: "See whilly's output in your terminal."})
		return
	}
	page(w, http.StatusOK, flowView{Title: "GitHub App " + c.Slug + " created",
		Message: "whilly saved its credentials. Install it on the repositories whilly should work on.", Link: c.InstallURL()})
}

func page(w http.ResponseWriter, status int, v flowView) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("Referrer-Policy", "no-referrer")
	w.WriteHeader(status)
	_ = flowPage.Execute(w, v) // the browser went away; nothing to do
}
