package queue

// The database server itself.

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// ServerVersion returns the version of the PostgreSQL server that pool reaches (whilly
// doctor), without touching whilly's schema.
func ServerVersion(ctx context.Context, pool *pgxpool.Pool) (string, error) {
	var v string
	if err := pool.QueryRow(ctx, `SHOW server_version`).Scan(&v); err != nil {
		return "", fmt.Errorf("read the server version: %w", err)
	}
	return v, nil
}
