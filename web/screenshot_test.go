package web_test

import (
	"context"
	"flag"
	"os"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

var screenshot = flag.String("screenshot", "", "write a screenshot of the demo plan's page to this PNG file (make screenshot)")

// TestScreenshot takes the README's picture of the plan page (make screenshot): the demo
// plan applied strictly, two tasks done, one running and one failed once, in Chromium.
func TestScreenshot(t *testing.T) {
	if *screenshot == "" {
		t.Skip("run with -screenshot FILE (make screenshot) to write the picture")
	}
	e := newEnv(t)
	ctx := context.Background()
	data, err := os.ReadFile("../examples/demo/tasks.json")
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.store.Apply(ctx, p, true, queue.ImportOptions{By: "local:demo"}); err != nil {
		t.Fatal(err)
	}
	w := e.worker()
	next := func(want string) *client.Claim {
		c := claim(t, w, "demo")
		if c.Task.ID != want {
			t.Fatalf("claimed %s, want %s", c.Task.ID, want)
		}
		return c
	}
	complete(t, w, next("AUTH-1"), 21_500)
	c := next("AUTH-2") // fails once, with a TRIZ finding, then runs again
	if _, err := w.Fail(ctx, "demo", c.Task.ID, client.FailRequest{LeaseID: c.Lease.ID, CostUSD: 12_000, Reason: "tests_failed",
		Output: "--- FAIL: TestAccountLockout (0.02s)\n    lockout_test.go:41: 11th failed login: got 401, want 423"}); err != nil {
		t.Fatal(err)
	}
	if err := e.store.SetTrizFinding(ctx, "demo", c.Task.ID, "Technical contradiction: locking fast vs. letting a real user in. Principle 15 (dynamics): lock for a window that grows with the failures.", "triz.contradiction", nil); err != nil {
		t.Fatal(err)
	}
	complete(t, w, next("METRICS-1"), 18_000)
	tab := tab(t, 60*time.Second)
	run(t, tab, chromedp.EmulateViewport(1180, 780))
	signInAt(t, tab, e.url+"/plans/demo", e.admin)
	// The failed attempt waits out its backoff: run AUTH-2 again at once for the picture.
	if _, err := e.store.Pool().Exec(ctx, `UPDATE tasks SET not_before = NULL WHERE plan_id = 'demo' AND id = 'AUTH-2'`); err != nil {
		t.Fatal(err)
	}
	c = next("AUTH-2")
	if _, err := w.Start(ctx, "demo", c.Task.ID, client.LeaseRequest{LeaseID: c.Lease.ID}); err != nil {
		t.Fatal(err)
	}
	poll(t, tab, `document.querySelector("#task-AUTH-2 .state").textContent === "IN_PROGRESS"`, 5*time.Second)
	time.Sleep(1500 * time.Millisecond) // the row's highlight fades
	png, err := chromedp.Run(tab, chromedp.CaptureScreenshot())
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(*screenshot, png, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("wrote %s (%d bytes)", *screenshot, len(png))
}
