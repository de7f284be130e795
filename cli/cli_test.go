package cli_test

import (
	"bytes"
	"context"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/cli"
	"github.com/whilly-go/whilly/testkit"
)

// run executes the whilly command line against the test database.
func run(t *testing.T, dsn string, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	return runEnv(t, dsn, nil, stdin, args...)
}

// runEnv is run with more environment variables.
func runEnv(t *testing.T, dsn string, more map[string]string, stdin string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	env := map[string]string{"WHILLY_DATABASE_URL": dsn, "WHILLY_DATA_DIR": t.TempDir()}
	maps.Copy(env, more)
	code = cli.Execute(context.Background(), args, cli.IO{
		In: strings.NewReader(stdin), Out: &out, Err: &errb,
		Getenv: func(k string) string { return env[k] },
	})
	return code, out.String(), errb.String()
}

func writeFile(t *testing.T, name, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

const validPlan = `{"plan_id": "cli", "project": "CLI plan", "budget_usd": 1.5, "tasks": [
  {"id": "A", "priority": "high", "description": "Write the first part of the feature with tests",
   "key_files": ["a.go"], "acceptance_criteria": ["it works"], "test_steps": ["go test ./..."]},
  {"id": "B", "priority": "low", "description": "Write the second part of the feature with tests",
   "dependencies": ["A"], "key_files": ["b.go"], "acceptance_criteria": ["it works"], "test_steps": ["go test ./..."]}
]}`

func TestInvalidPlanFilesExitOneNamingTheProblemAndWriteNothing(t *testing.T) {
	t.Parallel()
	dsn := testkit.DSN(t)
	cases := map[string]struct{ body, want string }{
		"malformed json":  {`{"project": "x", "tasks": [`, "JSON"},
		"missing project": {`{"tasks": []}`, `"project"`},
		"unknown dep":     {`{"project": "p", "tasks": [{"id": "A", "priority": "low", "description": "d", "dependencies": ["Z"]}]}`, `"Z"`},
		"cycle":           {`{"project": "p", "tasks": [{"id": "A", "priority": "low", "description": "d", "dependencies": ["B"]}, {"id": "B", "priority": "low", "description": "d", "dependencies": ["A"]}]}`, "A → B → A"},
		"self loop":       {`{"project": "p", "tasks": [{"id": "A", "priority": "low", "description": "d", "dependencies": ["A"]}]}`, "A → A"},
		"bad id":          {`{"project": "p", "tasks": [{"id": "../etc", "priority": "low", "description": "d"}]}`, "id"},
		"duplicate id":    {`{"project": "p", "tasks": [{"id": "A", "priority": "low", "description": "d"}, {"id": "A", "priority": "low", "description": "d"}]}`, "A"},
		"bad priority":    {`{"project": "p", "tasks": [{"id": "A", "priority": "urgent", "description": "d"}]}`, `"priority"`},
		"wrong type":      {`{"project": "p", "tasks": [{"id": "A", "priority": "low", "description": "d", "key_files": "a.go"}]}`, `"key_files"`},
		"no description":  {`{"project": "p", "tasks": [{"id": "A", "priority": "low"}]}`, `"description"`},
		"negative budget": {`{"project": "p", "budget_usd": -1, "tasks": []}`, `"budget_usd"`},
	}
	for name, c := range cases {
		for _, verb := range []string{"import", "apply"} {
			code, _, stderr := run(t, dsn, "", "plan", verb, writeFile(t, "plan.json", c.body))
			if code != 1 {
				t.Errorf("%s (%s): exit %d, want 1; stderr %q", name, verb, code, stderr)
			}
			if !strings.Contains(stderr, c.want) {
				t.Errorf("%s (%s): stderr %q does not name %q", name, verb, stderr, c.want)
			}
		}
	}
	_, out, _ := run(t, dsn, "", "plan", "list", "--json")
	if !strings.Contains(out, `"plans": []`) && !strings.Contains(out, `"plans": null`) {
		t.Fatalf("invalid files left plans behind: %s", out)
	}
}

func TestPlanCommandsRoundTrip(t *testing.T) {
	t.Parallel()
	dsn := testkit.DSN(t)
	file := writeFile(t, "plan.json", validPlan)

	code, out, stderr := run(t, dsn, "", "plan", "import", file)
	if code != 0 || !strings.Contains(out, "plan cli imported: 2 new tasks") {
		t.Fatalf("import: exit %d, out %q, err %q", code, out, stderr)
	}
	code, out, _ = run(t, dsn, "", "plan", "import", file)
	if code != 0 || !strings.Contains(out, "unchanged") {
		t.Fatalf("re-import: exit %d, out %q", code, out)
	}
	_, export1, _ := run(t, dsn, "", "plan", "export", "cli")
	code, _, stderr = run(t, dsn, export1, "plan", "import", "-")
	if code != 0 {
		t.Fatalf("import of the export: exit %d, %s", code, stderr)
	}
	_, export2, _ := run(t, dsn, "", "plan", "export", "cli")
	if export1 != export2 || export1 == "" {
		t.Fatalf("export is not byte-stable:\n%s\n---\n%s", export1, export2)
	}

	code, out, _ = run(t, dsn, "", "plan", "show", "cli", "--no-color")
	if code != 0 || !strings.Contains(out, "[PENDING]") || !strings.Contains(out, "└─ B") {
		t.Fatalf("show: exit %d:\n%s", code, out)
	}
	if strings.Contains(out, "\x1b[") {
		t.Fatalf("show printed colour codes off a terminal:\n%q", out)
	}
	code, out, _ = run(t, dsn, "", "plan", "budget", "cli", "3")
	if code != 0 || !strings.Contains(out, "budget $3") {
		t.Fatalf("budget: exit %d, %q", code, out)
	}
	// A negative amount is refused as such, whether the flag parser sees it or not, and
	// changes nothing; flags after the amount still parse.
	for _, args := range [][]string{{"cli", "-1"}, {"cli", "-2.5", "--json"}, {"cli", "--", "-2"}, {"--json", "cli", "-1"}} {
		code, _, stderr = run(t, dsn, "", append([]string{"plan", "budget"}, args...)...)
		if code != 1 || !strings.Contains(stderr, "cannot be negative") || strings.Contains(stderr, "shorthand") {
			t.Fatalf("negative budget %q: exit %d, %q", args, code, stderr)
		}
	}
	code, out, stderr = run(t, dsn, "", "plan", "budget", "cli", "4", "--json")
	if code != 0 || !strings.Contains(out, `"budget_usd": 4,`) {
		t.Fatalf("budget --json after the amount: exit %d, %q, %q", code, out, stderr)
	}
	code, _, stderr = run(t, dsn, "", "plan", "budget", "cli", "3", "-x")
	if code != 2 || !strings.Contains(stderr, "unknown shorthand flag") {
		t.Fatalf("an unknown shorthand flag that is no number stays a usage error: exit %d, %q", code, stderr)
	}
	code, _, stderr = run(t, dsn, "", "plan", "reset", "cli", "--hard")
	if code != 1 || !strings.Contains(stderr, "--yes") {
		t.Fatalf("hard reset without a terminal or --yes: exit %d, %q", code, stderr)
	}
	code, out, _ = run(t, dsn, "", "plan", "reset", "cli", "--hard", "--yes")
	if code != 0 || !strings.Contains(out, "deleted") {
		t.Fatalf("hard reset: exit %d, %q", code, out)
	}
	code, _, stderr = run(t, dsn, "", "plan", "show", "cli")
	if code != 1 || !strings.Contains(stderr, "not found") {
		t.Fatalf("show after delete: exit %d, %q", code, stderr)
	}
}

func TestEnvironmentErrorsExitTwo(t *testing.T) {
	t.Parallel()
	code, _, stderr := run(t, "postgres://nobody@127.0.0.1:1/nope?connect_timeout=2", "", "plan", "list")
	if code != 2 || !strings.Contains(stderr, "WHILLY_DATABASE_URL") {
		t.Fatalf("unreachable database: exit %d, %q", code, stderr)
	}
	code, _, stderr = run(t, "postgres://x@/y", "", "plan", "import", "/does/not/exist.json")
	if code != 2 || !strings.Contains(stderr, "does not exist") {
		t.Fatalf("missing file: exit %d, %q", code, stderr)
	}
	// A group without a command prints its help.
	if code, out, _ := run(t, "", "", "plan"); code != 0 || !strings.Contains(out, "Available Commands") {
		t.Fatalf("whilly plan: exit %d, %q", code, out)
	}
	// Usage errors exit 2, before anything is opened.
	usage := []struct {
		args []string
		want string
	}{
		{[]string{"plan", "show"}, "one plan id"},
		{[]string{"plan", "show", "a", "b"}, "one plan id"},
		{[]string{"plan", "list", "extra"}, "takes no arguments"},
		{[]string{"plan", "list", "--bogus"}, "unknown flag"},
		{[]string{"plan", "list", "-q"}, "unknown shorthand flag"},
		{[]string{"plan", "list", "--json=maybe"}, "invalid argument"},
		{[]string{"bogus"}, "unknown command"},
		{[]string{"plan", "bogus"}, `unknown command "bogus" for "whilly plan"`},
		{[]string{"admin", "token", "bogus", "x"}, `unknown command "bogus" for "whilly admin token"`},
		{[]string{"plan", "show", "--"}, "one plan id"},
	}
	for _, u := range usage {
		code, out, stderr := run(t, "postgres://127.0.0.1:1/nothing", "", u.args...)
		if code != 2 || !strings.Contains(stderr, u.want) || out != "" {
			t.Errorf("%q: exit %d, stdout %q, stderr %q; want exit 2 naming %q", u.args, code, out, stderr, u.want)
		}
	}
}

// TestMaxAttemptsFromTheEnvironment: WHILLY_MAX_ATTEMPTS is the attempt limit of the tasks
// a plan file gives none; a task's own max_attempts wins, and a bad value exits 2.
func TestMaxAttemptsFromTheEnvironment(t *testing.T) {
	t.Parallel()
	dsn := testkit.DSN(t)
	file := writeFile(t, "attempts.json", `{"plan_id": "attempts", "project": "Attempts", "tasks": [
  {"id": "A", "priority": "low", "description": "d"},
  {"id": "B", "priority": "low", "description": "d", "max_attempts": 2}]}`)
	env := map[string]string{"WHILLY_MAX_ATTEMPTS": "5"}
	if code, _, stderr := runEnv(t, dsn, env, "", "plan", "import", file); code != 0 {
		t.Fatalf("import: exit %d: %s", code, stderr)
	}
	code, out, stderr := run(t, dsn, "", "plan", "export", "attempts")
	if code != 0 {
		t.Fatalf("export: exit %d: %s", code, stderr)
	}
	if !strings.Contains(out, `"id": "A"`) || strings.Count(out, `"max_attempts": 5`) != 1 || strings.Count(out, `"max_attempts": 2`) != 1 {
		t.Errorf("A should have 5 attempts and B 2:\n%s", out)
	}
	for _, bad := range []string{"0", "many", "101"} {
		code, _, stderr := runEnv(t, dsn, map[string]string{"WHILLY_MAX_ATTEMPTS": bad}, "", "plan", "import", file)
		if code != 2 || !strings.Contains(stderr, "WHILLY_MAX_ATTEMPTS") {
			t.Errorf("WHILLY_MAX_ATTEMPTS=%s: exit %d, %q; want 2 naming the variable", bad, code, stderr)
		}
	}
}
