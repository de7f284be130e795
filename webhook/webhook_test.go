package webhook_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
	"github.com/whilly-go/whilly/webhook"
)

var secret = []byte("webhook-test-secret")

func events() []string {
	return []string{"issues", "issue_comment", "installation", "installation_repositories", "pull_request"}
}

// newServer serves the handler over a fresh database; jobs are inserted by an
// insert-only River client, as in `whilly serve`.
func newServer(t testing.TB, maxBytes int64) (*httptest.Server, *pgxpool.Pool) {
	t.Helper()
	pool := testkit.DB(t)
	st := queue.NewStore(pool, nil, queue.Config{})
	jobs, err := river.NewClient(riverpgxv5.New(pool), &river.Config{})
	if err != nil {
		t.Fatal(err)
	}
	h, err := webhook.New(st, func(ctx context.Context, tx pgx.Tx, id string) error {
		_, err := jobs.InsertTx(ctx, tx, queue.GitHubDeliveryArgs{DeliveryID: id}, nil)
		return err
	}, nil, webhook.Config{Secret: secret, Events: events(), MaxBytes: maxBytes})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv, pool
}

func do(t testing.TB, req *http.Request) int {
	t.Helper()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

func counts(t testing.TB, pool *pgxpool.Pool) (deliveries, jobs int) {
	t.Helper()
	ctx := context.Background()
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM webhook_deliveries`).Scan(&deliveries); err != nil {
		t.Fatal(err)
	}
	if err := pool.QueryRow(ctx, `SELECT count(*) FROM river_job WHERE kind = $1`, queue.KindGitHubDelivery).Scan(&jobs); err != nil {
		t.Fatal(err)
	}
	return deliveries, jobs
}

func labeled(t testing.TB) []byte {
	return testkit.WebhookPayload(t, "issues", "labeled", map[string]any{"installation.id": 77, "label.name": "whilly-pending"})
}

func TestRefusesToStartWithoutASecret(t *testing.T) {
	t.Parallel()
	_, err := webhook.New(nil, func(context.Context, pgx.Tx, string) error { return nil }, nil, webhook.Config{})
	if err != webhook.ErrNoSecret { //nolint:errorlint // the sentinel itself
		t.Errorf("New without a secret = %v, want ErrNoSecret", err)
	}
}

func TestSignedDeliveryIsStoredWithItsJobAndAcknowledgedOnce(t *testing.T) {
	t.Parallel()
	srv, pool := newServer(t, 0)
	body := labeled(t)
	if st := do(t, testkit.WebhookRequest(t, srv.URL, secret, "issues", "d-1", body)); st != http.StatusAccepted {
		t.Fatalf("status %d, want 202", st)
	}
	if st := do(t, testkit.WebhookRequest(t, srv.URL, secret, "issues", "d-1", body)); st != http.StatusAccepted {
		t.Fatalf("repeated delivery: status %d, want 202", st)
	}
	if d, j := counts(t, pool); d != 1 || j != 1 {
		t.Errorf("%d deliveries and %d jobs stored, want 1 and 1", d, j)
	}
	var event, action string
	var inst int64
	if err := pool.QueryRow(context.Background(), `SELECT event, action, installation_id FROM webhook_deliveries`).Scan(&event, &action, &inst); err != nil {
		t.Fatal(err)
	}
	if event != "issues" || action != "labeled" || inst != 77 {
		t.Errorf("stored %s/%s/%d, want issues/labeled/77", event, action, inst)
	}
}

func TestBadOrMissingSignatureIs401AndStoresNothing(t *testing.T) {
	t.Parallel()
	srv, pool := newServer(t, 0)
	body := labeled(t)
	cases := map[string]func(*http.Request){
		"missing":      func(r *http.Request) { r.Header.Del("X-Hub-Signature-256") },
		"wrong secret": func(r *http.Request) { r.Header.Set("X-Hub-Signature-256", testkit.SignWebhook([]byte("other"), body)) },
		"sha1 only": func(r *http.Request) {
			r.Header.Set("X-Hub-Signature-256", "")
			r.Header.Set("X-Hub-Signature", "sha1=abc")
		},
		"not hex":   func(r *http.Request) { r.Header.Set("X-Hub-Signature-256", "sha256=zz") },
		"truncated": func(r *http.Request) { r.Header.Set("X-Hub-Signature-256", testkit.SignWebhook(secret, body)[:40]) },
		"body tampered": func(r *http.Request) {
			r.Body = io.NopCloser(bytes.NewReader(append(slices.Clone(body), ' ')))
			r.ContentLength++
		},
		"unknown event": func(r *http.Request) { r.Header.Set("X-GitHub-Event", "ping"); r.Header.Del("X-Hub-Signature-256") },
		"uppercase algo": func(r *http.Request) {
			r.Header.Set("X-Hub-Signature-256", "SHA256="+testkit.SignWebhook(secret, body)[7:])
		},
	}
	for name, mutate := range cases {
		req := testkit.WebhookRequest(t, srv.URL, secret, "issues", "d-"+name, body)
		mutate(req)
		if st := do(t, req); st != http.StatusUnauthorized {
			t.Errorf("%s: status %d, want 401", name, st)
		}
	}
	if d, j := counts(t, pool); d != 0 || j != 0 {
		t.Errorf("%d deliveries and %d jobs stored after bad signatures, want none", d, j)
	}
}

func TestOversizedBodyIs413(t *testing.T) {
	t.Parallel()
	srv, pool := newServer(t, 1<<10)
	big := []byte(`{"action":"labeled","pad":"` + strings.Repeat("x", 2<<10) + `"}`)
	if st := do(t, testkit.WebhookRequest(t, srv.URL, secret, "issues", "big", big)); st != http.StatusRequestEntityTooLarge {
		t.Errorf("declared length: status %d, want 413", st)
	}
	req := testkit.WebhookRequest(t, srv.URL, secret, "issues", "big-chunked", big)
	req.ContentLength = -1 // chunked: the cap is enforced while reading
	req.Body = io.NopCloser(bytes.NewReader(big))
	if st := do(t, req); st != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked: status %d, want 413", st)
	}
	if d, _ := counts(t, pool); d != 0 {
		t.Errorf("%d deliveries stored, want none", d)
	}
}

func TestDefaultCapIs25MB(t *testing.T) {
	t.Parallel()
	srv, _ := newServer(t, 0)
	req, err := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	req.ContentLength = 25<<20 + 1
	req.Body = io.NopCloser(io.LimitReader(zeros{}, 25<<20+1))
	if st := do(t, req); st != http.StatusRequestEntityTooLarge {
		t.Errorf("25 MB + 1: status %d, want 413", st)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) { clear(p); return len(p), nil }

func TestUnknownEventsAreAcknowledgedAndDropped(t *testing.T) {
	t.Parallel()
	srv, pool := newServer(t, 0)
	body := testkit.WebhookPayload(t, "ping", "with-app_id", nil)
	if st := do(t, testkit.WebhookRequest(t, srv.URL, secret, "ping", "p-1", body)); st != http.StatusAccepted {
		t.Errorf("ping: status %d, want 202", st)
	}
	body = testkit.WebhookPayload(t, "pull_request_review", "submitted", nil)
	if st := do(t, testkit.WebhookRequest(t, srv.URL, secret, "pull_request_review", "r-1", body)); st != http.StatusAccepted {
		t.Errorf("pull_request_review: status %d, want 202", st)
	}
	if d, j := counts(t, pool); d != 0 || j != 0 {
		t.Errorf("%d deliveries and %d jobs stored for unknown events, want none", d, j)
	}
}

func TestMalformedSignedRequestsAre4xx(t *testing.T) {
	t.Parallel()
	srv, pool := newServer(t, 0)
	for name, body := range map[string]string{"not json": "hello", "array": "[]", "nul": `{"a":"\u0000"}`, "bad utf8": "{\"a\":\"\xff\"}"} {
		if st := do(t, testkit.WebhookRequest(t, srv.URL, secret, "issues", "m-"+name, []byte(body))); st != http.StatusBadRequest {
			t.Errorf("%s: status %d, want 400", name, st)
		}
	}
	req := testkit.WebhookRequest(t, srv.URL, secret, "issues", "", labeled(t))
	if st := do(t, req); st != http.StatusBadRequest {
		t.Errorf("no delivery id: status %d, want 400", st)
	}
	get, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
	if st := do(t, get); st != http.StatusMethodNotAllowed {
		t.Errorf("GET: status %d, want 405", st)
	}
	if d, _ := counts(t, pool); d != 0 {
		t.Errorf("%d deliveries stored, want none", d)
	}
}

// FuzzWebhookHandler: whatever the body and headers, the handler answers 202, 400, 401
// or 413 — never a 5xx — and stores a delivery only when it answered 202 to a signed
// request of a handled event.
func FuzzWebhookHandler(f *testing.F) {
	srv, pool := newServer(f, 1<<16)
	f.Add([]byte(`{"action":"labeled","installation":{"id":1}}`), "issues", true)
	f.Add(testkit.WebhookPayload(f, "issue_comment", "created", nil), "issue_comment", true)
	f.Add([]byte(`{"action":`), "issues", true)
	f.Add([]byte(`{}`), "ping", false)
	f.Add([]byte("{\"x\":\"\\ud800\"}"), "issues", true)
	var mu sync.Mutex
	n := 0
	f.Fuzz(func(t *testing.T, body []byte, event string, sign bool) {
		mu.Lock()
		n++
		id := fmt.Sprintf("fuzz-%d-%d", time.Now().UnixNano(), n)
		mu.Unlock()
		req, err := http.NewRequest(http.MethodPost, srv.URL, bytes.NewReader(body))
		if err != nil {
			t.Skip()
		}
		if len(event) > 200 || strings.ContainsFunc(event, func(r rune) bool { return r < 0x20 || r == 0x7f }) {
			t.Skip() // not a header value net/http would send
		}
		req.Header.Set("X-GitHub-Event", event)
		req.Header.Set("X-GitHub-Delivery", id)
		if sign {
			req.Header.Set("X-Hub-Signature-256", testkit.SignWebhook(secret, body))
		}
		st := do(t, req)
		switch st {
		case http.StatusAccepted, http.StatusBadRequest, http.StatusUnauthorized, http.StatusRequestEntityTooLarge:
		default:
			t.Fatalf("status %d for event %q signed=%v body %q", st, event, sign, body)
		}
		var stored bool
		if err := pool.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM webhook_deliveries WHERE delivery_id = $1)`, id).Scan(&stored); err != nil {
			t.Fatal(err)
		}
		if stored && (!sign || st != http.StatusAccepted || !slices.Contains(events(), event)) {
			t.Fatalf("stored a delivery answered %d (signed=%v, event %q)", st, sign, event)
		}
	})
}

// BenchmarkWebhookAck measures the acknowledgement latency of signed deliveries sent at
// 200 per second (each its own delivery id, so each is stored with its job), and reports
// p50, p99 and max in milliseconds. Run with -benchtime=1000x for 5 s of traffic.
func BenchmarkWebhookAck(b *testing.B) {
	srv, _ := newServer(b, 0)
	body := labeled(b)
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}}
	lat := make([]time.Duration, b.N)
	tick := time.NewTicker(5 * time.Millisecond) // 200/s
	defer tick.Stop()
	var wg sync.WaitGroup
	b.ResetTimer()
	for i := range b.N {
		<-tick.C
		req := testkit.WebhookRequest(b, srv.URL, secret, "issues", fmt.Sprintf("bench-%d", i), body)
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			resp, err := client.Do(req)
			if err != nil {
				b.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			lat[i] = time.Since(start)
			if resp.StatusCode != http.StatusAccepted {
				b.Errorf("status %d", resp.StatusCode)
			}
		}()
	}
	wg.Wait()
	b.StopTimer()
	slices.Sort(lat)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms")
}
