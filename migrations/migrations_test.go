package migrations_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/migrations"
	"github.com/whilly-go/whilly/testkit"
)

// schemaDump describes everything in schema public that a migration can create, one
// line per object, in a stable order.
func schemaDump(ctx context.Context, t *testing.T, pool *pgxpool.Pool) []string {
	t.Helper()
	queries := []string{
		`SELECT 'relation ' || c.relname || ' kind=' || c.relkind::text || ' persistence=' || c.relpersistence::text
		   FROM pg_class c WHERE c.relnamespace = 'public'::regnamespace`,
		`SELECT 'column ' || c.relname || '.' || a.attname || ' ' || format_type(a.atttypid, a.atttypmod)
		        || CASE WHEN a.attnotnull THEN ' not null' ELSE '' END
		        || coalesce(' default ' || pg_get_expr(d.adbin, d.adrelid), '')
		        || CASE WHEN a.attgenerated <> '' THEN ' generated' ELSE '' END
		        || ' #' || a.attnum
		   FROM pg_attribute a
		   JOIN pg_class c ON c.oid = a.attrelid
		   LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		  WHERE c.relnamespace = 'public'::regnamespace AND a.attnum > 0 AND NOT a.attisdropped`,
		`SELECT 'index ' || indexname || ': ' || indexdef FROM pg_indexes WHERE schemaname = 'public'`,
		`SELECT 'constraint ' || conrelid::regclass::text || '.' || conname || ': ' || pg_get_constraintdef(oid)
		   FROM pg_constraint WHERE connamespace = 'public'::regnamespace`,
		`SELECT 'trigger ' || tgrelid::regclass::text || '.' || tgname || ': ' || pg_get_triggerdef(oid)
		   FROM pg_trigger
		  WHERE NOT tgisinternal AND tgrelid IN (SELECT oid FROM pg_class WHERE relnamespace = 'public'::regnamespace)`,
		`SELECT 'function ' || p.oid::regprocedure::text || ' returns ' || format_type(p.prorettype, NULL)
		        || ' md5=' || md5(p.prosrc)
		   FROM pg_proc p WHERE p.pronamespace = 'public'::regnamespace`,
		`SELECT 'type ' || t.typname || ' ' || t.typtype::text
		        || coalesce(' (' || (SELECT string_agg(e.enumlabel, ',' ORDER BY e.enumsortorder)
		                               FROM pg_enum e WHERE e.enumtypid = t.oid) || ')', '')
		   FROM pg_type t
		  WHERE t.typnamespace = 'public'::regnamespace AND t.typtype IN ('e', 'd', 'c')
		    AND NOT EXISTS (SELECT FROM pg_class c WHERE c.reltype = t.oid)`,
		`SELECT 'sequence ' || sequencename || ' ' || data_type || ' start=' || start_value || ' by=' || increment_by
		   FROM pg_sequences WHERE schemaname = 'public'`,
	}
	var lines []string
	for _, q := range queries {
		rows, err := pool.Query(ctx, q+" ORDER BY 1")
		if err != nil {
			t.Fatalf("dump schema: %v\n%s", err, q)
		}
		for rows.Next() {
			var s string
			if err := rows.Scan(&s); err != nil {
				t.Fatal(err)
			}
			lines = append(lines, s)
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
	}
	return lines
}

// diffLines lists the lines only in a (-) and only in b (+); both are sorted dumps.
func diffLines(a, b []string) string {
	var out strings.Builder
	inA, inB := map[string]bool{}, map[string]bool{}
	for _, l := range a {
		inA[l] = true
	}
	for _, l := range b {
		inB[l] = true
		if !inA[l] {
			out.WriteString("+ " + l + "\n")
		}
	}
	for _, l := range a {
		if !inB[l] {
			out.WriteString("- " + l + "\n")
		}
	}
	if out.Len() == 0 && len(a) != len(b) {
		return fmt.Sprintf("same lines, different counts: %d vs %d", len(a), len(b))
	}
	return out.String()
}

func mustUp(ctx context.Context, t *testing.T, pool *pgxpool.Pool) migrations.Result {
	t.Helper()
	res, err := migrations.Up(ctx, pool)
	if err != nil {
		t.Fatalf("Up: %v", err)
	}
	return res
}

func TestUpDownUpSameSchema(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testkit.DB(t) // migrated by migrations.Up when the template was made
	migrated := schemaDump(ctx, t, pool)
	for _, want := range []string{"relation events kind=r", "relation river_job kind=r", "relation whilly_schema_migrations kind=r",
		"trigger events.events_notify", "trigger events.events_append_only_truncate"} {
		if !strings.Contains(strings.Join(migrated, "\n"), want) {
			t.Fatalf("migrated schema lacks %q:\n%s", want, strings.Join(migrated, "\n"))
		}
	}

	res, err := migrations.Down(ctx, pool, 0)
	if err != nil {
		t.Fatalf("Down all: %v", err)
	}
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	if got := countLine(res, migrations.LineWhilly); got != len(all) {
		t.Errorf("Down reverted %d whilly migrations, want %d", got, len(all))
	}
	if countLine(res, migrations.LineRiver) == 0 {
		t.Error("Down all left River's migrations in place")
	}
	if left := schemaDump(ctx, t, pool); len(left) != 0 {
		t.Errorf("Down all left objects behind:\n%s", strings.Join(left, "\n"))
	}
	// Down on an empty database is a no-op, not an error.
	if res, err := migrations.Down(ctx, pool, 0); err != nil || len(res.Steps) != 0 {
		t.Errorf("second Down all = %+v, %v", res, err)
	}

	res = mustUp(ctx, t, pool)
	if countLine(res, migrations.LineWhilly) != len(all) || countLine(res, migrations.LineRiver) == 0 {
		t.Errorf("Up after Down applied %+v", res.Steps)
	}
	if diff := diffLines(migrated, schemaDump(ctx, t, pool)); diff != "" {
		t.Errorf("schema after up-down-up differs (-first +second):\n%s", diff)
	}
}

func countLine(res migrations.Result, line string) int {
	n := 0
	for _, s := range res.Steps {
		if s.Line == line {
			n++
		}
	}
	return n
}

func TestUpIsIdempotent(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testkit.DB(t)
	before := schemaDump(ctx, t, pool)
	for range 2 {
		if res := mustUp(ctx, t, pool); len(res.Steps) != 0 {
			t.Errorf("Up on a migrated database applied %+v", res.Steps)
		}
	}
	if diff := diffLines(before, schemaDump(ctx, t, pool)); diff != "" {
		t.Errorf("schema changed (-before +after):\n%s", diff)
	}
}

func TestConcurrentUp(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testkit.DB(t)
	want := schemaDump(ctx, t, pool)
	if _, err := migrations.Down(ctx, pool, 0); err != nil {
		t.Fatalf("Down all: %v", err)
	}

	const n = 8
	results := make([]migrations.Result, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			// Each caller has its own small pool, like separate `whilly serve` processes.
			p, err := pgxpool.New(ctx, pool.Config().ConnString())
			if err != nil {
				errs[i] = err
				return
			}
			defer p.Close()
			results[i], errs[i] = migrations.Up(ctx, p)
		})
	}
	// And a few more on one shared pool, as one process calling Up from many goroutines.
	shared := make([]error, n)
	sharedResults := make([]migrations.Result, n)
	for i := range n {
		wg.Go(func() { sharedResults[i], shared[i] = migrations.Up(ctx, pool) })
	}
	wg.Wait()
	applied := 0
	for i := range n {
		if errs[i] != nil {
			t.Errorf("Up %d: %v", i, errs[i])
		}
		if shared[i] != nil {
			t.Errorf("Up %d on the shared pool: %v", i, shared[i])
		}
		applied += len(results[i].Steps) + len(sharedResults[i].Steps)
	}
	if diff := diffLines(want, schemaDump(ctx, t, pool)); diff != "" {
		t.Errorf("schema after concurrent Up differs (-want +got):\n%s", diff)
	}
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	// The lock makes exactly one caller apply each migration.
	if riverVersions := countRiver(ctx, t, pool); applied != len(all)+riverVersions {
		t.Errorf("the Up calls applied %d steps together, want %d whilly + %d River", applied, len(all), riverVersions)
	}
}

func countRiver(ctx context.Context, t *testing.T, pool *pgxpool.Pool) int {
	t.Helper()
	states, err := migrations.Status(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, s := range states {
		if s.Line == migrations.LineRiver {
			n++
		}
	}
	return n
}

func TestDownSteps(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testkit.DB(t)
	all, err := migrations.All()
	if err != nil {
		t.Fatal(err)
	}
	last := all[len(all)-1]

	res, err := migrations.Down(ctx, pool, 1)
	if err != nil {
		t.Fatalf("Down 1: %v", err)
	}
	if len(res.Steps) != 1 || res.Steps[0].Line != migrations.LineWhilly || res.Steps[0].Version != last.Version {
		t.Fatalf("Down 1 = %+v, want only whilly %d", res.Steps, last.Version)
	}
	states, err := migrations.Status(ctx, pool)
	if err != nil {
		t.Fatalf("Status: %v", err)
	}
	riverApplied := 0
	for _, s := range states {
		switch {
		case s.Line == migrations.LineWhilly && s.Version == last.Version:
			if s.Applied || !s.AppliedAt.IsZero() {
				t.Errorf("reverted migration reported as %+v", s)
			}
		case s.Line == migrations.LineWhilly:
			if !s.Applied || s.AppliedAt.IsZero() {
				t.Errorf("migration reported as %+v, want applied", s)
			}
		case s.Line == migrations.LineRiver && s.Applied:
			riverApplied++
		}
	}
	if riverApplied == 0 {
		t.Error("Down 1 touched River's migrations")
	}
	if res := mustUp(ctx, t, pool); len(res.Steps) != 1 || res.Steps[0].Version != last.Version {
		t.Errorf("Up after Down 1 = %+v", res.Steps)
	}
}

func TestStatus(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testkit.DB(t)
	states, err := migrations.Status(ctx, pool)
	if err != nil {
		t.Fatal(err)
	}
	var whilly, river int
	for _, s := range states {
		if !s.Applied {
			t.Errorf("pending in a migrated database: %+v", s)
		}
		switch s.Line {
		case migrations.LineWhilly:
			whilly++
			if s.Version == 1 && s.Name != "init" {
				t.Errorf("migration 1 named %q", s.Name)
			}
			if time.Since(s.AppliedAt) > 24*time.Hour*365*10 {
				t.Errorf("applied_at = %v", s.AppliedAt)
			}
		case migrations.LineRiver:
			river++
		}
	}
	if whilly == 0 || river == 0 {
		t.Errorf("Status listed %d whilly and %d River migrations", whilly, river)
	}

	if _, err := migrations.Down(ctx, pool, 0); err != nil {
		t.Fatal(err)
	}
	states, err = migrations.Status(ctx, pool)
	if err != nil {
		t.Fatalf("Status of an empty database: %v", err)
	}
	for _, s := range states {
		if s.Applied {
			t.Errorf("applied in an empty database: %+v", s)
		}
	}
}

func TestEventsAreAppendOnly(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testkit.DB(t)
	if _, err := pool.Exec(ctx, "INSERT INTO events (plan_id, type) VALUES ('p1', 'plan.created')"); err != nil {
		t.Fatalf("insert event: %v", err)
	}
	for _, sql := range []string{
		"UPDATE events SET type = 'forged'",
		"DELETE FROM events",
		"TRUNCATE events",
	} {
		_, err := pool.Exec(ctx, sql)
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != "42501" || !strings.Contains(pgErr.Message, "append-only") {
			t.Errorf("%s: err = %v, want append-only refusal (42501)", sql, err)
		}
	}
	var n int
	if err := pool.QueryRow(ctx, "SELECT count(*) FROM events WHERE type = 'plan.created'").Scan(&n); err != nil || n != 1 {
		t.Errorf("events after the attempts: %d, %v", n, err)
	}
}

func TestEventInsertNotifies(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	pool := testkit.DB(t)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, "LISTEN whilly_events"); err != nil {
		t.Fatal(err)
	}

	var id int64
	err = pool.QueryRow(ctx, "INSERT INTO events (plan_id, task_id, type) VALUES ('p1', 't1', 'task.claimed') RETURNING id").Scan(&id)
	if err != nil {
		t.Fatalf("insert event: %v", err)
	}

	wctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := conn.Conn().WaitForNotification(wctx)
	if err != nil {
		t.Fatalf("wait for NOTIFY: %v", err)
	}
	if n.Channel != "whilly_events" {
		t.Errorf("channel = %q", n.Channel)
	}
	var payload struct {
		ID     int64  `json:"id"`
		PlanID string `json:"plan_id"`
		TaskID string `json:"task_id"`
		Type   string `json:"type"`
	}
	if err := json.Unmarshal([]byte(n.Payload), &payload); err != nil {
		t.Fatalf("payload %q: %v", n.Payload, err)
	}
	if want := fmt.Sprint(id, " p1 t1 task.claimed"); fmt.Sprint(payload.ID, " ", payload.PlanID, " ", payload.TaskID, " ", payload.Type) != want {
		t.Errorf("payload = %+v, want id/plan/task/type %s", payload, want)
	}
}
