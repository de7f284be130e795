package cli_test

import (
	"context"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// The onboarding line WORKER_TOKEN=$(whilly worker register … --plan ID): stdout is no
// terminal, so it is the token alone and worker_id goes to stderr. --plan scopes the
// worker to the plan. The worker carries its registrar's owner email (a minted bootstrap
// token's owner; --owner with the environment's bootstrap token), and so does its CLAIM.
func TestWorkerRegisterForAScript(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := testkit.DSN(t)
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if code, _, errOut := run(t, dsn, "", "plan", "import", writeFile(t, "plan.json", validPlan)); code != 0 {
		t.Fatalf("import: %d %s", code, errOut)
	}
	st := queue.NewStore(pool, nil, queue.Config{})
	srv := httptest.NewServer(control.New(st, nil, nil, control.Config{BootstrapToken: "whilly_b_environment"}).Handler())
	t.Cleanup(srv.Close)
	boot, _, err := st.Mint(ctx, queue.TokenSpec{Owner: "ops@example.com", Registrar: true})
	if err != nil {
		t.Fatal(err)
	}
	register := func(bootstrap string, args ...string) (string, string) {
		t.Helper()
		code, out, errOut := runEnv(t, "postgres://unused.invalid/none", map[string]string{"WHILLY_BOOTSTRAP_TOKEN": bootstrap}, "",
			append([]string{"worker", "register", "--connect", srv.URL}, args...)...)
		if code != 0 {
			t.Fatalf("worker register %v: exit %d: %s", args, code, errOut)
		}
		return out, errOut
	}

	out, errOut := register(boot, "--plan", "cli")
	token := strings.TrimSuffix(out, "\n")
	if !strings.HasPrefix(token, "whilly_w_") || strings.ContainsAny(token, " \n:") {
		t.Fatalf("stdout %q, want the token alone", out)
	}
	workerID, ok := strings.CutPrefix(strings.TrimSpace(errOut), "worker_id: ")
	workerID, scopes, _ := strings.Cut(workerID, "\n")
	if !ok || scopes != "scopes: plan:cli" {
		t.Fatalf("stderr %q, want the worker_id: and scopes: lines", errOut)
	}
	wk, err := st.AuthenticateWorker(ctx, token)
	if err != nil || wk.ID != workerID {
		t.Fatalf("the printed token is worker %q (%v), want %s", wk.ID, err, workerID)
	}
	if got := wk.Scopes.Strings(); len(got) != 1 || got[0] != "plan:cli" {
		t.Errorf("worker scopes %v, want plan:cli", got)
	}
	if wk.OwnerEmail != "ops@example.com" {
		t.Errorf("worker owner %q, want the bootstrap token's ops@example.com", wk.OwnerEmail)
	}
	c, err := st.Claim(ctx, queue.ClaimRequest{WorkerID: wk.ID, PlanID: "cli", Scopes: wk.Scopes})
	if err != nil || c == nil {
		t.Fatalf("claim: %v, %v", c, err)
	}
	var owner string
	if err := pool.QueryRow(ctx, `SELECT coalesce(payload->>'owner_email', '') FROM events WHERE type = 'CLAIM' AND plan_id = 'cli'`).Scan(&owner); err != nil || owner != "ops@example.com" {
		t.Errorf("CLAIM owner_email %q (%v), want ops@example.com", owner, err)
	}

	// The environment's bootstrap token has no owner: --owner gives it; a minted token's
	// owner wins over --owner.
	out, _ = register("whilly_b_environment", "--owner", "dev@example.com")
	if wk, err := st.AuthenticateWorker(ctx, strings.TrimSpace(out)); err != nil || wk.OwnerEmail != "dev@example.com" || len(wk.Scopes) != 0 {
		t.Errorf("worker of the environment's token = %+v, %v; want owner dev@example.com, unscoped", wk, err)
	}
	out, _ = register(boot, "--owner", "someone@else.example")
	if wk, err := st.AuthenticateWorker(ctx, strings.TrimSpace(out)); err != nil || wk.OwnerEmail != "ops@example.com" {
		t.Errorf("worker owner %q (%v), want the minted token's ops@example.com", wk.OwnerEmail, err)
	}
}
