package testkit

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"sync"
	"testing"

	"github.com/whilly-go/whilly/fakegithub"
	"github.com/whilly-go/whilly/testkit/ghspec"
)

// The fake GitHub lives in fakegithub (the benchmarks run it outside tests);
// these are its test-facing names, failing the test where the fake returns an error.
type (
	// Fault makes matching requests to the fake fail (fakegithub.Fault).
	Fault = fakegithub.Fault
	// GitHubRequest is one request the fake answered.
	GitHubRequest = fakegithub.GitHubRequest
	// FakeComment is an issue comment held by the fake.
	FakeComment = fakegithub.FakeComment
	// FakeHookDelivery is a webhook delivery the fake lists.
	FakeHookDelivery = fakegithub.FakeHookDelivery
	// FakePull is a pull request held by the fake.
	FakePull = fakegithub.FakePull
	// FakeDispatch is a repository_dispatch the fake received.
	FakeDispatch = fakegithub.FakeDispatch
	// TokenRequest is one installation token the fake minted.
	TokenRequest = fakegithub.TokenRequest
	// ManifestCreation is one App creation the fake's new-App page received.
	ManifestCreation = fakegithub.ManifestCreation
)

// Names of the App in the fake.
const (
	BotLogin  = fakegithub.BotLogin
	BotUserID = fakegithub.BotUserID
	AppSlug   = fakegithub.AppSlug
)

// GitHub is the fake GitHub of one test (see fakegithub.GitHub); an unknown route or
// GraphQL query, a bad App JWT, or a request GitHub's published API descriptions say
// GitHub would refuse (see ghspec) fails the test.
type GitHub struct {
	*fakegithub.GitHub
	t testing.TB

	mu      sync.Mutex
	offSpec []offSpec // AllowOffSpec
}

type offSpec struct {
	method string
	path   *regexp.Regexp
}

// NewGitHub starts a fake with a fresh 2048-bit App key; it stops with the test.
func NewGitHub(t testing.TB) *GitHub {
	t.Helper()
	dir := CacheDir(t)
	spec, err := ghspec.Load(dir)
	if err != nil {
		t.Fatalf("testkit: the fake GitHub checks requests against GitHub's API descriptions, fetched once from the npm registry into %s: %v", dir, err)
	}
	g, err := fakegithub.New(func(format string, args ...any) { t.Errorf("fake GitHub: "+format, args...) })
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	t.Cleanup(g.Close)
	tg := &GitHub{GitHub: g, t: t}
	g.SetCheck(func(r *http.Request) (int, error) {
		if tg.allowedOffSpec(r.Method, r.URL.EscapedPath()) {
			return 0, nil
		}
		return spec.Check(r)
	})
	return tg
}

// AllowOffSpec lets the test send requests GitHub would refuse, on purpose, to method
// and paths matching path (a regular expression matched against the whole path): the
// fake answers them as it would without GitHub's API descriptions.
func (g *GitHub) AllowOffSpec(method, path string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.offSpec = append(g.offSpec, offSpec{method: method, path: regexp.MustCompile("^" + path + "$")})
}

func (g *GitHub) allowedOffSpec(method, path string) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.ContainsFunc(g.offSpec, func(o offSpec) bool { return o.method == method && o.path.MatchString(path) })
}

// AddGitRepo creates repo (owner/name) as a bare git repository served by the fake (see
// fakegithub.GitHub.AddGitRepo) and returns its directory.
func (g *GitHub) AddGitRepo(repo, defaultBranch string, files map[string]string) string {
	g.t.Helper()
	dir, err := g.GitHub.AddGitRepo(g.t.Context(), repo, defaultBranch, files)
	if err != nil {
		g.t.Fatalf("testkit: %v", err)
	}
	return dir
}

// Branch returns the commits of a branch of a git repository of the fake, newest first
// (see fakegithub.GitHub.Branch).
func (g *GitHub) Branch(repo, branch string) []string {
	g.t.Helper()
	out, err := g.GitHub.Branch(g.t.Context(), repo, branch)
	if err != nil {
		g.t.Fatalf("testkit: %v", err)
	}
	return out
}

// SetPath sets a dotted path in a decoded JSON object, creating objects on the way.
func SetPath(p map[string]any, path string, v any) { fakegithub.SetPath(p, path, v) }

// SignWebhook returns the X-Hub-Signature-256 value of body under secret.
func SignWebhook(secret, body []byte) string { return fakegithub.SignWebhook(secret, body) }

// WebhookRequest builds a signed delivery as GitHub sends it.
func WebhookRequest(t testing.TB, url string, secret []byte, event, deliveryID string, body []byte) *http.Request {
	t.Helper()
	req, err := fakegithub.WebhookRequest(context.Background(), url, secret, event, deliveryID, body)
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	return req
}

// WebhookFixturesDir is where the real GitHub webhook payloads live: the repository's copy
// in testdata/fixtures/github-webhooks. The test fails when it is not there.
func WebhookFixturesDir(t testing.TB) string {
	t.Helper()
	_, file, _, ok := runtime.Caller(0)
	if !ok {
		t.Fatal("testkit: cannot locate the testkit source to find the repository root")
	}
	root := filepath.Dir(filepath.Dir(file)) // testkit/x.go → repo root
	dir := filepath.Join(root, "testdata", "fixtures", "github-webhooks")
	if _, err := os.Stat(filepath.Join(dir, "issues", "labeled.payload.json")); err != nil {
		t.Fatalf("testkit: the GitHub webhook fixtures are missing from %s: %v", dir, err)
	}
	return dir
}

// WebhookFixture decodes the real payload of event/file, e.g. ("issues", "labeled")
// reads issues/labeled.payload.json.
func WebhookFixture(t testing.TB, event, name string) map[string]any {
	t.Helper()
	path := filepath.Join(WebhookFixturesDir(t), event, name+".payload.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("testkit: read webhook fixture: %v", err)
	}
	var p map[string]any
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatalf("testkit: decode webhook fixture %s: %v", path, err)
	}
	return p
}

// WebhookPayload returns the fixture changed by the given dotted-path edits (e.g.
// "installation.id" → 42, "label.name" → "whilly-pending") and re-encoded, so that the
// rest of the payload stays real. An edit's parent objects are created as needed.
func WebhookPayload(t testing.TB, event, name string, edits map[string]any) []byte {
	t.Helper()
	p := WebhookFixture(t, event, name)
	for path, v := range edits {
		SetPath(p, path, v)
	}
	b, err := json.Marshal(p)
	if err != nil {
		t.Fatalf("testkit: encode webhook payload: %v", err)
	}
	return b
}
