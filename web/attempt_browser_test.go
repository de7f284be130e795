package web_test

import (
	"context"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/whilly-go/whilly/control/client"
)

// In Chromium: the attempt page shows a running attempt's log, grows it live as the
// worker appends (no reload), runs none of the markup the agent printed, and says when
// the attempt has ended.
func TestBrowserAttemptLogStreamsAndNothingInItRuns(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importPlan(twoTaskPlan)
	w := e.worker()
	c := claim(t, w, "shop")
	ctx := context.Background()
	if _, err := w.Start(ctx, "shop", c.Task.ID, client.LeaseRequest{LeaseID: c.Lease.ID}); err != nil {
		t.Fatal(err)
	}
	first := `<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>` + "\x1b]0;title\x07\n"
	res, err := w.AppendLog(ctx, "shop", c.Task.ID, 1, client.LogChunkRequest{LeaseID: c.Lease.ID, Text: first})
	if err != nil {
		t.Fatal(err)
	}
	tb := tab(t, 30*time.Second)
	signInAt(t, tb, e.url+"/plans/shop/tasks/"+c.Task.ID+"/attempts/1", e.read)
	run(t, tb, chromedp.WaitVisible(chromedp.CSS(`#log`)))
	poll(t, tb, `window.whillyLog && window.whillyLog.reads > 0`, 5*time.Second) // the feed is waiting
	eval[bool](t, tb, `window.notReloaded = true`)

	second := `second <b onmouseover="window.pwned=3">bold</b>` + "\n"
	start := time.Now()
	if _, err := w.AppendLog(ctx, "shop", c.Task.ID, 1, client.LogChunkRequest{LeaseID: c.Lease.ID, Offset: res.NextOffset, Text: second}); err != nil {
		t.Fatal(err)
	}
	poll(t, tb, `document.getElementById("log").textContent.includes("second <b onmouseover")`, 2*time.Second)
	took := time.Since(start)
	if !eval[bool](t, tb, `window.notReloaded === true`) {
		t.Fatal("the page reloaded")
	}
	if got := eval[string](t, tb, `document.getElementById("log").textContent`); got != first+second {
		t.Errorf("the log reads %q, want %q", got, first+second)
	}
	if n := eval[int](t, tb, `document.querySelectorAll("#log *").length`); n != 0 {
		t.Errorf("the agent's text became %d elements", n)
	}
	if eval[bool](t, tb, `window.pwned !== undefined`) {
		t.Error("the agent's markup ran")
	}
	complete(t, w, c, 0)
	poll(t, tb, `document.getElementById("log-state").textContent.startsWith("ended")`, 5*time.Second)
	t.Logf("appended chunk shown on the open page %s after the append", took.Round(time.Millisecond))
}
