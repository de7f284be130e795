package config

import (
	"errors"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

func envOf(kv map[string]string) *Env {
	return New(func(k string) string { return kv[k] })
}

func TestCheckReportsEveryProblemAtOnce(t *testing.T) {
	t.Parallel()
	env := envOf(map[string]string{
		"WHILLY_LEASE_TTL":          "soon",
		"WHILLY_MAX_ATTEMPTS":       "0",
		"WHILLY_LOG_LEVEL":          "loud",
		"WHILLY_LISTEN":             "8000",
		"WHILLY_GITHUB_APP_ID":      "12",
		"WHILLY_TRIZ_ENABLED":       "maybe",
		"WHILLY_DATABASE_URL":       "mysql://u:hunter2@db/x",
		"WHILLY_SIM_FAIL_RATE":      "2", // whilly-worker only: not serve's
		"WHILLY_METRICS_TOKEN":      "a",
		"WHILLY_METRICS_TOKEN_FILE": "/nonexistent/token",
	})
	err := env.Check(Serve)
	var ce *Error
	if !errors.As(err, &ce) {
		t.Fatalf("Check = %v, want *Error", err)
	}
	msg := err.Error()
	for _, want := range []string{
		`WHILLY_LEASE_TTL: "soon" is not a duration`,
		`WHILLY_MAX_ATTEMPTS: "0" is not a whole number from 1 to 100`,
		`WHILLY_LOG_LEVEL: "loud" is not one of debug, info, warn, error`,
		`WHILLY_LISTEN: "8000" is not an address`,
		`WHILLY_GITHUB_APP_ID is set but WHILLY_GITHUB_PRIVATE_KEY is not`,
		`WHILLY_GITHUB_APP_ID is set but WHILLY_GITHUB_WEBHOOK_SECRET is not`,
		`WHILLY_TRIZ_ENABLED: "maybe" is not 1 or 0`,
		`WHILLY_DATABASE_URL: "mysql://u:xxxxx@db/x" is not a postgres or postgresql URL`,
		`WHILLY_METRICS_TOKEN and WHILLY_METRICS_TOKEN_FILE are both set`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("Check's message lacks %q:\n%s", want, msg)
		}
	}
	if len(ce.Problems) != 9 {
		t.Errorf("%d problems, want 9:\n%s", len(ce.Problems), msg)
	}
	if strings.Contains(msg, "hunter2") || strings.Contains(msg, "SIM_FAIL_RATE") {
		t.Errorf("message leaks a password or checks a variable serve does not read:\n%s", msg)
	}
	if err := env.Check(Worker); err == nil || !strings.Contains(err.Error(), "WHILLY_SIM_FAIL_RATE") {
		t.Errorf("Check(whilly-worker) = %v, want the sim fail rate", err)
	}
}

func TestCheckAcceptsDefaultsAndGoodValues(t *testing.T) {
	t.Parallel()
	key := filepath.Join(t.TempDir(), "secret")
	if err := os.WriteFile(key, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := envOf(map[string]string{
		"WHILLY_LEASE_TTL":                  "45",
		"WHILLY_AGENT_TIMEOUT":              "1h30m",
		"WHILLY_DATABASE_URL":               "postgres://u@localhost/whilly?sslmode=disable",
		"WHILLY_GITHUB_WEBHOOK_SECRET_FILE": key,
		"WHILLY_SIM_DELAY":                  "0",
		"WHILLY_LOG_FORMAT":                 "json",
	})
	for _, c := range []Command{Serve, Run, Worker, Init, Forge, Doctor, Dashboard, Events, Register, AppCmd} {
		if err := env.Check(c); err != nil {
			t.Errorf("Check(%s) = %v", c, err)
		}
	}
	if d, err := env.Duration(LeaseTTL); err != nil || d != 45*time.Second {
		t.Errorf("LeaseTTL = %v, %v; want 45s", d, err)
	}
	if d, err := env.Duration(AgentTimeout); err != nil || d != 90*time.Minute {
		t.Errorf("AgentTimeout = %v, %v", d, err)
	}
	if d, err := env.Duration(SimDelay); err != nil || d != 0 {
		t.Errorf("SimDelay = %v, %v; want 0", d, err)
	}
	if d, err := env.Duration(TrizTimeout); err != nil || d != 25*time.Second {
		t.Errorf("TrizTimeout default = %v, %v", d, err)
	}
	if s, err := env.Secret(GitHubWebhookSecret); err != nil || s != "s3cret" {
		t.Errorf("Secret from _FILE = %q, %v", s, err)
	}
	if got := env.List(ProtectedPaths); !slices.Equal(got, []string{".github/**", ".gitmodules"}) {
		t.Errorf("ProtectedPaths default = %q", got)
	}
	if n, err := env.Int(MaxAttempts); err != nil || n != 3 {
		t.Errorf("MaxAttempts default = %d, %v", n, err)
	}
}

// Every default must pass its variable's own checks, and each row must be complete.
func TestTableRows(t *testing.T) {
	t.Parallel()
	seen := map[Name]bool{}
	for _, v := range Vars() {
		if seen[v.Name] {
			t.Errorf("%s is in the table twice", v.Name)
		}
		seen[v.Name] = true
		if v.Doc == "" || len(v.Commands) == 0 || v.Kind == "" {
			t.Errorf("%s: doc, commands and kind are required", v.Name)
		}
		if !slices.Contains(Sections(), v.Section) {
			t.Errorf("%s: section %q is not one of Sections", v.Name, v.Section)
		}
		if v.Kind == KindEnum && len(v.Values) == 0 {
			t.Errorf("%s: an enum needs Values", v.Name)
		}
		if v.Default != "" && v.Kind != KindFile {
			if err := v.check(v.Default); err != nil {
				t.Errorf("%s: default %q fails its own check: %v", v.Name, v.Default, err)
			}
		}
	}
}

// The documented variable names are public: each keeps its exact name in the table.
func TestSpecNames(t *testing.T) {
	t.Parallel()
	spec := []string{"WHILLY_DATABASE_URL", "WHILLY_DATA_DIR", "WHILLY_LISTEN", "WHILLY_PUBLIC_URL",
		"WHILLY_BOOTSTRAP_TOKEN", "WHILLY_METRICS_TOKEN", "WHILLY_CONTROL_URL", "WHILLY_WORKER_TOKEN",
		"WHILLY_WORKER_ID", "WHILLY_PLAN", "WHILLY_AGENT", "WHILLY_AGENT_CMD", "WHILLY_AGENT_TIMEOUT",
		"WHILLY_MODEL", "CLAUDE_BIN", "CODEX_BIN", "WHILLY_PLANNER", "WHILLY_TRIZ_ENABLED",
		"WHILLY_TRIZ_TIMEOUT", "WHILLY_GITHUB_APP_ID", "WHILLY_GITHUB_PRIVATE_KEY", "WHILLY_GITHUB_PRIVATE_KEY_FILE",
		"WHILLY_GITHUB_WEBHOOK_SECRET", "WHILLY_GITHUB_API_URL", "WHILLY_GITHUB_TOKEN", "WHILLY_LEASE_TTL",
		"WHILLY_MAX_ATTEMPTS", "WHILLY_SANDBOX", "WHILLY_SANDBOX_ALLOW_HOSTS", "WHILLY_SANDBOX_NET",
		"WHILLY_AGENT_ENV", "WHILLY_PROTECTED_PATHS", "WHILLY_DIFF_MAX_BYTES", "WHILLY_GITHUB_BUDGET_USD",
		"WHILLY_GITHUB_ALLOWED_OWNERS", "WHILLY_REQUIRE_APPROVAL", "WHILLY_LOG_LEVEL", "WHILLY_LOG_FORMAT",
		"WHILLY_GITHUB_DELIVERIES", "WHILLY_PR_MAX_ROUNDS", "WHILLY_PRICES_FILE"}
	names := map[string]bool{}
	for _, v := range Vars() {
		names[string(v.Name)] = true
		if v.Kind == KindSecret {
			names[string(v.Name)+"_FILE"] = true
		}
	}
	for _, n := range spec {
		if !names[n] {
			t.Errorf("%s is not in the table", n)
		}
	}
}

// Every Name constant declared in this package is a row of the table, so Env's
// lookup never panics for one.
func TestEveryNameInTable(t *testing.T) {
	t.Parallel()
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "vars.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	env := New(nil)
	n := 0
	ast.Inspect(f, func(node ast.Node) bool {
		vs, ok := node.(*ast.ValueSpec)
		if !ok || vs.Type == nil || types(vs.Type) != "Name" {
			return true
		}
		for _, id := range vs.Names {
			lit := vs.Values[0].(*ast.BasicLit).Value
			name := Name(strings.Trim(lit, `"`))
			if _, ok := env.vars[name]; !ok {
				t.Errorf("%s (%s) is declared but not in Vars", id.Name, name)
			}
			n++
		}
		return true
	})
	if n != len(Vars()) {
		t.Errorf("%d Name constants, %d rows", n, len(Vars()))
	}
}

func types(e ast.Expr) string {
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

func TestParseDuration(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]time.Duration{"45s": 45 * time.Second, "30m": 30 * time.Minute, "90": 90 * time.Second, "1.5": 1500 * time.Millisecond} {
		if got, err := ParseDuration(in); err != nil || got != want {
			t.Errorf("ParseDuration(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "0", "-5", "-1s", "soon", "5 minutes"} {
		if _, err := ParseDuration(bad); err == nil {
			t.Errorf("ParseDuration(%q) succeeded", bad)
		}
	}
}

func TestPrivateKeyChecked(t *testing.T) {
	t.Parallel()
	env := envOf(map[string]string{"WHILLY_GITHUB_APP_ID": "1", "WHILLY_GITHUB_PRIVATE_KEY": "not a key",
		"WHILLY_GITHUB_WEBHOOK_SECRET": "s"})
	err := env.Check(Serve)
	if err == nil || !strings.Contains(err.Error(), "WHILLY_GITHUB_PRIVATE_KEY: not a PEM private key") {
		t.Fatalf("Check = %v", err)
	}
	if strings.Contains(err.Error(), "not a key") {
		t.Errorf("the key's value is in the message: %v", err)
	}
}

// A URL written without its scheme (host:port, host/path) is answered with the URL to
// write instead of a parser's error, and a password in it is never echoed.
func TestURLWithoutScheme(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ name, value, want string }{
		{"WHILLY_PUBLIC_URL", "127.0.0.1:8080", `WHILLY_PUBLIC_URL: "127.0.0.1:8080" has no scheme: write https://127.0.0.1:8080 (or http://127.0.0.1:8080)`},
		{"WHILLY_PUBLIC_URL", "whilly.example.com", `WHILLY_PUBLIC_URL: "whilly.example.com" has no scheme: write https://whilly.example.com (or http://whilly.example.com)`},
		{"WHILLY_CONTROL_URL", "localhost:8080", `WHILLY_CONTROL_URL: "localhost:8080" has no scheme: write https://localhost:8080 (or http://localhost:8080)`},
		{"WHILLY_DATABASE_URL", "u:hunter2@db:5432/x", `WHILLY_DATABASE_URL: the value has no scheme: start it with postgres://`},
	} {
		err := envOf(map[string]string{c.name: c.value}).Err(Name(c.name))
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s=%s: %v, want %q", c.name, c.value, err, c.want)
		}
	}
}
