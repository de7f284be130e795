package fakegithub

import (
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"sync"
)

// The manifest flow (`whilly app create`): GitHub's new-App page takes a form POST with
// the manifest and, once the user clicks "Create", sends the browser to the manifest's
// redirect_url with a code and the state; the code is exchanged once for the App's
// credentials. The fake skips the page a person would click on: the POST redirects at
// once. The App it "creates" is the fake's own (AppID, Key), so the credentials work
// against the rest of the fake.

// ManifestCreation is one App creation the fake's new-App page received.
type ManifestCreation struct {
	Org      string         // "" for the user's account
	State    string         // the state query parameter
	Manifest map[string]any // the manifest as posted
}

type manifestFlow struct {
	mu      sync.Mutex
	created []ManifestCreation
	codes   map[string]bool // code → already exchanged
	secret  string          // the webhook secret handed out
}

// ManifestCreations returns the manifests posted to the new-App page, in order.
func (g *GitHub) ManifestCreations() []ManifestCreation {
	g.flow.mu.Lock()
	defer g.flow.mu.Unlock()
	return slices.Clone(g.flow.created)
}

// WebhookSecret is the webhook secret of the App the manifest flow created ("" before).
func (g *GitHub) WebhookSecret() string {
	g.flow.mu.Lock()
	defer g.flow.mu.Unlock()
	return g.flow.secret
}

func (g *GitHub) newApp(w http.ResponseWriter, r *http.Request, _ int64, m []string) int {
	org := ""
	if len(m) > 1 {
		org = m[1]
	}
	if err := r.ParseForm(); err != nil {
		return writeJSON(w, http.StatusBadRequest, map[string]string{"message": "bad form"})
	}
	var manifest map[string]any
	if err := json.Unmarshal([]byte(r.PostForm.Get("manifest")), &manifest); err != nil {
		return writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"message": "Invalid GitHub App configuration: the manifest is not JSON"})
	}
	hook, _ := manifest["hook_attributes"].(map[string]any)
	redirect, _ := manifest["redirect_url"].(string)
	target, err := url.Parse(redirect)
	if _, ok := manifest["url"].(string); !ok || hook == nil || hook["url"] == nil || err != nil || target.Scheme == "" {
		return writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"message": "Invalid GitHub App configuration: url, hook_attributes.url and redirect_url are required"})
	}
	g.flow.mu.Lock()
	defer g.flow.mu.Unlock()
	g.flow.created = append(g.flow.created, ManifestCreation{Org: org, State: r.URL.Query().Get("state"), Manifest: manifest})
	code := "code" + strconv.Itoa(len(g.flow.created)) + randomHex(10)
	if g.flow.codes == nil {
		g.flow.codes = map[string]bool{}
	}
	g.flow.codes[code] = false
	q := target.Query()
	q.Set("code", code)
	q.Set("state", r.URL.Query().Get("state"))
	target.RawQuery = q.Encode()
	http.Redirect(w, r, target.String(), http.StatusFound)
	return http.StatusFound
}

func (g *GitHub) convertManifest(w http.ResponseWriter, _ *http.Request, _ int64, m []string) int {
	g.flow.mu.Lock()
	defer g.flow.mu.Unlock()
	used, known := g.flow.codes[m[1]]
	if !known || used {
		return notFound(w)
	}
	g.flow.codes[m[1]] = true
	if g.flow.secret == "" {
		g.flow.secret = randomHex(20)
	}
	clientID, clientSecret := g.OAuthClient()
	owner := "octo-operator"
	if c := g.flow.created[len(g.flow.created)-1]; c.Org != "" {
		owner = c.Org
	}
	return writeJSON(w, http.StatusCreated, map[string]any{
		"id": g.AppID, "slug": AppSlug, "node_id": "A_fake", "name": AppSlug,
		"owner":    map[string]any{"login": owner},
		"html_url": g.Server.URL + "/apps/" + AppSlug,
		"pem":      string(g.KeyPEM), "webhook_secret": g.flow.secret,
		"client_id": clientID, "client_secret": clientSecret,
	})
}
