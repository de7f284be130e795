package cli_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// pauseEnv is a test database with the plan "cli" imported, and a store on it.
func pauseEnv(t *testing.T) (string, *queue.Store) {
	t.Helper()
	dsn := testkit.DSN(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if code, _, errOut := run(t, dsn, "", "plan", "import", writeFile(t, "plan.json", validPlan)); code != 0 {
		t.Fatalf("import: %d %s", code, errOut)
	}
	return dsn, queue.NewStore(pool, nil, queue.Config{})
}

// heldPlan imports a plan awaiting approval, as intake does with WHILLY_REQUIRE_APPROVAL.
func heldPlan(t *testing.T, st *queue.Store, id string) string {
	t.Helper()
	p, err := plan.Parse([]byte(strings.Replace(validPlan, `"plan_id": "cli"`, `"plan_id": "`+id+`"`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.Import(context.Background(), p, queue.ImportOptions{PauseReason: queue.PauseApproval}); err != nil {
		t.Fatal(err)
	}
	d, err := st.PlanDigest(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestPauseCommandsOnTheLocalDatabase(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn, st := pauseEnv(t)
	steps := []struct {
		args []string
		code int
		out  string // in stdout (code 0) or stderr
	}{
		{[]string{"pause"}, 0, "fleet paused by local"},
		{[]string{"pause"}, 0, "already paused"},
		{[]string{"resume"}, 0, "fleet resumed"},
		{[]string{"resume"}, 0, "was not paused"},
		{[]string{"plan", "pause", "cli"}, 0, "plan cli paused"},
		{[]string{"plan", "pause", "cli"}, 0, "already paused (operator)"},
		{[]string{"plan", "approve", "cli"}, 1, "does not await approval"},
		{[]string{"plan", "resume", "cli"}, 0, "plan cli resumed"},
		{[]string{"plan", "pause", "nope"}, 1, "not found"},
		{[]string{"plan", "pause"}, 2, "one plan id"},
		{[]string{"pause", "now"}, 2, "takes no arguments"},
	}
	for _, s := range steps {
		code, out, errOut := run(t, dsn, "", s.args...)
		where := out
		if s.code != 0 {
			where = errOut
		}
		if code != s.code || !strings.Contains(where, s.out) {
			t.Fatalf("whilly %s: exit %d, stdout %q, stderr %q; want exit %d and %q", strings.Join(s.args, " "), code, out, errOut, s.code, s.out)
		}
	}

	digest := heldPlan(t, st, "held")
	code, out, _ := run(t, dsn, "", "plan", "show", "held")
	if code != 0 || !strings.Contains(out, "--digest "+digest) {
		t.Fatalf("plan show of a plan awaiting approval: %d %q; want the approve line with %s", code, out, digest)
	}
	code, _, errOut := run(t, dsn, "", "plan", "approve", "held", "--digest", strings.Repeat("0", 64))
	if code != 1 || !strings.Contains(errOut, "changed since") {
		t.Fatalf("approve with a stale digest: %d %q", code, errOut)
	}
	code, _, errOut = run(t, dsn, "", "plan", "approve", "held", "--digest", "xyz")
	if code != 1 || !strings.Contains(errOut, "64 hexadecimal digits") {
		t.Fatalf("approve with a malformed digest: %d %q", code, errOut)
	}
	if pi, _ := st.GetPlan(ctx, "held"); pi.Status != plan.PlanPaused {
		t.Fatalf("a refused approval changed the plan: %s", pi.Status)
	}
	code, out, errOut = run(t, dsn, "", "plan", "approve", "held", "--digest", digest, "--json")
	if code != 0 || !strings.Contains(out, `"status": "ACTIVE"`) || !strings.Contains(out, digest) {
		t.Fatalf("approve: %d %q %q", code, out, errOut)
	}
	evs, err := st.Events(ctx, queue.EventFilter{Limit: 1000})
	if err != nil {
		t.Fatal(err)
	}
	var by []string
	for _, e := range evs {
		if e.Type == queue.EventSystemPaused || e.Type == queue.EventPlanApproved {
			by = append(by, e.Type+" "+string(e.Payload))
		}
	}
	if len(by) != 2 || !strings.Contains(by[0], `"by": "local`) || !strings.Contains(by[1], `"by": "local`) {
		t.Fatalf("events %v; want system.paused and plan.approved by the local user", by)
	}
}

// With --connect the commands call the API with the admin token; a read token is refused
// (exit 2) and the API's refusals are exit 1 with its sentence.
func TestPauseCommandsThroughTheAPI(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, st := pauseEnv(t)
	ln := queue.NewListener(st.Pool(), nil)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = ln.Run(runCtx)
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	srv := httptest.NewServer(control.New(st, ln, nil, control.Config{}).Handler())
	t.Cleanup(srv.Close)
	admin, _, err := st.MintToken(ctx, "ops@example.com", true, nil)
	if err != nil {
		t.Fatal(err)
	}
	read, _, err := st.MintToken(ctx, "viewer@example.com", false, nil)
	if err != nil {
		t.Fatal(err)
	}
	digest := heldPlan(t, st, "gh/acme/shop/7")
	api := func(token string, args ...string) (int, string, string) {
		return runEnv(t, "postgres://unused.invalid/none", map[string]string{"WHILLY_API_TOKEN": token}, "", append(args, "--connect", srv.URL)...)
	}
	if code, _, errOut := api(read, "pause"); code != 2 || !strings.Contains(errOut, "admin token") {
		t.Fatalf("pause with a read token: %d %q; want exit 2 asking for an admin token", code, errOut)
	}
	if code, _, errOut := api("", "pause"); code != 2 || !strings.Contains(errOut, "WHILLY_API_TOKEN") {
		t.Fatalf("pause without a token: %d %q", code, errOut)
	}
	if code, out, errOut := api(admin, "pause"); code != 0 || !strings.Contains(out, "fleet paused by token:ops@example.com") {
		t.Fatalf("pause: %d %q %q", code, out, errOut)
	}
	if f, _ := st.GetFleet(ctx); !f.Paused {
		t.Fatal("the fleet is not paused")
	}
	if code, _, errOut := api(admin, "plan", "approve", "gh/acme/shop/7", "--digest", strings.Repeat("ab", 32)); code != 1 || !strings.Contains(errOut, "changed since") {
		t.Fatalf("stale approval: %d %q", code, errOut)
	}
	if code, _, errOut := api(admin, "plan", "resume", "gh/acme/shop/7"); code != 1 || !strings.Contains(errOut, "awaits approval") {
		t.Fatalf("resume of a plan awaiting approval: %d %q", code, errOut)
	}
	if code, _, errOut := api(admin, "plan", "pause", "nope"); code != 1 || !strings.Contains(errOut, "not found") {
		t.Fatalf("pause of an unknown plan: %d %q", code, errOut)
	}
	if code, out, errOut := api(admin, "plan", "approve", "gh/acme/shop/7", "--digest", digest); code != 0 || !strings.Contains(out, "approved (digest "+digest) {
		t.Fatalf("approve: %d %q %q", code, out, errOut)
	}
	if code, out, errOut := api(admin, "resume", "--json"); code != 0 || !strings.Contains(out, `"paused": false`) || !strings.Contains(out, `"changed": true`) {
		t.Fatalf("resume: %d %q %q", code, out, errOut)
	}
}
