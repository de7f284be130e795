package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/plan"
)

func TestNewRefusesPlainHTTPToRemoteHosts(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		url      string
		insecure bool
		ok       bool
	}{
		{"https://whilly.example.com", false, true},
		{"https://whilly.example.com/prefix/", false, true},
		{"http://localhost:8000", false, true},
		{"http://127.0.0.1:8000", false, true},
		{"http://127.3.4.5", false, true},
		{"http://[::1]:8000", false, true},
		{"http://whilly.example.com", false, false},
		{"http://10.0.0.7:8000", false, false},
		{"http://0.0.0.0:8000", false, false},
		{"http://localhost.evil.com", false, false},
		{"http://whilly.example.com", true, true},
		{"ftp://whilly.example.com", false, false},
		{"whilly.example.com", false, false},
		{"https://user:pw@whilly.example.com", false, false},
		{"https://whilly.example.com?x=1", false, false},
		{"https://whilly.example.com:99999", false, false},
		{"https://", false, false},
	} {
		_, err := New(tc.url, "tok", Options{Insecure: tc.insecure})
		if (err == nil) != tc.ok {
			t.Errorf("New(%q, insecure=%v): err = %v, want ok=%v", tc.url, tc.insecure, err, tc.ok)
		}
	}
	_, err := New("http://whilly.example.com", "tok", Options{})
	if err == nil || !strings.Contains(err.Error(), "--insecure") || !strings.Contains(err.Error(), "whilly.example.com") {
		t.Errorf("refusal should name the host and the way out, got %v", err)
	}
}

// recorder is a fake control plane that records requests and answers with a fixed status
// and body.
type recorder struct {
	status int
	body   string
	got    []*http.Request
	bodies []string
}

func (rec *recorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	b, _ := io.ReadAll(r.Body)
	rec.got = append(rec.got, r)
	rec.bodies = append(rec.bodies, string(b))
	if rec.status == 0 {
		rec.status = http.StatusOK
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(rec.status)
	_, _ = io.WriteString(w, rec.body)
}

func newFake(t *testing.T, rec *recorder, prefix string) *Client {
	t.Helper()
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	c, err := New(srv.URL+prefix, "secret-token", Options{})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func TestIDsAreEscapedAsOneSegment(t *testing.T) {
	t.Parallel()
	rec := &recorder{body: `{"plan_id":"team/a:1","id":"feat/x:2","status":"IN_PROGRESS"}`}
	c := newFake(t, rec, "/base/")
	task, err := c.Start(context.Background(), "team/a:1", "feat/x:2", LeaseRequest{LeaseID: "L"})
	if err != nil {
		t.Fatal(err)
	}
	if task.ID != "feat/x:2" || task.PlanID != "team/a:1" {
		t.Errorf("task = %+v", task)
	}
	r := rec.got[0]
	if got, want := r.URL.EscapedPath(), "/base/v1/plans/team%2Fa:1/tasks/feat%2Fx:2/start"; got != want {
		t.Errorf("path = %s, want %s", got, want)
	}
	if got := r.Header.Get("Authorization"); got != "Bearer secret-token" {
		t.Errorf("Authorization = %q", got)
	}
	if got := r.Header.Get("Content-Type"); got != "application/json" {
		t.Errorf("Content-Type = %q", got)
	}
	if rec.bodies[0] != `{"lease_id":"L"}` {
		t.Errorf("body = %s", rec.bodies[0])
	}
}

func TestErrorsAreTyped(t *testing.T) {
	t.Parallel()
	rec := &recorder{status: http.StatusConflict, body: `{"error":"lease_lost","message":"The lease is gone."}`}
	c := newFake(t, rec, "")
	_, err := c.Complete(context.Background(), "p", "t", CompleteRequest{LeaseID: "L", CostUSD: 13000})
	var e *Error
	if !errors.As(err, &e) || e.Status != 409 || e.Code != CodeLeaseLost || e.Message != "The lease is gone." {
		t.Fatalf("err = %#v", err)
	}
	if !IsConflict(err) || !IsLeaseLost(err) || IsNotFound(err) || IsServerError(err) {
		t.Errorf("helpers disagree on %v", err)
	}
	if rec.bodies[0] != `{"lease_id":"L","cost_usd":0.013}` {
		t.Errorf("money must travel as an exact JSON number: %s", rec.bodies[0])
	}

	rec2 := &recorder{status: http.StatusBadGateway, body: `<html>proxy error</html>`}
	c2 := newFake(t, rec2, "")
	err = c2.Healthz(context.Background())
	if !IsServerError(err) || StatusOf(err) != 502 || !strings.Contains(err.Error(), "502") {
		t.Errorf("non-JSON error = %v", err)
	}
}

func TestClaimNoContentIsNil(t *testing.T) {
	t.Parallel()
	rec := &recorder{status: http.StatusNoContent}
	c := newFake(t, rec, "")
	claim, err := c.Claim(context.Background(), ClaimRequest{PlanID: "p", WaitSeconds: 1.5})
	if err != nil || claim != nil {
		t.Fatalf("Claim = %v, %v; want nil, nil", claim, err)
	}
	if rec.bodies[0] != `{"plan_id":"p","wait_seconds":1.5}` {
		t.Errorf("body = %s", rec.bodies[0])
	}
}

func TestBudgetPatchJSON(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		req  PatchPlanRequest
		want string
	}{
		{PatchPlanRequest{Status: plan.PlanCancelled}, `{"status":"CANCELLED"}`},
		{PatchPlanRequest{BudgetUSD: SetBudget(2_500_000)}, `{"budget_usd":2.5}`},
		{PatchPlanRequest{BudgetUSD: Unlimited()}, `{"budget_usd":null}`},
	} {
		b, err := json.Marshal(tc.req)
		if err != nil || string(b) != tc.want {
			t.Errorf("Marshal(%+v) = %s, %v; want %s", tc.req, b, err, tc.want)
		}
		var back PatchPlanRequest
		if err := json.Unmarshal(b, &back); err != nil {
			t.Fatal(err)
		}
		if back.BudgetUSD.Set != tc.req.BudgetUSD.Set || (back.BudgetUSD.Limit == nil) != (tc.req.BudgetUSD.Limit == nil) {
			t.Errorf("round trip of %s = %+v", b, back)
		}
	}
}

func TestReadSSE(t *testing.T) {
	t.Parallel()
	stream := ": ping\n\n" +
		"id: 7\nevent: CLAIM\ndata: {\"id\":7,\n" +
		"data: \"type\":\"CLAIM\"}\n\n" +
		"retry: 100\n\n" +
		"id: 8\nevent: START\ndata: {\"id\":8}\n\n" +
		"id: 9\ndata: {\"id\":9}" // cut off: never dispatched
	var got []frame
	err := readSSE(strings.NewReader(stream), func(f frame) error {
		got = append(got, f)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got[0].id != "7" || got[0].event != "CLAIM" || got[0].data != "{\"id\":7,\n\"type\":\"CLAIM\"}" ||
		got[1].id != "8" || got[1].data != `{"id":8}` {
		t.Errorf("frames = %+v", got)
	}
}

func TestStreamEventsSendsLastEventID(t *testing.T) {
	t.Parallel()
	var lastID, plan string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lastID, plan = r.Header.Get("Last-Event-ID"), r.URL.Query().Get("plan_id")
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, "id: 43\nevent: COMPLETE\ndata: {\"id\":43,\"type\":\"COMPLETE\",\"plan_id\":\"a/b\"}\n\n")
	}))
	t.Cleanup(srv.Close)
	c, err := New(srv.URL, "tok", Options{})
	if err != nil {
		t.Fatal(err)
	}
	var evs []Event
	err = c.StreamEvents(context.Background(), "a/b", 42, func(e Event) error {
		evs = append(evs, e)
		return nil
	})
	if !errors.Is(err, ErrStreamClosed) {
		t.Errorf("err = %v, want ErrStreamClosed", err)
	}
	if lastID != "42" || plan != "a/b" || len(evs) != 1 || evs[0].ID != 43 || evs[0].PlanID != "a/b" {
		t.Errorf("Last-Event-ID %q, plan %q, events %+v", lastID, plan, evs)
	}
}

// TestImportGraph keeps the slim worker slim: the client may import only the standard
// library and package plan.
func TestImportGraph(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.CommandContext(t.Context(), "go", "list", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	allowed := map[string]bool{
		"github.com/whilly-go/whilly/control/client": true,
		"github.com/whilly-go/whilly/plan":           true,
	}
	for _, p := range strings.Fields(string(out)) {
		if !allowed[p] {
			t.Errorf("control/client depends on %s; it may import only the standard library and package plan", p)
		}
	}
}

// A control-plane URL written without its scheme gets the URL to write, never a parser's
// error.
func TestNewURLWithoutScheme(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"127.0.0.1:8080":     `control-plane URL "127.0.0.1:8080" has no scheme: write http://127.0.0.1:8080 (or https://127.0.0.1:8080)`,
		"localhost:8080":     `control-plane URL "localhost:8080" has no scheme: write http://localhost:8080 (or https://localhost:8080)`,
		"whilly.example.com": `control-plane URL "whilly.example.com" has no scheme: write https://whilly.example.com`,
	} {
		if _, err := New(in, "t", Options{}); err == nil || err.Error() != want {
			t.Errorf("New(%q) = %v, want %q", in, err, want)
		}
	}
}
