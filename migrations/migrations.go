// Package migrations owns whilly's database schema: the numbered SQL files embedded in
// the binary (NNNN_name.up.sql / NNNN_name.down.sql), applying and reverting them
// together with River's own migrations, and reporting which are applied. Up and Down
// hold a session advisory lock for their whole run, so several `whilly serve`
// processes starting at once migrate one after the other.
//
// It imports pgx and River's migrator, and must not import any other whilly package:
// queries against the schema live in package queue.
package migrations

import (
	"cmp"
	"context"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"fmt"
	"io/fs"
	"log/slog"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"
	"github.com/riverqueue/river/rivermigrate"
)

//go:embed *.sql
var sqlFiles embed.FS

// Lines name the two sets of migrations in a Result or a State.
const (
	LineWhilly = "whilly"
	LineRiver  = "river"
)

// lockKey is the pg_advisory_lock key held by Up and Down ("whilly" in ASCII).
const lockKey int64 = 0x7768696c6c79

// Migration is one numbered schema change of whilly.
type Migration struct {
	Version int
	Name    string // from the file name: 0001_init.up.sql is "init"
	Up      string // SQL
	Down    string // SQL
}

// Step is one migration applied or reverted by Up or Down.
type Step struct {
	Line     string        `json:"line"` // LineWhilly or LineRiver
	Version  int           `json:"version"`
	Name     string        `json:"name"`
	Duration time.Duration `json:"duration_ns"`
}

// Result says what Up or Down did, in the order it did it. No steps: nothing to do.
type Result struct {
	Direction string `json:"direction"` // "up" or "down"
	Steps     []Step `json:"steps"`
}

// String renders the result for people, one line per step, without a final newline.
func (r Result) String() string {
	verb := "applied"
	if r.Direction == "down" {
		verb = "rolled back"
	}
	if len(r.Steps) == 0 {
		if r.Direction == "down" {
			return "nothing to roll back"
		}
		return "schema is up to date"
	}
	lines := make([]string, 0, len(r.Steps))
	for _, s := range r.Steps {
		lines = append(lines, fmt.Sprintf("%s %s migration %s (%v)", verb, s.Line, s.label(), s.Duration.Round(time.Millisecond)))
	}
	return strings.Join(lines, "\n")
}

func (s Step) label() string { return versionLabel(s.Line, s.Version, s.Name) }

func versionLabel(line string, version int, name string) string {
	if line == LineWhilly {
		return fmt.Sprintf("%04d_%s", version, name)
	}
	return fmt.Sprintf("%03d %s", version, name)
}

// State is one migration as Status sees it.
type State struct {
	Line      string    `json:"line"` // LineWhilly or LineRiver
	Version   int       `json:"version"`
	Name      string    `json:"name"`
	Applied   bool      `json:"applied"`
	AppliedAt time.Time `json:"applied_at,omitzero"` // zero when pending, and for River's (River does not record it)
}

// States is what Status returns; it prints as a table.
type States []State

// String renders the states as a table, one migration a line.
func (ss States) String() string {
	var b strings.Builder
	// Writes to a strings.Builder cannot fail, so neither can the tabwriter's.
	w := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	_, _ = fmt.Fprintln(w, "LINE\tMIGRATION\tSTATE")
	for _, s := range ss {
		state := "pending"
		switch {
		case s.Applied && !s.AppliedAt.IsZero():
			state = "applied " + s.AppliedAt.UTC().Format(time.DateTime) + " UTC"
		case s.Applied:
			state = "applied"
		}
		_, _ = fmt.Fprintf(w, "%s\t%s\t%s\n", s.Line, versionLabel(s.Line, s.Version, s.Name), state)
	}
	_ = w.Flush() // writes to a strings.Builder cannot fail
	return b.String()
}

// All returns whilly's embedded migrations, by version.
func All() ([]Migration, error) {
	return load(sqlFiles)
}

// Fingerprint identifies the schema Up produces: a hash of whilly's migration files and
// River's migrations. Test helpers name template databases after it.
func Fingerprint() (string, error) {
	ms, err := All()
	if err != nil {
		return "", err
	}
	h := sha256.New() // a hash.Hash's Write never returns an error
	for _, m := range ms {
		_, _ = fmt.Fprintf(h, "whilly %d %s\n%s\n--\n%s\n", m.Version, m.Name, m.Up, m.Down)
	}
	migrator, err := rivermigrate.New(riverpgxv5.New(nil), &rivermigrate.Config{Logger: discard()})
	if err != nil {
		return "", fmt.Errorf("create river migrator: %w", err)
	}
	for _, m := range migrator.AllVersions() {
		_, _ = fmt.Fprintf(h, "river %d %s\n%s\n--\n%s\n", m.Version, m.Name, m.SQLUp, m.SQLDown)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

var fileName = regexp.MustCompile(`^(\d{4})_([a-z0-9_]+)\.(up|down)\.sql$`)

// load parses the migration files of fsys: every version needs an up and a down file.
func load(fsys fs.FS) ([]Migration, error) {
	entries, err := fs.ReadDir(fsys, ".")
	if err != nil {
		return nil, fmt.Errorf("read migration files: %w", err)
	}
	byVersion := map[int]*Migration{}
	for _, e := range entries {
		m := fileName.FindStringSubmatch(e.Name())
		if m == nil {
			return nil, fmt.Errorf("migration file %s: name is not NNNN_name.up.sql or NNNN_name.down.sql", e.Name())
		}
		version, _ := strconv.Atoi(m[1]) // four digits
		if version == 0 {
			return nil, fmt.Errorf("migration file %s: versions start at 0001", e.Name())
		}
		body, err := fs.ReadFile(fsys, e.Name())
		if err != nil {
			return nil, fmt.Errorf("read migration file %s: %w", e.Name(), err)
		}
		mig := byVersion[version]
		if mig == nil {
			mig = &Migration{Version: version, Name: m[2]}
			byVersion[version] = mig
		}
		if mig.Name != m[2] {
			return nil, fmt.Errorf("migration %04d has two names: %s and %s", version, mig.Name, m[2])
		}
		if m[3] == "up" {
			mig.Up = string(body)
		} else {
			mig.Down = string(body)
		}
	}
	ms := make([]Migration, 0, len(byVersion))
	for _, m := range byVersion {
		if m.Up == "" || m.Down == "" {
			return nil, fmt.Errorf("migration %04d_%s needs both an up and a down file, neither empty", m.Version, m.Name)
		}
		ms = append(ms, *m)
	}
	slices.SortFunc(ms, func(a, b Migration) int { return cmp.Compare(a.Version, b.Version) })
	return ms, nil
}

const createBookkeeping = `CREATE TABLE IF NOT EXISTS whilly_schema_migrations (
    version    integer     PRIMARY KEY,
    name       text        NOT NULL,
    applied_at timestamptz NOT NULL DEFAULT now()
)`

// Up applies every pending whilly migration, each in its own transaction, then River's.
// Applied versions this build does not know (a newer whilly ran) are left alone.
func Up(ctx context.Context, pool *pgxpool.Pool) (Result, error) {
	ms, err := All()
	if err != nil {
		return Result{}, err
	}
	res := Result{Direction: "up"}
	err = withLock(ctx, pool, func(conn *pgx.Conn) error {
		if _, err := conn.Exec(ctx, createBookkeeping); err != nil {
			return fmt.Errorf("create whilly_schema_migrations: %w", err)
		}
		applied, err := appliedVersions(ctx, conn)
		if err != nil {
			return err
		}
		for _, m := range ms {
			if _, ok := applied[m.Version]; ok {
				continue
			}
			start := time.Now()
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, m.Up); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "INSERT INTO whilly_schema_migrations (version, name) VALUES ($1, $2)", m.Version, m.Name)
				return err
			})
			if err != nil {
				return fmt.Errorf("apply migration %04d_%s: %w", m.Version, m.Name, err)
			}
			res.Steps = append(res.Steps, Step{Line: LineWhilly, Version: m.Version, Name: m.Name, Duration: time.Since(start)})
		}
		steps, err := migrateRiver(ctx, pool, rivermigrate.DirectionUp, nil)
		res.Steps = append(res.Steps, steps...)
		return err
	})
	if err != nil {
		return res, fmt.Errorf("migrate up: %w", err)
	}
	return res, nil
}

// Down reverts the last steps applied whilly migrations, newest first, each in its own
// transaction. steps <= 0 reverts all of them and then removes River's tables too, and
// the bookkeeping table, leaving the schema as before the first Up.
func Down(ctx context.Context, pool *pgxpool.Pool, steps int) (Result, error) {
	ms, err := All()
	if err != nil {
		return Result{}, err
	}
	known := map[int]Migration{}
	for _, m := range ms {
		known[m.Version] = m
	}
	res := Result{Direction: "down"}
	err = withLock(ctx, pool, func(conn *pgx.Conn) error {
		applied, err := appliedVersions(ctx, conn)
		if err != nil {
			return err
		}
		versions := make([]int, 0, len(applied))
		for v := range applied {
			versions = append(versions, v)
		}
		slices.Sort(versions)
		slices.Reverse(versions)
		if steps > 0 && steps < len(versions) {
			versions = versions[:steps]
		}
		for _, v := range versions {
			m, ok := known[v]
			if !ok {
				return fmt.Errorf("migration %04d_%s is applied but unknown to this build: revert it with the whilly that applied it", v, applied[v].name)
			}
			start := time.Now()
			err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(ctx, m.Down); err != nil {
					return err
				}
				_, err := tx.Exec(ctx, "DELETE FROM whilly_schema_migrations WHERE version = $1", v)
				return err
			})
			if err != nil {
				return fmt.Errorf("revert migration %04d_%s: %w", m.Version, m.Name, err)
			}
			res.Steps = append(res.Steps, Step{Line: LineWhilly, Version: m.Version, Name: m.Name, Duration: time.Since(start)})
		}
		if steps > 0 {
			return nil
		}
		if _, err := conn.Exec(ctx, "DROP TABLE IF EXISTS whilly_schema_migrations"); err != nil {
			return fmt.Errorf("drop whilly_schema_migrations: %w", err)
		}
		riverSteps, err := migrateRiver(ctx, pool, rivermigrate.DirectionDown, &rivermigrate.MigrateOpts{TargetVersion: -1})
		res.Steps = append(res.Steps, riverSteps...)
		return err
	})
	if err != nil {
		return res, fmt.Errorf("migrate down: %w", err)
	}
	return res, nil
}

// Status lists whilly's migrations (applied ones this build does not know included),
// then River's, each applied or pending. It takes no lock.
func Status(ctx context.Context, pool *pgxpool.Pool) (States, error) {
	ms, err := All()
	if err != nil {
		return nil, err
	}
	applied, err := appliedVersions(ctx, pool)
	if err != nil {
		return nil, fmt.Errorf("migration status: %w", err)
	}
	var states States
	for _, m := range ms {
		row, ok := applied[m.Version]
		states = append(states, State{Line: LineWhilly, Version: m.Version, Name: m.Name, Applied: ok, AppliedAt: row.at})
		delete(applied, m.Version)
	}
	for v, row := range applied { // applied by a newer whilly
		states = append(states, State{Line: LineWhilly, Version: v, Name: row.name, Applied: true, AppliedAt: row.at})
	}
	slices.SortFunc(states, func(a, b State) int { return cmp.Compare(a.Version, b.Version) })

	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: discard()})
	if err != nil {
		return nil, fmt.Errorf("migration status: create river migrator: %w", err)
	}
	existing, err := migrator.ExistingVersions(ctx)
	if err != nil {
		return nil, fmt.Errorf("migration status: river versions: %w", err)
	}
	riverApplied := map[int]bool{}
	for _, m := range existing {
		riverApplied[m.Version] = true
	}
	for _, m := range migrator.AllVersions() {
		states = append(states, State{Line: LineRiver, Version: m.Version, Name: m.Name, Applied: riverApplied[m.Version]})
	}
	return states, nil
}

type appliedRow struct {
	name string
	at   time.Time
}

// querier is what appliedVersions needs of a *pgx.Conn or a *pgxpool.Pool.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// appliedVersions reads whilly_schema_migrations; no table means nothing is applied.
func appliedVersions(ctx context.Context, conn querier) (map[int]appliedRow, error) {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass('whilly_schema_migrations') IS NOT NULL").Scan(&exists); err != nil {
		return nil, fmt.Errorf("look for whilly_schema_migrations: %w", err)
	}
	applied := map[int]appliedRow{}
	if !exists {
		return applied, nil
	}
	rows, err := conn.Query(ctx, "SELECT version, name, applied_at FROM whilly_schema_migrations")
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	var (
		v   int
		row appliedRow
	)
	_, err = pgx.ForEachRow(rows, []any{&v, &row.name, &row.at}, func() error {
		applied[v] = row
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read applied migrations: %w", err)
	}
	return applied, nil
}

// migrateRiver runs River's migrator, which takes its connections from pool.
func migrateRiver(ctx context.Context, pool *pgxpool.Pool, dir rivermigrate.Direction, opts *rivermigrate.MigrateOpts) ([]Step, error) {
	migrator, err := rivermigrate.New(riverpgxv5.New(pool), &rivermigrate.Config{Logger: discard()})
	if err != nil {
		return nil, fmt.Errorf("create river migrator: %w", err)
	}
	res, err := migrator.Migrate(ctx, dir, opts)
	if err != nil {
		return nil, fmt.Errorf("river migrate %s: %w", dir, err)
	}
	steps := make([]Step, 0, len(res.Versions))
	for _, v := range res.Versions {
		steps = append(steps, Step{Line: LineRiver, Version: v.Version, Name: v.Name, Duration: v.Duration})
	}
	return steps, nil
}

// withLock runs fn holding the migration advisory lock. The lock lives on a connection
// of its own, opened from the pool's configuration but outside the pool: callers
// waiting for the lock then hold no pool connection, so River's migrator (which uses
// the pool) can always get one, however many Up calls one process makes at once.
func withLock(ctx context.Context, pool *pgxpool.Pool, fn func(conn *pgx.Conn) error) error {
	conn, err := pgx.ConnectConfig(ctx, pool.Config().ConnConfig)
	if err != nil {
		return fmt.Errorf("connect for the migration lock: %w", err)
	}
	// Ending the session releases the lock, whatever happened to ctx meanwhile.
	defer func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
		_ = conn.Close(ctx)
	}()
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", lockKey); err != nil {
		return fmt.Errorf("take the migration lock: %w", err)
	}
	return fn(conn)
}

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }
