package web_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
)

// stormStats is what the page measured while the events arrived.
type stormStats struct {
	Events    int     `json:"events"`    // events the page received
	Fetches   int     `json:"fetches"`   // fragment requests it made
	MaxLag    float64 `json:"maxLag"`    // worst delay of a 50 ms timer, ms
	LongTasks int     `json:"longTasks"` // main-thread tasks over 50 ms
	LongMax   float64 `json:"longMax"`   // the longest, ms
	Clicks    int     `json:"clicks"`    // clicks measured by the Event Timing API
	ClickMax  float64 `json:"clickMax"`  // worst click to next paint, ms
}

// TestBrowserPageStaysResponsiveAt50EventsPerSecond opens the page of a 1,000-task plan
// and sends it 50 events a second for 4 s (a TRIZ finding on a different task each
// time), while the test clicks the page twice a second. The page measures itself: its
// timer lag, main-thread long tasks and each click's time to the next paint. The rows
// must keep up: the last task's finding is on the page within 2 s of the last event.
func TestBrowserPageStaysResponsiveAt50EventsPerSecond(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.importPlan(bigPlan(t, "big", 1000))
	ctx := tab(t, 60*time.Second)
	signInAt(t, ctx, e.url+"/plans/big", e.read)
	run(t, ctx, chromedp.WaitVisible(chromedp.CSS(`#task-T-0999`)))
	poll(t, ctx, `document.getElementById("live").classList.contains("on")`, 5*time.Second)
	eval[bool](t, ctx, `(() => {
		const m = window.storm = {maxLag: 0, longTasks: 0, longMax: 0, clicks: 0, clickMax: 0};
		new PerformanceObserver(l => { for (const e of l.getEntries()) { m.longTasks++; m.longMax = Math.max(m.longMax, e.duration); } }).observe({type: "longtask"});
		new PerformanceObserver(l => { for (const e of l.getEntries()) if (e.name === "click") { m.clicks++; m.clickMax = Math.max(m.clickMax, e.duration); } }).observe({type: "event", durationThreshold: 16, buffered: false});
		let last = performance.now();
		setInterval(() => { const now = performance.now(); m.maxLag = Math.max(m.maxLag, now - last - 50); last = now; }, 50);
		return true;
	})()`)

	const rate, seconds = 50, 4
	n := rate * seconds
	done := make(chan error, 1)
	go func() {
		// One goroutine per event, on the tick: a slow write does not slow the rate.
		tick := time.NewTicker(time.Second / rate)
		defer tick.Stop()
		var wg sync.WaitGroup
		errs := make(chan error, n)
		for i := range n {
			<-tick.C
			wg.Go(func() {
				id := fmt.Sprintf("T-%04d", (i*37)%1000)
				errs <- e.store.SetTrizFinding(context.Background(), "big", id, fmt.Sprintf("finding %d", i), "triz.contradiction", nil)
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				done <- err
				return
			}
		}
		done <- nil
	}()
	clicks := time.NewTicker(500 * time.Millisecond)
	defer clicks.Stop()
	start := time.Now()
	for emitting := true; emitting; {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
			emitting = false
		case <-clicks.C:
			run(t, ctx, chromedp.Click(chromedp.CSS(`main > h2`))) // a heading live updates never replace
		}
	}
	sent := time.Since(start)
	last := fmt.Sprintf("T-%04d", ((n-1)*37)%1000)
	poll(t, ctx, fmt.Sprintf(`(document.querySelector("#task-%s") || {}).textContent.includes("finding %d")`, last, n-1), 2*time.Second)
	behind := time.Since(start) - sent

	st := eval[stormStats](t, ctx, `({events: window.whillyLive.events, fetches: window.whillyLive.fetches, maxLag: storm.maxLag,
		longTasks: storm.longTasks, longMax: storm.longMax, clicks: storm.clicks, clickMax: storm.clickMax})`)
	t.Logf("%d events in %s (%.0f/s) on a 1,000-task page: received %d, %d fragment fetches; worst timer lag %.0f ms; %d long tasks (longest %.0f ms); %d clicks over 16 ms, worst click-to-paint %.0f ms; last row updated %s after the last event",
		n, sent.Round(time.Millisecond), float64(n)/sent.Seconds(), st.Events, st.Fetches, st.MaxLag, st.LongTasks, st.LongMax, st.Clicks, st.ClickMax, behind.Round(time.Millisecond))
	if st.Events < n {
		t.Errorf("the page received %d of %d events", st.Events, n)
	}
	if st.Fetches > n/4 {
		t.Errorf("%d fragment fetches for %d events: updates are not coalesced", st.Fetches, n)
	}
}
