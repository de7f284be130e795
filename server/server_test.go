package server

import (
	"context"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/testkit"
)

// Shutdown returns once the LISTEN connection and the HTTP server have returned, so that
// the owner may close the pool at once and nothing of the control plane outlives it.
// Not parallel: it reads every goroutine's stack, and no other test of the package
// starts a control plane.
func TestShutdownWaitsForTheListenerAndHTTP(t *testing.T) {
	pool := testkit.DB(t)
	ctx := context.Background()
	srv, err := New(ctx, pool, discard, configOf(t, map[string]string{"WHILLY_DATA_DIR": t.TempDir()}))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ln); err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get("http://" + ln.Addr().String() + "/healthz")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if running := controlPlaneGoroutines(); len(running) != 2 {
		t.Fatalf("running: %v; want the listener and the HTTP server", running)
	}
	if err := srv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	if running := controlPlaneGoroutines(); len(running) > 0 {
		t.Errorf("still running after Shutdown: %v", running)
	}
	select {
	case <-srv.Done():
	default:
		t.Error("Done is not closed after Shutdown")
	}
}

// controlPlaneGoroutines names the goroutines running the LISTEN connection or an HTTP
// server's Serve.
func controlPlaneGoroutines() []string {
	buf := make([]byte, 1<<22)
	buf = buf[:runtime.Stack(buf, true)]
	var found []string
	for _, g := range strings.Split(string(buf), "\n\n") {
		switch {
		case strings.Contains(g, "queue.(*Listener).Run("):
			found = append(found, "the listener")
		case strings.Contains(g, "net/http.(*Server).Serve("):
			found = append(found, "the HTTP server")
		}
	}
	return found
}
