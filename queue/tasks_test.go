package queue_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/queue"
)

func oneTask(id string, deps ...string) []byte {
	d := `[]`
	if len(deps) > 0 {
		d = `["` + strings.Join(deps, `","`) + `"]`
	}
	return fmt.Appendf(nil, `{"id": %q, "priority": "high", "description": "Do the work of task %s thoroughly and well",
		"dependencies": %s, "acceptance_criteria": ["it works"], "test_steps": ["go test ./..."], "key_files": ["x.go"]}`, id, id, d)
}

// TestAddTaskRacesARemoval: a task removed while AddTask is between reading the plan and
// writing is neither brought back nor depended on. The plan's row is held locked while
// the tasks are deleted, so that AddTask has read the plan and waits for the lock.
func TestAddTaskRacesARemoval(t *testing.T) {
	t.Parallel()
	st, pool := newStore(t)
	ctx := context.Background()
	doc := `{"plan_id": "race", "project": "race", "tasks": [` + string(oneTask("A")) + `,` + string(oneTask("B")) + `]}`
	if _, err := st.Import(ctx, mustParse(t, doc), queue.ImportOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		add, remove string
		deps        []string
		conflict    bool
	}{
		{add: "C", remove: "A", deps: []string{"A"}, conflict: true}, // its dependency is gone
		{add: "D", remove: "B"}, // another task is gone: it stays gone
	} {
		holder, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := holder.Exec(ctx, `SELECT 1 FROM plans WHERE id = 'race' FOR UPDATE`); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := st.AddTask(ctx, "race", oneTask(tc.add, tc.deps...), "test")
			done <- err
		}()
		// Wait until AddTask waits for the plan's lock (it has read the plan by then).
		deadline := time.Now().Add(10 * time.Second)
		for {
			var waiting int
			if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks WHERE NOT granted`).Scan(&waiting); err != nil {
				t.Fatal(err)
			}
			if waiting > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatal("AddTask never waited for the plan's lock")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if _, err := holder.Exec(ctx, `DELETE FROM tasks WHERE plan_id = 'race' AND id = $1`, tc.remove); err != nil {
			t.Fatal(err)
		}
		if err := holder.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		err = <-done
		if tc.conflict != errors.Is(err, queue.ErrConflict) {
			t.Errorf("add %s while %s is removed: %v, conflict %v", tc.add, tc.remove, err, tc.conflict)
		}
		if _, err := st.GetTask(ctx, "race", tc.remove); !errors.Is(err, queue.ErrNotFound) {
			t.Errorf("the removed task %s is back: %v", tc.remove, err)
		}
		_, err = st.GetTask(ctx, "race", tc.add)
		if tc.conflict != errors.Is(err, queue.ErrNotFound) {
			t.Errorf("task %s after the add: %v", tc.add, err)
		}
	}
}
