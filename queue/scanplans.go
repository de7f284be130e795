package queue

import (
	"fmt"
	"reflect"
	"sync"
	"weak"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgtype"
)

// plannedRow is the destinations of a row (a pgx.RowScanner) that are scanned with the
// plans of scanPlans: pgx plans the scan of every column again for each result, most of
// the cost of scanning a one-row result such as a claimed or completed task
// (BenchmarkScanTaskRow: 2.8 µs of CPU and 24 allocations a row, 5.6 µs and 49 planned
// for the row).
type plannedRow []any

func (dest plannedRow) ScanRow(rows pgx.Rows) error {
	conn := rows.Conn()
	if conn == nil {
		return rows.Scan(dest...)
	}
	fields, values := rows.FieldDescriptions(), rows.RawValues()
	if len(fields) != len(dest) {
		return fmt.Errorf("number of field descriptions must equal number of destinations, got %d and %d", len(fields), len(dest))
	}
	m := conn.TypeMap()
	plans := scanPlans.of(m)
	for i, d := range dest {
		if d == nil {
			continue
		}
		if err := plans.plan(m, i, fields[i], d).Scan(values[i], d); err != nil {
			return pgx.ScanArgError{ColumnIndex: i, FieldName: fields[i].Name, Err: err}
		}
	}
	return nil
}

// connPlans are the scan plans made with one connection's type map, by column position.
// The connection serves one caller at a time: only the caller holding it reads or adds
// plans.
type connPlans struct{ cols [][]columnPlan }

// columnPlan is a plan for a column of a type (oid, format) scanned into a destination
// of a Go type: all that pgx plans from.
type columnPlan struct {
	oid    uint32
	format int16
	typ    reflect.Type
	plan   pgtype.ScanPlan
}

// plansPerColumn is how many plans are kept for one column position: statements whose
// columns differ there (the extra columns after taskColumns) take turns.
const plansPerColumn = 4

func (c *connPlans) plan(m *pgtype.Map, i int, f pgconn.FieldDescription, d any) pgtype.ScanPlan {
	for len(c.cols) <= i {
		c.cols = append(c.cols, nil)
	}
	typ, col := reflect.TypeOf(d), c.cols[i]
	for _, p := range col {
		if p.oid == f.DataTypeOID && p.format == f.Format && p.typ == typ {
			return p.plan
		}
	}
	p := columnPlan{oid: f.DataTypeOID, format: f.Format, typ: typ, plan: m.PlanScan(f.DataTypeOID, f.Format, d)}
	if len(col) < plansPerColumn {
		col = append(col, columnPlan{})
	}
	copy(col[1:], col) // the newest first; the oldest goes when the column is full
	col[0] = p
	c.cols[i] = col
	return p.plan
}

// planCache holds the plans of each connection's type map; it does not keep a closed
// connection's type map alive.
type planCache struct {
	mu    sync.Mutex
	byMap map[weak.Pointer[pgtype.Map]]*connPlans
}

// maxPlanMaps bounds the type maps remembered; beyond it, those of closed connections
// are forgotten, and if that is not enough, all.
const maxPlanMaps = 1024

// scanPlans is the process's cache of scan plans. What it holds derives from the
// connections' type maps and the destinations' types alone: it is never observable but
// as work saved.
var scanPlans planCache

func (c *planCache) of(m *pgtype.Map) *connPlans {
	k := weak.Make(m)
	c.mu.Lock()
	defer c.mu.Unlock()
	if p, ok := c.byMap[k]; ok {
		return p
	}
	if len(c.byMap) >= maxPlanMaps {
		for k := range c.byMap {
			if k.Value() == nil {
				delete(c.byMap, k)
			}
		}
		if len(c.byMap) >= maxPlanMaps {
			clear(c.byMap)
		}
	}
	if c.byMap == nil {
		c.byMap = map[weak.Pointer[pgtype.Map]]*connPlans{}
	}
	p := &connPlans{}
	c.byMap[k] = p
	return p
}
