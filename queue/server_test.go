package queue_test

import (
	"context"
	"regexp"
	"testing"

	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

func TestServerVersion(t *testing.T) {
	t.Parallel()
	pool := testkit.DB(t)
	v, err := queue.ServerVersion(context.Background(), pool)
	if err != nil {
		t.Fatal(err)
	}
	// The private cluster of the tests runs PostgreSQL 15 or later.
	if !regexp.MustCompile(`^1[5-9]\.[0-9]+`).MatchString(v) {
		t.Errorf("server version = %q, want 15.x or later", v)
	}
	pool.Close()
	if _, err := queue.ServerVersion(context.Background(), pool); err == nil {
		t.Error("server version through a closed pool: no error")
	}
}
