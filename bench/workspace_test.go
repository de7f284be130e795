package bench_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/whilly-go/whilly/bench"
	"github.com/whilly-go/whilly/sandbox"
)

// TestMain lets this test binary be the init of the boxes the workspace bench makes.
func TestMain(m *testing.M) {
	sandbox.HandleInit()
	os.Exit(m.Run())
}

// The workspace bench at a tiny scale leaves, in the worker's workspace directory, two
// checkouts that each hold every file of the generated repository's main branch, at its
// size; a second generation with the same sizes makes the same repository. No timing is
// asserted.
func TestWorkspaceChecksOutTheGeneratedRepository(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	o := bench.WorkspaceOptions{HistoryMB: 3, TreeMB: 1, CacheDir: t.TempDir(), Root: t.TempDir(), Runs: 2}
	res, err := bench.Workspace(ctx, o)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Repo.Generated || res.Repo.Commits < 2 || res.Repo.Files == 0 {
		t.Fatalf("repository %+v: want a generated one with edits after its first commit", res.Repo)
	}
	if res.Repo.PackBytes < 3<<20 {
		t.Errorf("the pack holds %d bytes; 3 MiB of incompressible history cannot pack smaller", res.Repo.PackBytes)
	}
	tree := gitLines(t, res.Repo.Dir, "ls-tree", "-r", "-l", "main")
	if len(tree) != res.Repo.Files {
		t.Fatalf("main holds %d files, the result says %d", len(tree), res.Repo.Files)
	}
	for _, c := range []bench.Checkout{res.First, res.Second} {
		if !strings.HasPrefix(c.Dir, o.Root) {
			t.Fatalf("checkout of %s in %s, outside the workspace directory %s", c.PlanID, c.Dir, o.Root)
		}
		if c.Head != res.Repo.Head {
			t.Errorf("%s started from %s, want main's %s", c.PlanID, c.Head, res.Repo.Head)
		}
		for _, line := range tree {
			// <mode> SP <type> SP <object> SP <size> TAB <path>
			meta, path, _ := strings.Cut(line, "\t")
			f := strings.Fields(meta)
			want, err := strconv.ParseInt(f[3], 10, 64)
			if err != nil {
				t.Fatalf("ls-tree line %q: %v", line, err)
			}
			info, err := os.Stat(filepath.Join(c.Dir, path))
			if err != nil || info.Size() != want {
				t.Fatalf("%s: %s: %v, size %d; want %d bytes", c.PlanID, path, err, sizeOf(info), want)
			}
		}
	}
	if res.Box.Skipped != "" && os.Getenv("WHILLY_TEST_SANDBOX") == "require" {
		t.Errorf("box start skipped with WHILLY_TEST_SANDBOX=require: %s", res.Box.Skipped)
	}
	if res.Box.Skipped == "" && (res.Box.Runs != 2 || res.Box.BoxedP50Ms <= 0 || res.Box.UnboxedP50Ms <= 0) {
		t.Errorf("box start %+v: want two timed runs each way", res.Box)
	}

	again, err := bench.Workspace(ctx, bench.WorkspaceOptions{HistoryMB: 3, TreeMB: 1, CacheDir: t.TempDir(), Runs: 1})
	if err != nil {
		t.Fatal(err)
	}
	if again.Repo.Head != res.Repo.Head {
		t.Errorf("the same sizes generated %s, then %s: the generation is not deterministic", res.Repo.Head, again.Repo.Head)
	}
}

func sizeOf(info os.FileInfo) int64 {
	if info == nil {
		return -1
	}
	return info.Size()
}

// gitLines runs git in dir and returns its output's lines.
func gitLines(t *testing.T, dir string, args ...string) []string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git %v in %s: %v", args, dir, err)
	}
	return strings.Split(strings.TrimRight(string(out), "\n"), "\n")
}
