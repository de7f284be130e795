package web_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/queue"
)

// runningAttempt claims and starts task A-1 of plan shop and appends text to its log.
func (e *env) runningAttempt(text string) (queue.Lease, int64) {
	e.t.Helper()
	ctx := context.Background()
	w, _, err := e.store.RegisterWorker(ctx, "test", nil)
	if err != nil {
		e.t.Fatal(err)
	}
	c, err := e.store.Claim(ctx, queue.ClaimRequest{WorkerID: w.ID, PlanID: "shop"})
	if err != nil || c == nil {
		e.t.Fatalf("claim: %v %v", c, err)
	}
	l := queue.Lease{PlanID: "shop", TaskID: c.Task.ID, LeaseID: c.Lease.ID, WorkerID: w.ID}
	if _, err := e.store.Start(ctx, l); err != nil {
		e.t.Fatal(err)
	}
	res, err := e.store.AppendAttemptLog(ctx, l, queue.LogAppend{Attempt: 1, Data: []byte(text)})
	if err != nil {
		e.t.Fatal(err)
	}
	return l, res.Next
}

// The attempt page shows the log as text: HTML and script the agent printed are escaped,
// never markup; the page follows a running attempt through its feed, which long-polls
// and wakes when the log grows, and says when the attempt has ended.
func TestAttemptPageShowsTheLogAsTextAndFollowsIt(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importPlan(twoTaskPlan)
	hostile := "<script>alert(1)</script><img src=x onerror=alert(2)>\x1b[31m\"quoted\" & 'single'\n"
	l, next := e.runningAttempt(hostile)
	b := e.browser()
	b.mustSignIn(e.read)

	page := b.get("/plans/shop/tasks/A-1/attempts/1")
	if page.status != http.StatusOK {
		t.Fatalf("attempt page: %d\n%s", page.status, page.body)
	}
	if strings.Contains(page.body, "<script>alert") || strings.Contains(page.body, "<img src=x") {
		t.Fatalf("the page holds the agent's markup unescaped:\n%s", page.body)
	}
	if !strings.Contains(page.body, "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;") ||
		!strings.Contains(page.body, `data-running="true"`) || !strings.Contains(page.body, `src="/static/attempt.js"`) {
		t.Fatalf("the page lacks the escaped log or its follower:\n%s", page.body)
	}

	// The feed waits for more, and gets it as soon as it is appended.
	type feed struct {
		Text       string `json:"text"`
		NextOffset int64  `json:"next_offset"`
		Running    bool   `json:"running"`
		TaskStatus string `json:"task_status"`
	}
	got := make(chan answer, 1)
	go func() { got <- b.get("/plans/shop/tasks/A-1/attempts/1/log?after=" + itoa(next) + "&wait=10") }()
	time.Sleep(300 * time.Millisecond) // the feed is waiting
	sent := time.Now()
	if _, err := e.store.AppendAttemptLog(context.Background(), l, queue.LogAppend{Attempt: 1, Offset: next, Data: []byte("more\n")}); err != nil {
		t.Fatal(err)
	}
	a := <-got
	var f feed
	if err := json.Unmarshal([]byte(a.body), &f); err != nil || a.status != 200 {
		t.Fatalf("feed: %d %s", a.status, a.body)
	}
	if f.Text != "more\n" || !f.Running || time.Since(sent) > 2*time.Second {
		t.Fatalf("feed = %+v after %v", f, time.Since(sent))
	}
	if _, err := e.store.Complete(context.Background(), l, queue.CompleteInput{}); err != nil {
		t.Fatal(err)
	}
	a = b.get("/plans/shop/tasks/A-1/attempts/1/log?after=" + itoa(f.NextOffset) + "&wait=10")
	if err := json.Unmarshal([]byte(a.body), &f); err != nil || f.Running || f.TaskStatus != "DONE" {
		t.Fatalf("feed after COMPLETE: %d %s", a.status, a.body)
	}
	if page := b.get("/plans/shop/tasks/A-1/attempts/1"); !strings.Contains(page.body, `data-running="false"`) || !strings.Contains(page.body, "more\n") {
		t.Errorf("the page of the ended attempt:\n%s", page.body)
	}
}

// Without a session the attempt page and its feed send to sign-in; a session whose token
// is scoped to another plan gets 404 for both, like an attempt that does not exist.
func TestAttemptPageNeedsASessionThatMayReadThePlan(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importPlan(twoTaskPlan)
	e.runningAttempt("secret output\n")
	anon := e.browser()
	for _, p := range []string{"/plans/shop/tasks/A-1/attempts/1", "/plans/shop/tasks/A-1/attempts/1/log"} {
		if a := anon.get(p); a.status != http.StatusSeeOther || !strings.HasPrefix(a.location, "/signin") {
			t.Errorf("GET %s without a session: %d to %q", p, a.status, a.location)
		}
	}
	other := e.browser()
	other.mustSignIn(e.mint(queue.TokenSpec{Owner: "other", Scopes: queue.Scopes{"plan:elsewhere"}}))
	reader := e.browser()
	reader.mustSignIn(e.read)
	for _, tc := range []struct {
		b    *browser
		path string
	}{
		{other, "/plans/shop/tasks/A-1/attempts/1"},
		{other, "/plans/shop/tasks/A-1/attempts/1/log"},
		{reader, "/plans/shop/tasks/A-1/attempts/2"},
		{reader, "/plans/shop/tasks/A-2/attempts/1"},
		{reader, "/plans/shop/tasks/A-1/attempts/x"},
	} {
		a := tc.b.get(tc.path)
		if a.status != http.StatusNotFound || strings.Contains(a.body, "secret output") {
			t.Errorf("GET %s: %d; want 404 without the log", tc.path, a.status)
		}
	}
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
