package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/migrations"
	"github.com/whilly-go/whilly/testkit"
)

// versionCLI is a fake claude that prints version on --version.
func versionCLI(t *testing.T, version string) string {
	t.Helper()
	return fakeCLI(t, "claude", "if [ \"$1\" = --version ]; then echo '"+version+"'; exit 0; fi\nexit 3\n")
}

// runDoctor runs `whilly doctor --json` and `whilly doctor` as the binary does.
func runDoctor(t *testing.T, env map[string]string) (rep doctorReport, text string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	stdio := IO{In: strings.NewReader(""), Out: &out, Err: &errOut, Getenv: func(k string) string { return env[k] }}
	code = Execute(context.Background(), []string{"doctor", "--json"}, stdio)
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("doctor --json printed no JSON (%v):\n%s\n%s", err, &out, &errOut)
	}
	out.Reset()
	if c := Execute(context.Background(), []string{"doctor"}, stdio); c != code {
		t.Errorf("doctor exited %d, doctor --json %d", c, code)
	}
	return rep, out.String() + errOut.String(), code
}

func statuses(rep doctorReport) map[string]string {
	m := map[string]string{}
	for _, c := range rep.Checks {
		m[c.Name] = c.Status
	}
	return m
}

// A healthy setup: a migrated database, a logged-in claude, bubblewrap, the App (fake
// GitHub) with its secret, and the public URL served by a running control plane.
func TestDoctorOnAHealthySetup(t *testing.T) {
	t.Parallel()
	gh := testkit.NewGitHub(t)
	env := map[string]string{
		"WHILLY_DATABASE_URL": testkit.DSN(t), "WHILLY_DATA_DIR": t.TempDir(), "HOME": t.TempDir(),
		"CLAUDE_BIN": versionCLI(t, "2.0.14 (Claude Code)"), "ANTHROPIC_API_KEY": "sk-ant-test",
		"WHILLY_GITHUB_APP_ID": strconv.FormatInt(gh.AppID, 10), "WHILLY_GITHUB_PRIVATE_KEY": string(gh.KeyPEM),
		"WHILLY_GITHUB_WEBHOOK_SECRET": "s", "WHILLY_GITHUB_API_URL": gh.URL(),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	a, _ := githubTestApp(env)
	ctx := context.Background()
	cp, err := a.startControlPlane(ctx, testkit.DB(t), ln)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Shutdown(ctx) })
	env["WHILLY_PUBLIC_URL"] = "http://" + ln.Addr().String() + "/"

	rep, text, code := runDoctor(t, env)
	if code != ExitOK || !rep.OK {
		t.Fatalf("doctor: exit %d\n%s", code, text)
	}
	t.Logf("doctor:\n%s", text)
	want := []string{"configuration", "postgres", "migrations", "agent claude", "agent claude login", "sandbox", "sandbox path", "github app", "webhook secret", "public url", "ci secrets"}
	if len(rep.Checks) != len(want) {
		t.Fatalf("checks:\n%s", text)
	}
	for i, c := range rep.Checks {
		if c.Name != want[i] || c.Status != checkOK {
			t.Errorf("check %d = %+v, want %s ok", i, c, want[i])
		}
	}
	if lines := strings.Split(strings.TrimSpace(text), "\n"); len(lines) != len(want) ||
		!strings.Contains(text, "version 2.0.14 (Claude Code)") || !strings.Contains(text, "App whilly (id 4242): GitHub accepts its JWT") {
		t.Errorf("text output:\n%s", text)
	}
	if !strings.Contains(text, "disk 10 GiB") && !strings.Contains(text, "disk is limited to 10 GiB") {
		t.Errorf("the sandbox line does not say how the box's limits are enforced:\n%s", text)
	}
	if strings.Contains(text, "sk-ant-test") || strings.Contains(text, "PRIVATE KEY") {
		t.Error("a secret reached the output")
	}
	if n := gh.CountRequests("GET", "/app"); n != 2 {
		t.Errorf("GET /app answered %d times, want once per run", n)
	}
}

// A broken setup: the schema not migrated, the task agent's CLI missing, the planner not
// logged in, a bad sandbox setting, GitHub refusing the App's JWT, no webhook secret and
// a public URL nothing answers on. Every one is a failed line, and doctor exits 1.
func TestDoctorOnABrokenSetup(t *testing.T) {
	t.Parallel()
	gh := testkit.NewGitHub(t)
	gh.Fail(testkit.Fault{Method: "GET", Path: "/app", Status: 401})
	dsn := testkit.DSN(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := migrations.Down(context.Background(), pool, 0); err != nil {
		t.Fatal(err)
	}
	pool.Close()
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	deadURL := "http://" + closed.Addr().String()
	closed.Close()
	env := map[string]string{
		"WHILLY_DATABASE_URL": dsn, "WHILLY_DATA_DIR": t.TempDir(), "HOME": t.TempDir(),
		"WHILLY_AGENT": "codex", "CODEX_BIN": filepath.Join(t.TempDir(), "no-codex"),
		"WHILLY_PLANNER": "claude", "CLAUDE_BIN": versionCLI(t, "2.0.14 (Claude Code)"),
		"WHILLY_SANDBOX":       "box",
		"WHILLY_GITHUB_APP_ID": strconv.FormatInt(gh.AppID, 10), "WHILLY_GITHUB_PRIVATE_KEY": string(gh.KeyPEM),
		"WHILLY_GITHUB_API_URL": gh.URL(), "WHILLY_PUBLIC_URL": deadURL,
	}
	rep, text, code := runDoctor(t, env)
	t.Logf("doctor:\n%s", text)
	if code != ExitFailed || rep.OK {
		t.Fatalf("doctor on a broken setup: exit %d (ok %v), want 1\n%s", code, rep.OK, text)
	}
	want := map[string]string{
		"configuration": checkFail, "postgres": checkOK, "migrations": checkFail, "agent codex": checkFail, "agent codex login": checkSkip,
		"agent claude": checkOK, "agent claude login": checkFail, "sandbox": checkFail,
		"github app": checkFail, "webhook secret": checkFail, "public url": checkFail, "ci secrets": checkSkip,
	}
	got := statuses(rep)
	for name, st := range want {
		if got[name] != st {
			t.Errorf("%s: %s, want %s", name, got[name], st)
		}
	}
	if len(got) != len(want) {
		t.Errorf("checks %v, want %v", got, want)
	}
	for _, s := range []string{"WHILLY_GITHUB_APP_ID is set but WHILLY_GITHUB_WEBHOOK_SECRET is not", "pending (whilly 0001_init, whilly 0002_github, whilly 0003_github_pulls and ", "npm install -g @openai/codex", "not logged in", "bwrap or none",
		"refused its JWT", "WHILLY_GITHUB_WEBHOOK_SECRET is not set", "cannot be reached"} {
		if !strings.Contains(text, s) {
			t.Errorf("the output does not say %q:\n%s", s, text)
		}
	}
	if !strings.Contains(text, "whilly: 8 of 12 checks failed.") {
		t.Errorf("no summary on stderr:\n%s", text)
	}
}

// A public URL without its scheme: the public url check says what to write, as the
// configuration check does, never a URL parser's error.
func TestDoctorPublicURLWithoutScheme(t *testing.T) {
	t.Parallel()
	env := map[string]string{
		"WHILLY_DATABASE_URL": testkit.DSN(t), "WHILLY_DATA_DIR": t.TempDir(), "HOME": t.TempDir(),
		"WHILLY_AGENT": "sim", "WHILLY_PUBLIC_URL": "127.0.0.1:8080",
	}
	rep, text, _ := runDoctor(t, env)
	if got := statuses(rep)["public url"]; got != checkFail {
		t.Errorf("public url: %s, want %s", got, checkFail)
	}
	const want = `WHILLY_PUBLIC_URL: "127.0.0.1:8080" has no scheme: write https://127.0.0.1:8080 (or http://127.0.0.1:8080)`
	for line := range strings.Lines(text) {
		if strings.Contains(line, "public url") && !strings.Contains(line, want) {
			t.Errorf("the public url check says %q, want %q", line, want)
		}
	}
	if strings.Contains(text, "first path segment") {
		t.Errorf("doctor shows a URL parser's error:\n%s", text)
	}
}
