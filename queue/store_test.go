package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

func newStore(t testing.TB) (*queue.Store, *pgxpool.Pool) {
	t.Helper()
	pool := testkit.DB(t)
	return queue.NewStore(pool, nil, queue.Config{}), pool
}

// goodTask passes the decision gate.
func goodTask(id string, deps ...string) plan.Task {
	return plan.Task{
		ID: id, Priority: plan.PriorityMedium, Status: plan.StatusPending,
		Description:        "Implement " + id + " with care and with tests that prove it",
		Dependencies:       deps,
		KeyFiles:           []string{"app/" + id + ".go"},
		AcceptanceCriteria: []string{id + " works"},
		TestSteps:          []string{"go test ./app -run " + id},
		MaxAttempts:        3,
	}
}

func mustParse(t testing.TB, doc string) *plan.Plan {
	t.Helper()
	p, err := plan.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("parse plan: %v", err)
	}
	return p
}

func countEvents(t testing.TB, pool *pgxpool.Pool, planID, typ string) int {
	t.Helper()
	var n int
	err := pool.QueryRow(context.Background(),
		`SELECT count(*) FROM events WHERE plan_id = $1 AND ($2 = '' OR type = $2)`, planID, typ).Scan(&n)
	if err != nil {
		t.Fatalf("count events: %v", err)
	}
	return n
}

const shopPlan = `{
  "plan_id": "shop-auth",
  "project": "Shop auth hardening",
  "budget_usd": 5.25,
  "verify": [{"name": "unit", "command": "go test ./...", "required": true}],
  "tasks": [
    {"id": "AUTH-1", "priority": "high", "status": "pending",
     "description": "Add rate limiting to the /login handler (5 attempts per minute per IP)",
     "dependencies": [], "key_files": ["app/login.go"],
     "acceptance_criteria": ["the 6th attempt within 60 s returns 429"],
     "test_steps": ["go test ./app -run TestLoginRateLimit"],
     "prd_requirement": "F1.2", "max_attempts": 3},
    {"id": "AUTH-2", "priority": "Medium", "status": "DONE",
     "description": "Document the limit — in docs/security.md, with ünïcödé",
     "dependencies": ["AUTH-1"], "acceptance_criteria": ["section exists"], "test_steps": ["grep -q Rate docs/security.md"]},
    {"id": "ns:sub/3", "priority": "low", "description": "short", "labels": ["gpu"]}
  ]
}`

func TestImportIsIdempotentAndRoundTripsByteForByte(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)

	res, err := st.Import(ctx, mustParse(t, shopPlan), queue.ImportOptions{})
	if err != nil {
		t.Fatalf("import: %v", err)
	}
	if !res.PlanCreated || res.TasksCreated != 3 {
		t.Fatalf("first import = %+v, want plan created with 3 tasks", res)
	}
	if got := countEvents(t, pool, "shop-auth", queue.EventPlanCreated); got != 1 {
		t.Fatalf("plan.created events = %d, want 1", got)
	}
	if got := countEvents(t, pool, "shop-auth", queue.EventTaskCreated); got != 3 {
		t.Fatalf("task.created events = %d, want 3", got)
	}
	before := countEvents(t, pool, "shop-auth", "")

	export1 := exportBytes(t, st, "shop-auth")
	res, err = st.Import(ctx, mustParse(t, string(export1)), queue.ImportOptions{})
	if err != nil {
		t.Fatalf("re-import: %v", err)
	}
	if res.PlanCreated || res.TasksCreated != 0 {
		t.Fatalf("re-import = %+v, want nothing new", res)
	}
	if after := countEvents(t, pool, "shop-auth", ""); after != before {
		t.Fatalf("re-import wrote %d events, want 0", after-before)
	}
	export2 := exportBytes(t, st, "shop-auth")
	if !bytes.Equal(export1, export2) {
		t.Fatalf("export is not byte-stable:\n%s\n---\n%s", export1, export2)
	}
	p, err := plan.Parse(export2)
	if err != nil {
		t.Fatalf("parse export: %v", err)
	}
	if p.Budget == nil || *p.Budget != 5_250_000 || p.Tasks[1].Status != plan.StatusDone || p.Tasks[2].ID != "ns:sub/3" {
		t.Fatalf("export lost data: budget %v, tasks %+v", p.Budget, p.Tasks)
	}
}

// The Python system's origin and repository targets of an imported file come out of
// the export as they went in; a plan without them exports without them.
func TestExportKeepsThePythonOriginAndTargets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := newStore(t)
	const doc = `{"plan_id": "py", "project": "From Python", "phase": "1",
	  "origin": {"system": "prd_wizard", "ref": "PRD.md", "n": 1.50},
	  "repo_targets": [{"id": "github:acme/shop", "provider": "github", "repo_full_name": "acme/shop"}],
	  "tasks": [{"id": "TASK-001", "phase": "1", "category": "infra", "priority": "high", "status": "pending", "description": "Set up"}]}`
	if _, err := st.Import(ctx, mustParse(t, doc), queue.ImportOptions{}); err != nil {
		t.Fatalf("import: %v", err)
	}
	out := exportBytes(t, st, "py")
	p, err := plan.Parse(out)
	if err != nil {
		t.Fatalf("parse export: %v\n%s", err, out)
	}
	var origin map[string]any
	var targets []map[string]any
	if err := json.Unmarshal(p.Origin, &origin); err != nil || origin["system"] != "prd_wizard" || origin["ref"] != "PRD.md" || origin["n"] != 1.5 {
		t.Errorf("exported origin %s (%v)", p.Origin, err)
	}
	if err := json.Unmarshal(p.RepoTargets, &targets); err != nil || len(targets) != 1 || targets[0]["repo_full_name"] != "acme/shop" {
		t.Errorf("exported repo_targets %s (%v)", p.RepoTargets, err)
	}
	if again := exportBytes(t, st, "py"); !bytes.Equal(out, again) {
		t.Errorf("export is not byte-stable:\n%s\n---\n%s", out, again)
	}
	if _, err := st.Import(ctx, mustParse(t, shopPlan), queue.ImportOptions{}); err != nil {
		t.Fatalf("import: %v", err)
	}
	if out := exportBytes(t, st, "shop-auth"); bytes.Contains(out, []byte(`"origin"`)) || bytes.Contains(out, []byte(`"repo_targets"`)) {
		t.Errorf("a plan without an origin exports one:\n%s", out)
	}
}

func exportBytes(t testing.TB, st *queue.Store, id string) []byte {
	t.Helper()
	p, err := st.Export(context.Background(), id)
	if err != nil {
		t.Fatalf("export %s: %v", id, err)
	}
	b, err := plan.Encode(p)
	if err != nil {
		t.Fatalf("encode %s: %v", id, err)
	}
	return b
}

func TestTaskIDsAreScopedToTheirPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := newStore(t)
	for _, id := range []string{"p1", "p2"} {
		p := &plan.Plan{ID: id, Name: id, Tasks: []plan.Task{goodTask("T-001")}}
		res, err := st.Import(ctx, p, queue.ImportOptions{})
		if err != nil || res.TasksCreated != 1 {
			t.Fatalf("import %s = %+v, %v; want its own T-001", id, res, err)
		}
	}
}

func TestImportAddsOnlyNewTasksToAnExistingPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	p := &plan.Plan{ID: "grow", Name: "grow", Tasks: []plan.Task{goodTask("A")}}
	if _, err := st.Import(ctx, p, queue.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	p.Tasks = append(p.Tasks, goodTask("B", "A"))
	res, err := st.Import(ctx, p, queue.ImportOptions{})
	if err != nil || res.PlanCreated || res.TasksCreated != 1 {
		t.Fatalf("second import = %+v, %v; want exactly B added", res, err)
	}
	if got := countEvents(t, pool, "grow", queue.EventTaskCreated); got != 2 {
		t.Fatalf("task.created = %d, want 2", got)
	}
	tasks, err := st.Tasks(ctx, "grow")
	if err != nil || len(tasks) != 2 || tasks[1].ID != "B" {
		t.Fatalf("tasks = %+v, %v", tasks, err)
	}
}

func TestInvalidPlanWritesNothing(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	bad := []*plan.Plan{
		{ID: "cyc", Name: "cyc", Tasks: []plan.Task{goodTask("A", "B"), goodTask("B", "A")}},
		{ID: "dep", Name: "dep", Tasks: []plan.Task{goodTask("A", "missing")}},
		{ID: "bad id", Name: "x", Tasks: []plan.Task{goodTask("A")}},
		{ID: "dup", Name: "dup", Tasks: []plan.Task{goodTask("A"), goodTask("A")}},
	}
	for _, p := range bad {
		if _, err := st.Import(ctx, p, queue.ImportOptions{}); err == nil {
			t.Errorf("import of invalid plan %q succeeded", p.ID)
		} else if _, ok := errors.AsType[*plan.ValidationError](err); !ok {
			t.Errorf("import of %q: error %v is not a validation error", p.ID, err)
		}
		if _, err := st.Apply(ctx, p, true, queue.ImportOptions{}); err == nil {
			t.Errorf("apply of invalid plan %q succeeded", p.ID)
		}
	}
	var plans, events int
	if err := pool.QueryRow(ctx, `SELECT (SELECT count(*) FROM plans), (SELECT count(*) FROM events)`).Scan(&plans, &events); err != nil {
		t.Fatal(err)
	}
	if plans != 0 || events != 0 {
		t.Fatalf("invalid imports wrote %d plans and %d events", plans, events)
	}
}

func TestApplyStrictSkipsRejectedTasksOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	p := mustParse(t, shopPlan)

	res, err := st.Apply(ctx, p, false, queue.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rejected != 1 || res.Skipped != 0 {
		t.Fatalf("non-strict apply = %+v, want 1 rejected, 0 skipped", res)
	}
	res, err = st.Apply(ctx, p, true, queue.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rejected != 1 || res.Skipped != 1 {
		t.Fatalf("strict apply = %+v, want the rejected task skipped", res)
	}
	task, err := st.GetTask(ctx, "shop-auth", "ns:sub/3")
	if err != nil || task.Status != plan.StatusSkipped || task.Gate.Decision != plan.DecisionReject {
		t.Fatalf("rejected task = %+v, %v; want SKIPPED with a REJECT verdict", task, err)
	}
	var detail json.RawMessage
	if err := pool.QueryRow(ctx, `SELECT detail FROM events WHERE type = 'task.skipped' AND task_id = 'ns:sub/3'`).Scan(&detail); err != nil {
		t.Fatalf("task.skipped event: %v", err)
	}
	if !bytes.Contains(detail, []byte("description_too_short")) {
		t.Fatalf("task.skipped detail %s does not carry the gate's reasons", detail)
	}
	if _, err := st.Apply(ctx, p, true, queue.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := countEvents(t, pool, "shop-auth", queue.EventTaskSkipped); got != 1 {
		t.Fatalf("task.skipped events after two strict applies = %d, want 1", got)
	}
	if got := countEvents(t, pool, "shop-auth", queue.EventPlanApplied); got != 3 {
		t.Fatalf("plan.applied events = %d, want one per apply (3)", got)
	}
	pi, err := st.GetPlan(ctx, "shop-auth")
	if err != nil || !pi.Strict {
		t.Fatalf("plan after strict apply = %+v, %v; want strict", pi, err)
	}
}

func TestResetSoftAndHard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, pool := newStore(t)
	if _, err := st.Import(ctx, mustParse(t, shopPlan), queue.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	res, err := st.ResetPlan(ctx, "shop-auth", queue.ResetOptions{})
	if err != nil || res.Reset != 1 {
		t.Fatalf("soft reset = %+v, %v; want the one DONE task reset", res, err)
	}
	task, err := st.GetTask(ctx, "shop-auth", "AUTH-2")
	if err != nil || task.Status != plan.StatusPending {
		t.Fatalf("AUTH-2 after reset = %s, %v", task.Status, err)
	}
	if got := countEvents(t, pool, "shop-auth", queue.EventReset); got != 1 {
		t.Fatalf("RESET events = %d, want 1", got)
	}
	before := countEvents(t, pool, "shop-auth", "")
	res, err = st.ResetPlan(ctx, "shop-auth", queue.ResetOptions{Hard: true})
	if err != nil || res.Deleted != 3 {
		t.Fatalf("hard reset = %+v, %v", res, err)
	}
	if _, err := st.GetPlan(ctx, "shop-auth"); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("plan after hard reset: %v, want not found", err)
	}
	if after := countEvents(t, pool, "shop-auth", ""); after != before+1 {
		t.Fatalf("events after hard reset = %d, want the %d kept plus plan.deleted", after, before)
	}
	if got := countEvents(t, pool, "shop-auth", queue.EventPlanDeleted); got != 1 {
		t.Fatalf("plan.deleted events = %d", got)
	}
	if _, err := st.ResetPlan(ctx, "nope", queue.ResetOptions{}); !errors.Is(err, queue.ErrNotFound) {
		t.Fatalf("reset of unknown plan: %v, want not found", err)
	}
}

func TestListPlansPaginates(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := newStore(t)
	for i := range 5 {
		if _, err := st.CreatePlan(ctx, fmt.Sprintf("p%d", i), "plan", nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.CreatePlan(ctx, "p0", "again", nil); !errors.Is(err, queue.ErrConflict) {
		t.Fatalf("create of an existing plan: %v, want conflict", err)
	}
	var ids []string
	page := queue.PlanPage{Limit: 2}
	for {
		plans, next, err := st.ListPlans(ctx, page)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range plans {
			ids = append(ids, p.ID)
		}
		if next == "" {
			break
		}
		page.After = next
	}
	if fmt.Sprint(ids) != "[p0 p1 p2 p3 p4]" {
		t.Fatalf("paged ids = %v", ids)
	}
}

func BenchmarkImport10k(b *testing.B) {
	ctx := context.Background()
	tasks := make([]plan.Task, 10_000)
	for i := range tasks {
		var deps []string
		if i > 0 && i%10 != 0 {
			deps = []string{fmt.Sprintf("T-%05d", i-1)}
		}
		tasks[i] = goodTask(fmt.Sprintf("T-%05d", i), deps...)
	}
	for i := 0; b.Loop(); i++ {
		b.StopTimer()
		st, _ := newStore(b)
		p := &plan.Plan{ID: fmt.Sprintf("big-%d", i), Name: "big", Tasks: tasks}
		b.StartTimer()
		res, err := st.Import(ctx, p, queue.ImportOptions{})
		if err != nil || res.TasksCreated != len(tasks) {
			b.Fatalf("import = %+v, %v", res, err)
		}
	}
}
