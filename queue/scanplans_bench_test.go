package queue

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/testkit"
)

// recordedRow is one row of a result, kept to be scanned again and again on the
// connection that read it.
type recordedRow struct {
	pgx.Rows // not called: only what scanning uses is implemented
	conn     *pgx.Conn
	fields   []pgconn.FieldDescription
	values   [][]byte
	replan   bool // scan as pgx does a new result's first row: plan every column
}

func (r *recordedRow) Conn() *pgx.Conn                              { return r.conn }
func (r *recordedRow) FieldDescriptions() []pgconn.FieldDescription { return r.fields }
func (r *recordedRow) RawValues() [][]byte                          { return r.values }

func (r *recordedRow) Scan(dest ...any) error {
	if rs, ok := dest[0].(plannedRow); ok && len(dest) == 1 {
		if !r.replan {
			return rs.ScanRow(r)
		}
		dest = rs
	}
	m := r.conn.TypeMap()
	for i, d := range dest {
		if err := m.PlanScan(r.fields[i].DataTypeOID, r.fields[i].Format, d).Scan(r.values[i], d); err != nil {
			return err
		}
	}
	return nil
}

// scanTaskBefore is scanTaskExtra as it was before plannedRow: pgx's types (plan.Status,
// *[]string), planned for every result.
func scanTaskBefore(row pgx.Row) (TaskInfo, error) {
	var (
		t    TaskInfo
		cost int64
	)
	dest := []any{&t.PlanID, &t.ID, &t.Status, &t.Priority, &t.Description, &t.Dependencies, &t.KeyFiles,
		&t.AcceptanceCriteria, &t.TestSteps, &t.PRDRequirement, &t.Labels, &t.Gate.Decision, &t.Gate.Reasons,
		&t.Attempts, &t.MaxAttempts, &t.NotBefore, &t.LeaseID, &t.LeaseExpiresAt, &t.ClaimedBy, &t.Version,
		&cost, &t.LastError, &t.LastOutput, &t.TrizFinding, &t.Result, &t.CreatedAt, &t.UpdatedAt, &t.Round}
	err := row.Scan(dest...)
	t.Cost = plan.USD(cost)
	return t, err
}

// BenchmarkScanTaskRow scans a recorded row of every task column (a claimed task, its
// lease set) as scanTaskExtra does (cached: the plans made once for the connection), with
// its destinations but plans made for the row as pgx does for every result (replanned),
// and as it did before (before).
func BenchmarkScanTaskRow(b *testing.B) {
	ctx := context.Background()
	pool := testkit.DB(b)
	conn, err := pool.Acquire(ctx)
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Release()
	rows, err := conn.Query(ctx, `SELECT 'p'::text, 'T1'::text, 'CLAIMED'::text, 'medium'::text, 'Do the work well'::text,
		'{}'::text[], '{x.go}'::text[], '{it works}'::text[], '{go test ./...}'::text[], ''::text, '{}'::text[],
		'ACCEPT'::text, '[]'::jsonb, 1, 3, NULL::timestamptz, '5e2d7c90-1b3a-4f5e-8d6c-7a9b0c1d2e3f'::text, now(), 'w1'::text,
		2, 0::bigint, ''::text, ''::text, ''::text, ''::text, now(), now(), NULL::jsonb`)
	if err != nil || !rows.Next() {
		b.Fatalf("record a row: %v", err)
	}
	row := &recordedRow{conn: conn.Conn(), fields: rows.FieldDescriptions()}
	for _, v := range rows.RawValues() {
		if v != nil { // NULL stays nil, '' stays empty
			v = append(make([]byte, 0, len(v)), v...)
		}
		row.values = append(row.values, v)
	}
	rows.Close()
	for _, c := range []struct {
		name   string
		replan bool
		scan   func(pgx.Row) (TaskInfo, error)
	}{{"cached", false, scanTask}, {"replanned", true, scanTask}, {"before", true, scanTaskBefore}} {
		b.Run(c.name, func(b *testing.B) {
			row.replan = c.replan
			testkit.ReportCPU(b)
			for b.Loop() {
				if _, err := c.scan(row); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
