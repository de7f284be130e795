package queue

import (
	"context"
	"errors"
	"reflect"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/whilly-go/whilly/testkit"
)

// TestPlannedRowScansAsPgxDoes: a row scanned with cached plans comes out as pgx's own
// Scan makes it, row after row, when a statement with other columns or other
// destinations at the same positions ran in between, and a value that does not fit its
// destination is the same ScanArgError.
func TestPlannedRowScansAsPgxDoes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := testkit.DB(t)
	type row struct {
		s     string
		arr   []string
		n     int
		at    time.Time
		maybe *time.Time
		doc   map[string]any
	}
	const query = `SELECT $1::text, $2::text[], $3::int, $4::timestamptz, $5::timestamptz, $6::jsonb`
	at := time.Date(2026, 12, 7, 10, 0, 0, 123456000, time.UTC)
	args := []any{"a", []string{"x", "y"}, 7, at, nil, `{"k": [1, "v"]}`}
	var want row
	if err := pool.QueryRow(ctx, query, args...).Scan(&want.s, &want.arr, &want.n, &want.at, &want.maybe, &want.doc); err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		var got row
		err := pool.QueryRow(ctx, query, args...).Scan(plannedRow{&got.s, &got.arr, &got.n, &got.at, &got.maybe, &got.doc})
		if err != nil || !reflect.DeepEqual(got, want) {
			t.Fatalf("round %d: %+v, %v; want %+v", i, got, err, want)
		}
		// Other types at the same positions, then other destinations for the same types.
		var (
			n        int
			s        string
			b        []byte
			nullable *string
		)
		err = pool.QueryRow(ctx, `SELECT 42, 'z'::text, NULL::text`).Scan(plannedRow{&n, &s, &nullable})
		if err != nil || n != 42 || s != "z" || nullable != nil {
			t.Fatalf("round %d, other columns: %d %q %v, %v", i, n, s, nullable, err)
		}
		if err = pool.QueryRow(ctx, query, args...).Scan(plannedRow{&b, nil, nil, nil, nil, nil}); err != nil || string(b) != "a" {
			t.Fatalf("round %d, other destinations: %q, %v", i, b, err)
		}
	}
	var n int
	err := pool.QueryRow(ctx, `SELECT 'not a number'::text`).Scan(plannedRow{&n})
	var se pgx.ScanArgError
	if !errors.As(err, &se) || se.ColumnIndex != 0 {
		t.Fatalf("a text into an int: %v", err)
	}
	wantErr := pool.QueryRow(ctx, `SELECT 'not a number'::text`).Scan(&n)
	if err.Error() != wantErr.Error() {
		t.Errorf("error %q, pgx says %q", err, wantErr)
	}
}
