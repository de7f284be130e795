package queue

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// openTx is the transaction a batch began with a BEGIN sent in the pipeline of its first
// statements (hotTx), saving the round trip pgx's Begin costs. It is a pgx.Tx over the
// connection, for the hooks (River's InsertTx takes one); it has no nested transactions.
type openTx struct{ conn *pgx.Conn }

var _ pgx.Tx = openTx{}

var errNested = errors.New("a batch's transaction has no nested transactions")

func (t openTx) Begin(context.Context) (pgx.Tx, error) { return nil, errNested }

// Commit commits; a transaction that had failed answers ROLLBACK, which is an error.
func (t openTx) Commit(ctx context.Context) error {
	tag, err := t.conn.Exec(ctx, "COMMIT")
	if err != nil {
		return err
	}
	if tag.String() == "ROLLBACK" {
		return pgx.ErrTxCommitRollback
	}
	return nil
}

// Rollback rolls back. A connection left in a transaction when it fails is closed by the
// pool on release.
func (t openTx) Rollback(ctx context.Context) error {
	_, err := t.conn.Exec(ctx, "ROLLBACK")
	return err
}

func (t openTx) CopyFrom(ctx context.Context, table pgx.Identifier, cols []string, src pgx.CopyFromSource) (int64, error) {
	return t.conn.CopyFrom(ctx, table, cols, src)
}

func (t openTx) SendBatch(ctx context.Context, b *pgx.Batch) pgx.BatchResults {
	return t.conn.SendBatch(ctx, b)
}

// LargeObjects is not supported (no hook uses large objects): the zero value it returns
// has no transaction, and its methods would panic.
func (t openTx) LargeObjects() pgx.LargeObjects { return pgx.LargeObjects{} }

func (t openTx) Prepare(ctx context.Context, name, sql string) (*pgconn.StatementDescription, error) {
	return t.conn.Prepare(ctx, name, sql)
}

func (t openTx) Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error) {
	return t.conn.Exec(ctx, sql, args...)
}

func (t openTx) Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error) {
	return t.conn.Query(ctx, sql, args...)
}

func (t openTx) QueryRow(ctx context.Context, sql string, args ...any) pgx.Row {
	return t.conn.QueryRow(ctx, sql, args...)
}

func (t openTx) Conn() *pgx.Conn { return t.conn }
