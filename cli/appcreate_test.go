package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	ghapp "github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/testkit"
)

// startAppCreate runs `whilly app create ARGS --no-browser` and returns the address of its
// local page, and a channel with the command's result.
func startAppCreate(t *testing.T, env map[string]string, args ...string) (page string, out *syncBuffer, done chan error) {
	t.Helper()
	pr, pw := io.Pipe()
	out = &syncBuffer{}
	stdio := IO{In: strings.NewReader(""), Out: pw, Err: out, Getenv: func(k string) string { return env[k] }}
	a := newApp(stdio, slog.New(slog.DiscardHandler))
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	done = make(chan error, 1)
	cmd := a.appCommand()
	cmd.SetArgs(append([]string{"create", "--no-browser"}, args...))
	go func() {
		err := cmd.ExecuteContext(ctx)
		_ = pw.Close()
		done <- err
	}()
	lines := bufio.NewScanner(pr)
	if !lines.Scan() {
		t.Fatalf("app create printed nothing: %v", <-done)
	}
	first := lines.Text()
	go func() {
		for lines.Scan() {
			_, _ = out.Write([]byte(lines.Text() + "\n"))
		}
	}()
	m := regexp.MustCompile(`^Open (http://127\.0\.0\.1:[0-9]+/) in your browser`).FindStringSubmatch(first)
	if m == nil {
		t.Fatalf("first line %q does not name the local page", first)
	}
	return m[1], out, done
}

// The manifest flow end to end against the fake GitHub: the local page posts the
// manifest to the organization's new-App page, GitHub redirects back with the code and
// the state, whilly exchanges the code and writes the credentials (0600); then `whilly
// serve`, with no WHILLY_GITHUB_* variable set, starts from that file and acts as the App.
func TestAppCreateWritesTheCredentialsAndServeStartsFromThem(t *testing.T) {
	t.Parallel()
	gh := testkit.NewGitHub(t)
	dataDir := t.TempDir()
	env := map[string]string{"WHILLY_DATA_DIR": dataDir, "WHILLY_GITHUB_API_URL": gh.URL(), "WHILLY_PUBLIC_URL": "https://whilly.test/"}
	page, out, done := startAppCreate(t, env, "--org", "acme")

	// The browser: load the page, submit its form.
	action, manifest := manifestForm(t, page)
	if !strings.HasPrefix(action, gh.Server.URL+"/organizations/acme/settings/apps/new?state=") {
		t.Fatalf("form action = %s, want the organization's new-App page with a state", action)
	}

	// A callback that does not carry the state is refused and writes nothing.
	forged, err := http.Get(page + "callback?code=abc&state=guessed")
	if err != nil {
		t.Fatal(err)
	}
	forged.Body.Close()
	if forged.StatusCode != http.StatusBadRequest {
		t.Errorf("forged callback answered %d, want 400", forged.StatusCode)
	}
	credsPath := filepath.Join(dataDir, ghapp.CredentialsFile)
	if _, err := os.Stat(credsPath); !os.IsNotExist(err) {
		t.Fatalf("a forged callback wrote %s: %v", credsPath, err)
	}

	resp, err := http.PostForm(action, url.Values{"manifest": {manifest}}) // GitHub redirects back to whilly
	if err != nil {
		t.Fatal(err)
	}
	final, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(final), "GitHub App whilly created") {
		t.Fatalf("after GitHub's redirect: %d\n%s", resp.StatusCode, final)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("app create: %v\n%s", err, out)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("app create did not return after the callback")
	}

	created := gh.ManifestCreations()
	if len(created) != 1 {
		t.Fatalf("%d Apps created, want 1", len(created))
	}
	mf := created[0].Manifest
	hook, _ := mf["hook_attributes"].(map[string]any)
	if mf["redirect_url"] != page+"callback" || hook["url"] != "https://whilly.test/webhook" || created[0].Org != "acme" {
		t.Errorf("posted manifest: redirect_url %v, hook %v, org %q", mf["redirect_url"], hook, created[0].Org)
	}
	want, err := ghapp.LoadManifest() // one source: app.yml
	if err != nil {
		t.Fatal(err)
	}
	perms, _ := mf["default_permissions"].(map[string]any)
	for k, v := range want.Permissions {
		if perms[k] != v {
			t.Errorf("permission %s = %v, want %s", k, perms[k], v)
		}
	}

	st, err := os.Stat(credsPath)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o600 {
		t.Errorf("%s has mode %o, want 600", credsPath, st.Mode().Perm())
	}
	raw, _ := os.ReadFile(credsPath)
	var c ghapp.Credentials
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	if c.AppID != gh.AppID || c.Slug != testkit.AppSlug || c.PrivateKey != string(gh.KeyPEM) || c.WebhookSecret != gh.WebhookSecret() ||
		c.ClientID == "" || c.ClientSecret == "" || c.Owner != "acme" {
		t.Errorf("credentials written: app %d slug %q owner %q, key/secret/client match: %v %v %v", c.AppID, c.Slug, c.Owner,
			c.PrivateKey == string(gh.KeyPEM), c.WebhookSecret == gh.WebhookSecret(), c.ClientID != "")
	}
	t.Logf("app create printed, after the page's address:\n%s", out)
	install := gh.Server.URL + "/apps/" + testkit.AppSlug + "/installations/new"
	if text := out.String(); !strings.Contains(text, "Install it on your repositories: "+install) || strings.Contains(text, c.WebhookSecret) {
		t.Errorf("output (want the install link and no secret):\n%s", text)
	}

	// A second run refuses to replace the file.
	a, msg := githubTestApp(env)
	cmd := a.appCommand()
	cmd.SilenceUsage, cmd.SilenceErrors = true, true
	cmd.SetArgs([]string{"create", "--no-browser"})
	if err := cmd.Execute(); err == nil || !strings.Contains(err.Error(), "already exists") {
		t.Errorf("second app create: %v %s, want it refused", err, msg)
	}

	// serve from the file alone.
	gh.Install(77, "Codertocat/Hello-World")
	const issueBody = "- [ ] Fix the spelling of commit in README.md\n\n## Acceptance criteria\n- README.md spells commit right\n\n## Test steps\n- grep -c commmit README.md\n"
	gh.AddIssue("Codertocat/Hello-World", 1, "Spelling", issueBody, "Codertocat", ghapp.LabelPending)
	gh.SetPermission("Codertocat/Hello-World", "Codertocat", "admin")
	// `whilly serve` itself, with nothing of the App in its environment.
	serveEnv := map[string]string{"WHILLY_DATA_DIR": dataDir, "WHILLY_GITHUB_API_URL": gh.URL(), "WHILLY_DATABASE_URL": testkit.DSN(t)}
	pr, pw := io.Pipe()
	serveErr := &syncBuffer{}
	sctx, stop := context.WithCancel(context.Background())
	served := make(chan int, 1)
	go func() {
		served <- Execute(sctx, []string{"serve", "--listen", "127.0.0.1:0"},
			IO{In: strings.NewReader(""), Out: pw, Err: serveErr, Getenv: func(k string) string { return serveEnv[k] }})
		_ = pw.Close()
	}()
	t.Cleanup(func() {
		stop()
		if code := <-served; code != ExitOK {
			t.Errorf("serve exited %d:\n%s", code, serveErr)
		}
	})
	lines := bufio.NewScanner(pr)
	if !lines.Scan() {
		t.Fatalf("serve printed nothing:\n%s", serveErr)
	}
	go func() {
		for lines.Scan() { // keep serve's output flowing
		}
	}()
	addr, ok := strings.CutPrefix(lines.Text(), "whilly control plane listening on http://")
	if !ok {
		t.Fatalf("serve's first line: %q\n%s", lines.Text(), serveErr)
	}
	payload := testkit.WebhookPayload(t, "issues", "labeled", map[string]any{
		"installation": map[string]any{"id": 77}, "label.name": ghapp.LabelPending, "issue.body": issueBody})
	hookURL := "http://" + addr + "/webhook"
	post := func(secret string) int {
		resp, err := http.DefaultClient.Do(testkit.WebhookRequest(t, hookURL, []byte(secret), "issues", "d-1", payload))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if got := post("not-the-secret"); got != http.StatusUnauthorized {
		t.Errorf("a delivery signed with another secret: %d, want 401", got)
	}
	if got := post(gh.WebhookSecret()); got != http.StatusAccepted {
		t.Fatalf("a delivery signed with the App's secret: %d, want 202", got)
	}
	deadline := time.Now().Add(30 * time.Second)
	for !slicesContain(gh.IssueLabels("Codertocat/Hello-World", 1), ghapp.LabelInProgress) {
		if time.Now().After(deadline) {
			t.Fatalf("the issue never got %s: labels %v", ghapp.LabelInProgress, gh.IssueLabels("Codertocat/Hello-World", 1))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func slicesContain(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// A credentials file others can read is refused, as ssh refuses such a key.
func TestServeRefusesACredentialsFileOthersCanRead(t *testing.T) {
	t.Parallel()
	gh := testkit.NewGitHub(t)
	dataDir := t.TempDir()
	path := filepath.Join(dataDir, ghapp.CredentialsFile)
	c := ghapp.Credentials{AppID: gh.AppID, Slug: "whilly", PrivateKey: string(gh.KeyPEM), WebhookSecret: "s"}
	if err := ghapp.WriteCredentials(path, c); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	a, _ := githubTestApp(map[string]string{"WHILLY_DATA_DIR": dataDir, "WHILLY_GITHUB_API_URL": gh.URL()})
	_, err := a.serverConfig()
	if err == nil || !strings.Contains(err.Error(), "chmod 600") {
		t.Errorf("a world-readable credentials file: %v, want it refused", err)
	}
}

// GitHub creates the App before whilly exchanges the code for its credentials: when the
// exchange fails, the App exists on GitHub, and app create says so and where to finish
// it or delete it.
func TestAppCreateFailedExchangeSaysTheAppExists(t *testing.T) {
	t.Parallel()
	gh := testkit.NewGitHub(t)
	gh.Fail(testkit.Fault{Method: "POST", Path: `/app-manifests/[^/]+/conversions`, Status: 500})
	env := map[string]string{"WHILLY_DATA_DIR": t.TempDir(), "WHILLY_GITHUB_API_URL": gh.URL()}
	page, out, done := startAppCreate(t, env)
	action, manifest := manifestForm(t, page)
	resp, err := http.PostForm(action, url.Values{"manifest": {manifest}})
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	select {
	case err := <-done:
		want := "GitHub created the App, but whilly could not fetch its credentials (create the App from its manifest: "
		advice := "finish it on " + gh.Server.URL + "/settings/apps (generate a private key, set its webhook secret, and set WHILLY_GITHUB_APP_ID, WHILLY_GITHUB_PRIVATE_KEY_FILE and WHILLY_GITHUB_WEBHOOK_SECRET), or delete it there and run whilly app create again"
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), advice) {
			t.Errorf("app create: %v\nwant %q … %q\n%s", err, want, advice, out)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("app create did not return after the callback")
	}
}

// manifestForm loads app create's page as a browser would and returns its form's action
// and the manifest it posts.
func manifestForm(t *testing.T, page string) (action, manifest string) {
	t.Helper()
	resp, err := http.Get(page)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	form := regexp.MustCompile(`<form id="create" method="post" action="([^"]+)">\s*<input type="hidden" name="manifest" value="([^"]+)">`).FindSubmatch(body)
	if form == nil {
		t.Fatalf("the page has no manifest form:\n%s", body)
	}
	return html.UnescapeString(string(form[1])), html.UnescapeString(string(form[2]))
}
