package bench

import (
	"bufio"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// The generated repository: a main branch whose first commit writes the whole tree,
// files of 1–39 KiB, a hundred to a directory, and whose later commits each rewrite
// about genCommitBytes of them with new content, until every version of every file
// adds up to the history's size. The content comes from a seeded generator, so the
// same sizes give the same repository (and the same head) on every machine, and it is
// incompressible, so the pack on disk is as large as the history asked for.
const (
	genVersion     = 1 // part of the cache's name: a change to the generator makes a new repository
	genSeed        = 35
	genMinFile     = 1 << 10
	genMaxFile     = 39 << 10
	genPerDir      = 100
	genCommitBytes = 1 << 20
	genManifest    = "whilly-bench.json" // written last: a repository without it is incomplete
)

// workspaceRepo returns the cached repository of o's sizes, generating it first when
// the cache does not hold it.
func workspaceRepo(ctx context.Context, o WorkspaceOptions) (WorkspaceRepo, error) {
	s := Setup{Progress: o.Progress}
	dir := filepath.Join(o.CacheDir, fmt.Sprintf("workspace-v%d-h%d-t%d.git", genVersion, o.HistoryMB, o.TreeMB))
	var repo WorkspaceRepo
	if err := readJSONFile(filepath.Join(dir, genManifest), &repo); err == nil {
		repo.Dir, repo.Generated, repo.GenSeconds = dir, false, 0
		s.progressf("reusing the repository %s (%d commits, %d files, %.0f MiB packed)", dir, repo.Commits, repo.Files, float64(repo.PackBytes)/(1<<20))
		return repo, nil
	} else if !errors.Is(err, os.ErrNotExist) {
		return WorkspaceRepo{}, err
	}
	if err := os.MkdirAll(o.CacheDir, 0o750); err != nil {
		return WorkspaceRepo{}, fmt.Errorf("make the bench's cache directory: %w", err)
	}
	// Made next to its final place and renamed there when whole.
	tmp, err := os.MkdirTemp(o.CacheDir, "workspace-tmp-")
	if err != nil {
		return WorkspaceRepo{}, fmt.Errorf("make a directory for the repository: %w", err)
	}
	defer func() { _ = os.RemoveAll(tmp) }()
	s.progressf("generating a repository of about %d MiB of history and a %d MiB tree in %s (once; later runs reuse it)", o.HistoryMB, o.TreeMB, dir)
	start := time.Now()
	repo, err = generateRepo(ctx, tmp, o)
	if err != nil {
		return WorkspaceRepo{}, err
	}
	repo.GenSeconds = time.Since(start).Seconds()
	if err := writeJSONFile(filepath.Join(tmp, genManifest), repo); err != nil {
		return WorkspaceRepo{}, fmt.Errorf("write the repository's manifest: %w", err)
	}
	_ = os.RemoveAll(dir) // an incomplete one, left by an interrupted run
	if err := os.Rename(tmp, dir); err != nil {
		return WorkspaceRepo{}, fmt.Errorf("move the generated repository into the cache: %w", err)
	}
	repo.Dir, repo.Generated = dir, true
	s.progressf("generated in %.1f s: %d commits, %d files, %.0f MiB packed", repo.GenSeconds, repo.Commits, repo.Files, float64(repo.PackBytes)/(1<<20))
	return repo, nil
}

// genFile is a file of the generated tree.
type genFile struct {
	path string
	size int
}

// generateRepo writes the repository into the bare repository dir with git fast-import.
func generateRepo(ctx context.Context, dir string, o WorkspaceOptions) (WorkspaceRepo, error) {
	if _, err := gitOut(ctx, dir, "init", "-q", "--bare", "-b", "main"); err != nil {
		return WorkspaceRepo{}, err
	}
	// Every blob is larger than the delta threshold, so fast-import streams it to the
	// pack without looking for a delta, which random content would not give; level 0
	// deflate, as any level would store it uncompressed anyway.
	cmd := exec.CommandContext(ctx, "git", "-c", "core.compression=0", "-c", "pack.compression=0",
		"fast-import", "--quiet", "--big-file-threshold=512")
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return WorkspaceRepo{}, fmt.Errorf("git fast-import: %w", err)
	}
	if err := cmd.Start(); err != nil {
		return WorkspaceRepo{}, fmt.Errorf("start git fast-import: %w", err)
	}
	repo := WorkspaceRepo{HistoryMB: o.HistoryMB, TreeMB: o.TreeMB}
	p := &genProgress{w: o.Progress, live: o.Live, total: int64(o.HistoryMB) << 20}
	werr := writeHistory(in, &repo, p)
	if cerr := in.Close(); werr == nil {
		werr = cerr
	}
	if err := cmd.Wait(); err != nil {
		return WorkspaceRepo{}, fmt.Errorf("git fast-import: %w: %s", err, strings.TrimSpace(stderr.String()))
	}
	if werr != nil {
		return WorkspaceRepo{}, fmt.Errorf("feed git fast-import: %w", werr)
	}
	p.done()
	if repo.Head, err = gitOut(ctx, dir, "rev-parse", "refs/heads/main"); err != nil {
		return WorkspaceRepo{}, err
	}
	packs, err := filepath.Glob(filepath.Join(dir, "objects", "pack", "*.pack"))
	if err != nil {
		return WorkspaceRepo{}, fmt.Errorf("find the repository's packs: %w", err)
	}
	for _, pack := range packs {
		info, err := os.Stat(pack)
		if err != nil {
			return WorkspaceRepo{}, fmt.Errorf("size the repository's packs: %w", err)
		}
		repo.PackBytes += info.Size()
	}
	return repo, nil
}

// writeHistory writes the fast-import stream of the whole history to w and fills in
// repo's counts.
func writeHistory(w io.Writer, repo *WorkspaceRepo, p *genProgress) error {
	var seed [32]byte
	binary.LittleEndian.PutUint64(seed[:], genSeed)
	content := rand.NewChaCha8(seed) // the files' bytes
	binary.LittleEndian.PutUint64(seed[:], genSeed+1)
	pick := rand.New(rand.NewChaCha8(seed)) // sizes and which files change
	bw := bufio.NewWriterSize(w, 1<<20)
	buf := make([]byte, genMaxFile)
	treeTarget, historyTarget := int64(repo.TreeMB)<<20, int64(repo.HistoryMB)<<20

	var files []genFile
	mark := 0
	blob := func(size int) (int, error) {
		mark++
		_, _ = content.Read(buf[:size]) // ChaCha8.Read never fails
		if _, err := fmt.Fprintf(bw, "blob\nmark :%d\ndata %d\n", mark, size); err != nil {
			return 0, err
		}
		if _, err := bw.Write(buf[:size]); err != nil {
			return 0, err
		}
		if err := bw.WriteByte('\n'); err != nil {
			return 0, err
		}
		repo.BlobBytes += int64(size)
		p.add(int64(size))
		return mark, nil
	}
	type change struct {
		mark int
		path string
	}
	commit := func(msg string, changes []change) error {
		repo.Commits++
		at := 1_700_000_000 + int64(repo.Commits)*600
		if _, err := fmt.Fprintf(bw, "commit refs/heads/main\ncommitter Whilly Bench <bench@whilly.invalid> %d +0000\ndata %d\n%s\n",
			at, len(msg), msg); err != nil {
			return err
		}
		for _, c := range changes {
			if _, err := fmt.Fprintf(bw, "M 100644 :%d %s\n", c.mark, c.path); err != nil {
				return err
			}
		}
		_, err := bw.WriteString("\n")
		return err
	}

	// The first commit: the whole tree.
	var first []change
	for repo.TreeBytes < treeTarget || len(files) == 0 {
		size := genMinFile + pick.IntN(genMaxFile-genMinFile+1)
		size = int(min(int64(size), max(treeTarget-repo.TreeBytes, genMinFile)))
		f := genFile{path: fmt.Sprintf("src/p%03d/f%05d.dat", len(files)/genPerDir, len(files)), size: size}
		m, err := blob(size)
		if err != nil {
			return err
		}
		files = append(files, f)
		first = append(first, change{m, f.path})
		repo.TreeBytes += int64(size)
	}
	if err := commit("Initial tree", first); err != nil {
		return err
	}
	// Then edits: files rewritten with new content of their size.
	for repo.BlobBytes < historyTarget {
		var changes []change
		for n := int64(0); n < genCommitBytes && repo.BlobBytes < historyTarget; {
			f := files[pick.IntN(len(files))]
			m, err := blob(f.size)
			if err != nil {
				return err
			}
			changes = append(changes, change{m, f.path})
			n += int64(f.size)
		}
		if err := commit(fmt.Sprintf("Edit %d files", len(changes)), changes); err != nil {
			return err
		}
	}
	repo.Files = len(files)
	return bw.Flush()
}

// genProgress reports the generation's progress: a line rewritten in place on a
// terminal, else a line every tenth.
type genProgress struct {
	w     io.Writer
	live  bool
	total int64
	n     int64
	shown int64 // the last percentage shown
}

func (p *genProgress) add(n int64) {
	if p.w == nil {
		return
	}
	p.n += n
	pct := min(p.n*100/max(p.total, 1), 100)
	switch {
	case p.live && pct != p.shown:
		_, _ = fmt.Fprintf(p.w, "\rbench: generating: %d%% (%d of %d MiB)", pct, p.n>>20, p.total>>20)
	case !p.live && pct/10 != p.shown/10:
		_, _ = fmt.Fprintf(p.w, "bench: generating: %d%% (%d of %d MiB)\n", pct, p.n>>20, p.total>>20)
	}
	p.shown = pct
}

// done ends the line rewritten in place.
func (p *genProgress) done() {
	if p.w != nil && p.live {
		_, _ = fmt.Fprintln(p.w)
	}
}

// readJSONFile reads the JSON at path into v.
func readJSONFile(path string, v any) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("read %s: %w", path, err)
	}
	return nil
}

// writeJSONFile writes v as JSON to path.
func writeJSONFile(path string, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o600)
}
