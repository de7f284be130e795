package web_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"testing"
)

// bigPlan is a plan file of n tasks, each depending on the one ten before it, so the
// page draws a graph, not a list.
func bigPlan(t testing.TB, id string, n int) string {
	t.Helper()
	type task struct {
		ID       string   `json:"id"`
		Priority string   `json:"priority"`
		Desc     string   `json:"description"`
		Deps     []string `json:"dependencies"`
		Criteria []string `json:"acceptance_criteria"`
		Steps    []string `json:"test_steps"`
	}
	f := struct {
		ID    string `json:"plan_id"`
		Name  string `json:"project"`
		Tasks []task `json:"tasks"`
	}{ID: id, Name: "A plan of many tasks"}
	for i := range n {
		tk := task{ID: fmt.Sprintf("T-%04d", i), Priority: "medium", Desc: fmt.Sprintf("Task number %d of the big plan, with enough words to be real", i),
			Criteria: []string{"it works"}, Steps: []string{"go test ./..."}}
		if i >= 10 {
			tk.Deps = []string{fmt.Sprintf("T-%04d", i-10)}
		}
		f.Tasks = append(f.Tasks, tk)
	}
	b, err := json.Marshal(f)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// BenchmarkPlanPage1000Tasks is the server's time for the page of a 1,000-task plan:
// session lookup, plan, tasks, graph depths and the template, over HTTP (target: under
// 200 ms).
func BenchmarkPlanPage1000Tasks(b *testing.B) {
	e := newEnv(b)
	e.importPlan(bigPlan(b, "big", 1000))
	br := e.browser()
	br.mustSignIn(e.admin)
	var size int
	b.ResetTimer()
	for b.Loop() {
		a := br.get("/plans/big")
		if a.status != http.StatusOK {
			b.Fatalf("plan page: %d", a.status)
		}
		size = len(a.body)
	}
	b.ReportMetric(float64(size), "bytes/page")
}
