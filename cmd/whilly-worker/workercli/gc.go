package workercli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/whilly-go/whilly/internal/config"
	"github.com/whilly-go/whilly/worker"
)

const gcUsage = `Usage: whilly-worker gc [--dir D] [--max-age 72h] [--max-size 5GB] [--dry-run]

Removes workspaces (per-plan checkouts) unused for longer than --max-age, then the least
recently used ones until the rest take at most --max-size. Workspaces in use by a task
are left alone. Then the repositories' object stores that no workspace uses, by the
same rules. The directory is WHILLY_WORKSPACE_DIR, default
<user cache dir>/whilly/workspaces.

Examples:
  whilly-worker gc --dry-run
  whilly-worker gc --max-age 24h --max-size 2GiB

Flags:
`

// gcMain runs `whilly-worker gc`.
func gcMain(ctx context.Context, args []string, stdout, stderr io.Writer, getenv func(string) string) int {
	fs := flag.NewFlagSet("whilly-worker gc", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprint(stderr, gcUsage)
		fs.PrintDefaults()
	}
	var (
		dir     = fs.String("dir", config.New(getenv).Raw(config.WorkspaceDir), "workspace directory ("+string(config.WorkspaceDir)+")")
		maxAge  = fs.String("max-age", worker.DefaultGCMaxAge.String(), "remove workspaces unused for longer (Go duration or seconds; 0 keeps all)")
		maxSize = fs.String("max-size", "5GB", "then keep at most this much (e.g. 500MB, 5GB, 2GiB; 0: no limit)")
		dryRun  = fs.Bool("dry-run", false, "print what would be removed, remove nothing")
	)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fail := func(code int, format string, a ...any) int {
		fmt.Fprintf(stderr, "whilly-worker gc: "+format+"\n", a...)
		return code
	}
	if fs.NArg() > 0 {
		return fail(2, "unexpected argument %q (see --help)", fs.Arg(0))
	}
	var opt worker.GCOptions
	if *maxAge != "0" {
		d, err := config.ParseDuration(*maxAge)
		if err != nil {
			return fail(2, "--max-age: %v", err)
		}
		opt.MaxAge = d
	}
	size, err := worker.ParseSize(*maxSize)
	if err != nil {
		return fail(2, "--max-size: %v", err)
	}
	opt.MaxSize, opt.DryRun = size, *dryRun
	if *dir == "" {
		if *dir, err = worker.DefaultWorkspaceDir(); err != nil {
			return fail(2, "%v", err)
		}
	}
	res, err := worker.NewWorkspaces(*dir, "", nil).GC(ctx, opt)
	verb := "removed"
	if opt.DryRun {
		verb = "would remove"
	}
	for _, w := range res.Removed {
		fmt.Fprintf(stdout, "%s %s (plan %s, %s, unused for %s)\n", verb, w.Dir, orUnknown(w.PlanID),
			worker.FormatSize(w.Bytes), time.Since(w.LastUsed).Round(time.Minute))
	}
	for _, s := range res.Stores {
		fmt.Fprintf(stdout, "%s %s (repository store, %s, unused for %s)\n", verb, s.Dir, worker.FormatSize(s.Bytes),
			time.Since(s.LastUsed).Round(time.Minute))
	}
	fmt.Fprintf(stdout, "workspaces_removed=%d bytes_freed=%d workspaces_kept=%d bytes_kept=%d workspaces_busy=%d stores_removed=%d\n",
		len(res.Removed), res.FreedBytes, res.Kept, res.KeptBytes, res.Busy, len(res.Stores))
	if err != nil {
		return fail(1, "%v", err)
	}
	return 0
}

func orUnknown(s string) string {
	if s == "" {
		return "unknown"
	}
	return s
}
