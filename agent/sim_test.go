package agent

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whilly-go/whilly/plan"
)

func simRequest(i int) Request {
	return Request{Prompt: "task prompt", Env: []string{fmt.Sprintf("WHILLY_TASK_ID=T-%d", i), "WHILLY_ATTEMPT=1"}}
}

func TestSimSuccess(t *testing.T) {
	t.Parallel()
	a, err := New(NameSim, Config{Sim: SimConfig{Cost: 25_000}})
	if err != nil {
		t.Fatal(err)
	}
	var log strings.Builder
	req := simRequest(1)
	req.Log = &log
	res, err := a.Run(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Succeeded() || res.Cost != 25_000 || !res.CostReported {
		t.Fatalf("result %+v", res)
	}
	if !strings.Contains(res.Text, "simulation") || !strings.Contains(res.Text, CompletionMarker) || !strings.Contains(log.String(), "simulation") {
		t.Errorf("text %q / log %q must say it is a simulation and carry the marker", res.Text, log.String())
	}
}

func simOutcomes(t *testing.T, cfg SimConfig, n int, reverse, concurrent bool) []bool {
	t.Helper()
	a, err := New(NameSim, Config{Sim: cfg})
	if err != nil {
		t.Fatal(err)
	}
	out := make([]bool, n)
	var wg sync.WaitGroup
	for k := range n {
		i := k
		if reverse {
			i = n - 1 - k
		}
		run := func() {
			res, err := a.Run(context.Background(), simRequest(i))
			if err != nil {
				t.Error(err)
			}
			if !res.Succeeded() && (res.Reason != ReasonAgentError || res.Cost != cfg.Cost || !res.IsError) {
				t.Errorf("failed run %d: %+v", i, res)
			}
			out[i] = res.Succeeded()
		}
		if concurrent {
			wg.Add(1)
			go func() { defer wg.Done(); run() }()
		} else {
			run()
		}
	}
	wg.Wait()
	return out
}

// The same seed gives the same outcome per request, whatever the order and concurrency;
// another seed gives another pattern; the share of failures follows FailRate.
func TestSimDeterminism(t *testing.T) {
	t.Parallel()
	const n = 2000
	cfg := SimConfig{FailRate: 0.3, Seed: 42, Cost: 10}
	a := simOutcomes(t, cfg, n, false, false)
	b := simOutcomes(t, cfg, n, true, true)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("request %d: outcome differs between runs with the same seed", i)
		}
	}
	cfg.Seed = 43
	c := simOutcomes(t, cfg, n, false, false)
	same, failures := 0, 0
	for i := range a {
		if a[i] == c[i] {
			same++
		}
		if !a[i] {
			failures++
		}
	}
	if same == n {
		t.Error("seed 43 gives exactly the outcomes of seed 42")
	}
	if rate := float64(failures) / n; rate < 0.25 || rate > 0.35 {
		t.Errorf("failure share %.3f, want about 0.3", rate)
	}
	for _, rate := range []float64{0, 1} {
		for i, ok := range simOutcomes(t, SimConfig{FailRate: rate, Cost: 10}, 200, false, false) {
			if ok != (rate == 0) {
				t.Fatalf("fail rate %v: request %d succeeded=%v", rate, i, ok)
			}
		}
	}
}

func TestSimStops(t *testing.T) {
	t.Parallel()
	a, _ := New(NameSim, Config{Sim: SimConfig{Delay: time.Hour, Cost: 500_000}})

	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(fmt.Errorf("lease lost"))
	res, _ := a.Run(ctx, simRequest(1))
	if res.Reason != ReasonCancelled || !strings.Contains(res.Detail, "lease lost") {
		t.Errorf("cancelled: %+v", res)
	}

	ctx2, cancel2 := context.WithCancel(context.Background())
	go cancel2()
	if res, _ := a.Run(ctx2, simRequest(1)); res.Reason != ReasonCancelled {
		t.Errorf("cancelled while waiting: %+v", res)
	}

	if res, _ := a.Run(context.Background(), Request{Timeout: time.Millisecond}); res.Reason != ReasonTimeout {
		t.Errorf("delay over timeout: %+v", res)
	}

	b, _ := New(NameSim, Config{Sim: SimConfig{Cost: 500_000}})
	budgetCap := plan.USD(200_000)
	res, _ = b.Run(context.Background(), Request{BudgetCap: &budgetCap})
	if res.Reason != ReasonBudgetExceeded || res.Cost != budgetCap || res.Succeeded() {
		t.Errorf("over the cap: %+v", res)
	}
}

func BenchmarkSimRun(b *testing.B) {
	a, err := New(NameSim, Config{Sim: SimConfig{FailRate: 0.1, Seed: 1, Cost: 1000}})
	if err != nil {
		b.Fatal(err)
	}
	req := simRequest(7)
	ctx := context.Background()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := a.Run(ctx, req); err != nil {
				b.Fatal(err)
			}
		}
	})
}
