package webhook_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
	"github.com/whilly-go/whilly/webhook"
)

// syncBuffer is a log sink safe for the server's goroutines.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) lines(msg string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, l := range strings.Split(s.b.String(), "\n") {
		if strings.Contains(l, "msg=\""+msg+"\"") {
			out = append(out, l)
		}
	}
	return out
}

// Every delivery leaves one INFO line with its id, event and outcome; a flood of bad
// signatures leaves one WARN line (the rest are counted into the next), and neither
// carries the payload.
func TestEveryDeliveryIsLoggedAndBadSignaturesAreRateLimited(t *testing.T) {
	t.Parallel()
	var logs syncBuffer
	st := queue.NewStore(testkit.DB(t), nil, queue.Config{})
	h, err := webhook.New(st, func(context.Context, pgx.Tx, string) error { return nil },
		slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})),
		webhook.Config{Secret: secret, Events: events()})
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	body := labeled(t)
	do(t, testkit.WebhookRequest(t, srv.URL, secret, "issues", "d-1", body))
	do(t, testkit.WebhookRequest(t, srv.URL, secret, "issues", "d-1", body))
	do(t, testkit.WebhookRequest(t, srv.URL, secret, "star", "d-2", []byte(`{}`)))
	for i := range 50 {
		if st := do(t, testkit.WebhookRequest(t, srv.URL, []byte("forged"), "issues", fmt.Sprintf("bad-%d", i), body)); st != http.StatusUnauthorized {
			t.Fatalf("forged delivery answered %d", st)
		}
	}
	got := logs.lines("webhook delivery")
	want := []string{"delivery_id=d-1 event=issues action=labeled installation_id=77 outcome=queued source=push",
		"delivery_id=d-1 event=issues action=labeled installation_id=77 outcome=duplicate source=push",
		"delivery_id=d-2 event=star action=\"\" installation_id=0 outcome=ignored source=push"}
	if len(got) != len(want) {
		t.Fatalf("delivery lines:\n%s\nwant %d", strings.Join(got, "\n"), len(want))
	}
	for i := range want {
		if !strings.Contains(got[i], "level=INFO") || !strings.Contains(got[i], want[i]) {
			t.Errorf("line %d = %s\nwant INFO with %s", i, got[i], want[i])
		}
	}
	warns := logs.lines("webhook signature refused")
	if len(warns) != 1 || !strings.Contains(warns[0], "level=WARN") || !strings.Contains(warns[0], "delivery_id=bad-0") {
		t.Errorf("bad-signature lines (want one WARN for fifty):\n%s", strings.Join(warns, "\n"))
	}
	logs.mu.Lock()
	all := logs.b.String()
	logs.mu.Unlock()
	if strings.Contains(all, "Codertocat") {
		t.Error("a payload reached the log")
	}
}

func TestNotConfiguredAnswers503NamingWhatIsMissing(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(webhook.NotConfigured([]string{"WHILLY_GITHUB_APP_ID", "WHILLY_GITHUB_WEBHOOK_SECRET"}))
	t.Cleanup(srv.Close)
	resp, err := http.Post(srv.URL, "application/json", strings.NewReader(`{}`))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body map[string]string
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusServiceUnavailable || body["error"] != "app_not_configured" ||
		!strings.Contains(body["message"], "WHILLY_GITHUB_APP_ID, WHILLY_GITHUB_WEBHOOK_SECRET") || len(body) != 2 {
		t.Errorf("%d %v", resp.StatusCode, body)
	}
}
