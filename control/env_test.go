package control_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/control"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

const bootstrapToken = "boot-secret-for-tests"

// queryLog is a pgx tracer that records when each query of the pool started and ended.
type queryLog struct {
	mu      sync.Mutex
	queries []tracedQuery
}

type tracedQuery struct {
	sql        string
	start, end time.Time
}

type queryKey struct{}

func (q *queryLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, data pgx.TraceQueryStartData) context.Context {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.queries = append(q.queries, tracedQuery{sql: data.SQL, start: time.Now()})
	return context.WithValue(ctx, queryKey{}, len(q.queries)-1)
}

func (q *queryLog) TraceQueryEnd(ctx context.Context, _ *pgx.Conn, _ pgx.TraceQueryEndData) {
	q.mu.Lock()
	defer q.mu.Unlock()
	if i, ok := ctx.Value(queryKey{}).(int); ok {
		q.queries[i].end = time.Now()
	}
}

func (q *queryLog) snapshot() []tracedQuery {
	q.mu.Lock()
	defer q.mu.Unlock()
	return append([]tracedQuery(nil), q.queries...)
}

type env struct {
	t        testing.TB
	pool     *pgxpool.Pool
	store    *queue.Store
	listener *queue.Listener
	server   *control.Server
	url      string
	queries  *queryLog
	admin    string // admin API token
	read     string // read-only API token
}

type envOptions struct {
	control control.Config
	queue   queue.Config
}

// newEnv starts a control plane on a fresh database: the store and a running listener
// on a pool whose queries are traced, and an httptest server.
func newEnv(t testing.TB, opts envOptions) *env {
	t.Helper()
	ctx := context.Background()
	cfg, err := pgxpool.ParseConfig(testkit.DSN(t))
	if err != nil {
		t.Fatal(err)
	}
	ql := &queryLog{}
	cfg.ConnConfig.Tracer = ql
	cfg.MaxConns = 8
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	log := slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	store := queue.NewStore(pool, log, opts.queue)
	ln := queue.NewListener(pool, log)
	runCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := ln.Run(runCtx); err != nil {
			t.Errorf("listener: %v", err)
		}
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	testkit.Eventually(t, 20*time.Second, "listener ready", ln.Ready)

	if opts.control.BootstrapToken == "" {
		opts.control.BootstrapToken = bootstrapToken
	}
	server := control.New(store, ln, log, opts.control)
	srv := httptest.NewServer(server.Handler())
	t.Cleanup(srv.Close)

	e := &env{t: t, pool: pool, store: store, listener: ln, server: server, url: srv.URL, queries: ql}
	if e.admin, _, err = store.MintToken(ctx, "ops@example.com", true, nil); err != nil {
		t.Fatal(err)
	}
	if e.read, _, err = store.MintToken(ctx, "viewer@example.com", false, nil); err != nil {
		t.Fatal(err)
	}
	return e
}

func (e *env) client(token string) *client.Client {
	e.t.Helper()
	c, err := client.New(e.url, token, client.Options{})
	if err != nil {
		e.t.Fatal(err)
	}
	return c
}

// register registers a worker through the API and returns its token and id.
func (e *env) register(labels ...string) (token, id string) {
	e.t.Helper()
	reg, err := e.client(bootstrapToken).Register(context.Background(), client.RegisterRequest{Hostname: "test-host", Labels: labels})
	if err != nil {
		e.t.Fatal(err)
	}
	return reg.Token, reg.WorkerID
}

// worker registers a worker and returns its client and id.
func (e *env) worker(labels ...string) (*client.Client, string) {
	e.t.Helper()
	tok, id := e.register(labels...)
	return e.client(tok), id
}

// importPlan imports a plan file through the API as admin.
func (e *env) importPlan(doc string) client.ImportResponse {
	e.t.Helper()
	res, err := e.client(e.admin).ImportPlan(context.Background(), []byte(doc), false)
	if err != nil {
		e.t.Fatal(err)
	}
	return res
}

// planDoc builds a plan file with the given task ids, no dependencies.
func planDoc(planID string, taskIDs ...string) string {
	var tasks []string
	for _, id := range taskIDs {
		tasks = append(tasks, fmt.Sprintf(`{"id": %q, "priority": "medium",
			"description": "Do the work of task %s thoroughly and well",
			"acceptance_criteria": ["it works"], "test_steps": ["go test ./..."], "key_files": ["x.go"]}`, id, id))
	}
	return fmt.Sprintf(`{"plan_id": %q, "project": "Project %s", "tasks": [%s]}`, planID, planID, strings.Join(tasks, ","))
}

// do sends a raw request and returns the status and body.
func (e *env) do(method, path, token string, body any, header ...string) (int, string) {
	e.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		r = strings.NewReader(b)
	case []byte:
		r = bytes.NewReader(b)
	default:
		data, err := json.Marshal(b)
		if err != nil {
			e.t.Fatal(err)
		}
		r = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(context.Background(), method, e.url+path, r)
	if err != nil {
		e.t.Fatal(err)
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		e.t.Fatal(err)
	}
	return resp.StatusCode, string(data)
}

// stateDigest summarises every row whilly writes, to prove that a request changed nothing.
func (e *env) stateDigest() string {
	e.t.Helper()
	var d string
	err := e.pool.QueryRow(context.Background(), `SELECT
		(SELECT count(*) FROM events)::text || '|' ||
		coalesce((SELECT md5(string_agg(t::text, ',' ORDER BY plan_id, id)) FROM tasks t), '') || '|' ||
		coalesce((SELECT md5(string_agg(p::text, ',' ORDER BY id)) FROM plans p), '') || '|' ||
		coalesce((SELECT md5(string_agg(w.id || w.status || coalesce(w.last_heartbeat::text, ''), ',' ORDER BY id)) FROM workers w), '') || '|' ||
		(SELECT count(*) FROM api_tokens)::text`).Scan(&d)
	if err != nil {
		e.t.Fatal(err)
	}
	return d
}
