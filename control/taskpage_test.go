package control_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
)

// TestTaskListPages: GET /v1/plans/{plan}/tasks answers a page at a time (default 1000),
// honours status and limit, refuses bad ones with 400, and the typed client's ListTasks
// reads every page.
func TestTaskListPages(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	ctx := context.Background()
	const n = 5123 // more than one page of ListTasks (plan.MaxTaskPage)
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("T%05d", n-i) // file order is not id order
	}
	e.importPlan(planDoc("big", ids...))
	rd := e.client(e.read)

	// Without parameters: the first 1000 and a cursor, not the whole plan.
	code, body := e.do("GET", "/v1/plans/big/tasks", e.read, nil)
	var first client.TaskList
	if code != 200 || json.Unmarshal([]byte(body), &first) != nil {
		t.Fatalf("list: %d %.200s", code, body)
	}
	if len(first.Tasks) != 1000 || first.NextCursor == "" || first.Tasks[0].ID != ids[0] {
		t.Fatalf("first page: %d tasks, next %q", len(first.Tasks), first.NextCursor)
	}

	// Small pages walked by hand add up to the plan in file order, each task once.
	var walked []string
	q := client.TaskQuery{Limit: 397}
	for pages := 0; ; pages++ {
		if pages > n {
			t.Fatal("the cursor never ends")
		}
		page, err := rd.ListTaskPage(ctx, "big", q)
		if err != nil {
			t.Fatal(err)
		}
		if len(page.Tasks) > 397 {
			t.Fatalf("a page of limit 397 holds %d", len(page.Tasks))
		}
		for _, tk := range page.Tasks {
			walked = append(walked, tk.ID)
		}
		if page.NextCursor == "" {
			break
		}
		q.After = page.NextCursor
	}
	if strings.Join(walked, ",") != strings.Join(ids, ",") {
		t.Fatalf("pages of 397 gave %d tasks, not the plan in file order", len(walked))
	}

	// The client reads every page (more than one of its own size).
	all, err := rd.ListTasks(ctx, "big")
	if err != nil || len(all) != n || all[n-1].ID != ids[n-1] {
		t.Fatalf("ListTasks: %d tasks, %v", len(all), err)
	}

	// status filters; it is read case-insensitively.
	w, _ := e.worker()
	claim, err := w.Claim(ctx, client.ClaimRequest{PlanID: "big"})
	if err != nil || claim == nil {
		t.Fatalf("claim: %v", err)
	}
	claimed, err := rd.ListTaskPage(ctx, "big", client.TaskQuery{Status: plan.StatusClaimed})
	if err != nil || len(claimed.Tasks) != 1 || claimed.Tasks[0].ID != claim.Task.ID || claimed.NextCursor != "" {
		t.Fatalf("status=CLAIMED: %+v, %v", claimed, err)
	}
	code, body = e.do("GET", "/v1/plans/big/tasks?status=pending&limit=5000", e.read, nil)
	var pending client.TaskList
	if code != 200 || json.Unmarshal([]byte(body), &pending) != nil || len(pending.Tasks) != plan.MaxTaskPage || pending.NextCursor == "" {
		t.Fatalf("status=pending&limit=5000: %d, %d tasks, next %q", code, len(pending.Tasks), pending.NextCursor)
	}
	for _, tk := range pending.Tasks {
		if tk.Status != plan.StatusPending {
			t.Fatalf("status=pending answered a %s task", tk.Status)
		}
	}

	// Bad parameters: 400 naming the parameter.
	for q, want := range map[string]string{
		"status=BOGUS":                     "status",
		"status=":                          "",
		"limit=0":                          "limit",
		"limit=5001":                       "limit",
		"limit=ten":                        "limit",
		"limit=-1":                         "limit",
		"after=-1":                         "after",
		"after=abc":                        "after",
		"after=1e3":                        "after",
		"after=" + strings.Repeat("9", 40): "after",
	} {
		code, body := e.do("GET", "/v1/plans/big/tasks?"+q, e.read, nil)
		if want == "" {
			if code != 200 {
				t.Errorf("%s: %d %.200s", q, code, body)
			}
			continue
		}
		if code != 400 || !strings.Contains(body, "Parameter "+want) {
			t.Errorf("%s: %d %.200s; want 400 naming %s", q, code, body, want)
		}
	}
	if code, _ := e.do("GET", "/v1/plans/nope/tasks?limit=3", e.read, nil); code != 404 {
		t.Errorf("unknown plan: %d", code)
	}
}

// BenchmarkTaskListPages reads every task of a 100,000-task plan a page at a time: the
// typed client's ListTasks (the default page, 1000) and pages of the largest limit (5000).
func BenchmarkTaskListPages(b *testing.B) {
	e := newEnv(b, envOptions{})
	const n = 100_000
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("T%06d", i)
	}
	e.importPlan(planDoc("big", ids...))
	rd := e.client(e.read)
	ctx := context.Background()
	for _, limit := range []int{1000, plan.MaxTaskPage} {
		b.Run(fmt.Sprintf("limit=%d", limit), func(b *testing.B) {
			for b.Loop() {
				got, q := 0, client.TaskQuery{Limit: limit}
				for {
					page, err := rd.ListTaskPage(ctx, "big", q)
					if err != nil {
						b.Fatal(err)
					}
					got += len(page.Tasks)
					if page.NextCursor == "" {
						break
					}
					q.After = page.NextCursor
				}
				if got != n {
					b.Fatalf("%d tasks", got)
				}
			}
		})
	}
}
