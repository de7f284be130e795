package app

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/testkit"
)

func TestNewAppURLIsOnTheWebSideOfTheAPI(t *testing.T) {
	t.Parallel()
	cases := []struct{ api, org, want string }{
		{"", "", "https://github.com/settings/apps/new?state=s1"},
		{"https://api.github.com/", "acme", "https://github.com/organizations/acme/settings/apps/new?state=s1"},
		{"https://ghe.corp/api/v3/", "", "https://ghe.corp/settings/apps/new?state=s1"},
		{"https://api.acme.ghe.com/", "my-org", "https://acme.ghe.com/organizations/my-org/settings/apps/new?state=s1"},
	}
	for _, c := range cases {
		if got, err := NewAppURL(c.api, c.org, "s1"); err != nil || got != c.want {
			t.Errorf("NewAppURL(%q, %q) = %s, %v; want %s", c.api, c.org, got, err, c.want)
		}
	}
	for _, org := range []string{"a b", "../x", "-x", "a/b"} {
		if got, err := NewAppURL("", org, "s1"); err == nil {
			t.Errorf("organization %q accepted: %s", org, got)
		}
	}
}

// A code that is not GitHub's shape never reaches the conversion URL (go-github does not
// escape it): no request is made.
func TestCompleteManifestRefusesAMalformedCode(t *testing.T) {
	t.Parallel()
	gh := testkit.NewGitHub(t)
	for _, code := range []string{"../../app/installations", "a?b=c", "", strings.Repeat("a", 300)} {
		if _, err := CompleteManifest(context.Background(), gh.URL(), code); err == nil {
			t.Errorf("code %q was accepted", code)
		}
	}
	if n := len(gh.Requests()); n != 0 {
		t.Errorf("%d requests reached GitHub", n)
	}
	// A code GitHub never issued: its 404, no credentials.
	if _, err := CompleteManifest(context.Background(), gh.URL(), "nosuchcode"); !errors.Is(err, ErrNotFound) {
		t.Errorf("unknown code: %v, want GitHub's 404", err)
	}
}

// The local page answers only under the address whilly printed (DNS rebinding), and the
// credentials file is never replaced.
func TestManifestFlowChecksTheHostAndNeverReplacesTheFile(t *testing.T) {
	t.Parallel()
	flow := NewManifestFlow(ManifestFlowConfig{Host: "127.0.0.1:1234", NewAppURL: "https://github.com/settings/apps/new?state=x", State: "x", Manifest: []byte(`{"a":"<b>"}`)})
	for host, want := range map[string]int{"evil.example:1234": http.StatusMisdirectedRequest, "127.0.0.1:1234": http.StatusOK} {
		req := httptest.NewRequest(http.MethodGet, "http://"+host+"/", nil)
		rec := httptest.NewRecorder()
		flow.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("Host %s: %d, want %d", host, rec.Code, want)
		}
		if want == http.StatusOK && !strings.Contains(rec.Body.String(), `value="{&#34;a&#34;:&#34;&lt;b&gt;&#34;}"`) {
			t.Errorf("the manifest is not escaped into the form:\n%s", rec.Body)
		}
	}

	gh := testkit.NewGitHub(t)
	path := filepath.Join(t.TempDir(), CredentialsFile)
	c := Credentials{AppID: 1, PrivateKey: string(gh.KeyPEM), WebhookSecret: "s"}
	if err := WriteCredentials(path, c); err != nil {
		t.Fatal(err)
	}
	c.WebhookSecret = "other"
	if err := WriteCredentials(path, c); err == nil {
		t.Error("the file was replaced")
	}
	got, err := ReadCredentials(path)
	if err != nil || got.WebhookSecret != "s" {
		t.Errorf("ReadCredentials = %+v, %v; want the first App's", got.LogValue(), err)
	}
	if err := WriteCredentials(filepath.Join(t.TempDir(), "x.json"), Credentials{AppID: 1, PrivateKey: "not a key", WebhookSecret: "s"}); err == nil {
		t.Error("credentials with a bad key were written")
	}
	if entries, _ := os.ReadDir(filepath.Dir(path)); len(entries) != 1 {
		t.Errorf("%d files beside the credentials, want none (temporary files removed)", len(entries)-1)
	}
}

// A code works once: whatever the exchange or the save does, the flow ends with a result
// the terminal reports (the App's id included when only the save failed), and a second
// callback with a valid state is refused.
func TestManifestFlowEndsOnceWithWhatHappened(t *testing.T) {
	t.Parallel()
	saveErr := errors.New("disk full")
	flow := NewManifestFlow(ManifestFlowConfig{Host: "127.0.0.1:1", State: "st",
		Complete: func(context.Context, string) (Credentials, error) { return Credentials{AppID: 9, Slug: "w"}, nil },
		Save:     func(Credentials) error { return saveErr }})
	call := func() int {
		rec := httptest.NewRecorder()
		flow.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, "http://127.0.0.1:1/callback?code=abc&state=st", nil))
		return rec.Code
	}
	if got := call(); got != http.StatusBadGateway {
		t.Errorf("callback whose save failed: %d, want 502", got)
	}
	res := <-flow.Done()
	if !errors.Is(res.Err, saveErr) || res.Credentials.AppID != 9 {
		t.Errorf("result = %+v, want the App and the save error", res)
	}
	if got := call(); got != http.StatusGone {
		t.Errorf("second callback: %d, want 410", got)
	}
}
