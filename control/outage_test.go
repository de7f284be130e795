package control_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/queue"
)

// syncBuffer is a log destination safe for concurrent handlers.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// While the database cannot be reached, API calls answer 503 with Retry-After and the
// usual error body, and the outage is logged once, not once per call.
func TestDatabaseOutageAnswers503AndLogsOnce(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close() // nothing listens there now: every connection is refused
	pool, err := pgxpool.New(context.Background(), "postgres://whilly@"+addr+"/whilly?sslmode=disable&connect_timeout=2")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	var logs syncBuffer
	log := slog.New(slog.NewTextHandler(&logs, nil))
	st := queue.NewStore(pool, log, queue.Config{})
	srv := httptest.NewServer(control.New(st, queue.NewListener(pool, log), log, control.Config{BootstrapToken: bootstrapToken}).Handler())
	t.Cleanup(srv.Close)

	for range 3 {
		req, err := http.NewRequestWithContext(context.Background(), http.MethodPost, srv.URL+"/v1/workers/register",
			strings.NewReader(`{"hostname": "h"}`))
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+bootstrapToken)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var body client.ErrorBody
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" ||
			body.Error != client.CodeUnavailable || body.Message == "" {
			t.Fatalf("answer %d, Retry-After %q, body %+v; want 503 unavailable with Retry-After",
				resp.StatusCode, resp.Header.Get("Retry-After"), body)
		}
	}
	if n := strings.Count(logs.String(), "level=ERROR"); n != 1 {
		t.Errorf("%d ERROR lines for one outage, want 1:\n%s", n, logs.String())
	}
}
