package pglocal

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// ErrNoBinaries means no usable PostgreSQL server binaries were found. The CLI maps it
// to exit code 2; its message tells the user how to fix the machine.
var ErrNoBinaries = errors.New("no PostgreSQL server binaries (initdb, pg_ctl, postgres) found: " +
	"install PostgreSQL 14 or newer (e.g. `apt-get install postgresql` or `brew install postgresql`), " +
	"or set WHILLY_DATABASE_URL to an existing server")

// minMajor is the oldest server whilly supports.
const minMajor = 14

// FindBinaries returns the directory holding initdb, pg_ctl and postgres of the newest
// PostgreSQL it finds, searching in order: PATH, `pg_config --bindir`,
// /usr/lib/postgresql/*/bin (newest first), the Homebrew prefixes and /usr/local/pgsql/bin.
// It returns an error wrapping ErrNoBinaries when there is none.
func FindBinaries() (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b, err := findBinaries(ctx, binaryCandidates(ctx), 0)
	if err != nil {
		return "", err
	}
	return b.dir, nil
}

// binaries is a usable bin directory and the server version in it.
type binaries struct {
	dir     string
	version string // e.g. "15.18"
	major   int
}

// findBinaries returns the first candidate holding the server programs, of the given
// major version when wantMajor > 0 (a data directory only runs under its own major).
func findBinaries(ctx context.Context, candidates []string, wantMajor int) (binaries, error) {
	var notes []string
	seen := map[string]bool{}
	for _, dir := range candidates {
		if dir == "" || seen[dir] {
			continue
		}
		seen[dir] = true
		if !hasServerBinaries(dir) {
			continue
		}
		version, major, err := serverVersion(ctx, dir)
		if err != nil {
			notes = append(notes, fmt.Sprintf("%s: %v", dir, err))
			continue
		}
		switch {
		case wantMajor > 0 && major != wantMajor:
			notes = append(notes, fmt.Sprintf("%s has PostgreSQL %s", dir, version))
			continue
		case major < minMajor:
			notes = append(notes, fmt.Sprintf("%s has PostgreSQL %s, older than %d", dir, version, minMajor))
			continue
		}
		return binaries{dir: dir, version: version, major: major}, nil
	}
	if len(notes) > 0 {
		return binaries{}, fmt.Errorf("%w (%s)", ErrNoBinaries, strings.Join(notes, "; "))
	}
	return binaries{}, ErrNoBinaries
}

// binaryCandidates lists the directories to search, in order of preference.
func binaryCandidates(ctx context.Context) []string {
	dirs := filepath.SplitList(os.Getenv("PATH"))
	if pgConfig, err := exec.LookPath("pg_config"); err == nil {
		out, err := exec.CommandContext(ctx, pgConfig, "--bindir").Output()
		if err == nil {
			dirs = append(dirs, strings.TrimSpace(string(out)))
		}
	}
	dirs = append(dirs, globNewestFirst("/usr/lib/postgresql/*/bin")...)
	dirs = append(dirs, globNewestFirst("/usr/local/opt/postgresql*/bin")...)
	dirs = append(dirs, globNewestFirst("/opt/homebrew/opt/postgresql*/bin")...)
	dirs = append(dirs, "/usr/local/pgsql/bin")
	return dirs
}

var versionInPath = regexp.MustCompile(`(\d+)(?:\.(\d+))?`)

// globNewestFirst expands pattern and orders the matches by the version number in their
// path, highest first; a match without a number (Homebrew's unversioned "postgresql",
// which tracks the newest release) comes first.
func globNewestFirst(pattern string) []string {
	matches, _ := filepath.Glob(pattern) // the only error is a bad pattern, and these are constant
	key := func(p string) float64 {
		m := versionInPath.FindStringSubmatch(filepath.Base(filepath.Dir(p)))
		if m == nil {
			return 1e9
		}
		v, _ := strconv.ParseFloat(m[1], 64)
		if m[2] != "" {
			minor, _ := strconv.ParseFloat(m[2], 64)
			v += minor / 1000
		}
		return v
	}
	slices.SortStableFunc(matches, func(a, b string) int {
		ka, kb := key(a), key(b)
		switch {
		case ka > kb:
			return -1
		case ka < kb:
			return 1
		}
		return 0
	})
	return matches
}

// hasServerBinaries reports whether dir holds the programs needed to run a cluster.
func hasServerBinaries(dir string) bool {
	for _, name := range []string{"initdb", "pg_ctl", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
			return false
		}
	}
	return true
}

var serverVersionOutput = regexp.MustCompile(`\(PostgreSQL\) (\d+)(?:\.\d+)*`)

// serverVersion runs `postgres --version` from dir.
func serverVersion(ctx context.Context, dir string) (version string, major int, err error) {
	out, err := exec.CommandContext(ctx, filepath.Join(dir, "postgres"), "--version").Output()
	if err != nil {
		return "", 0, fmt.Errorf("run postgres --version: %w", err)
	}
	m := serverVersionOutput.FindSubmatch(out)
	if m == nil {
		return "", 0, fmt.Errorf("parse postgres --version output %q", strings.TrimSpace(string(out)))
	}
	major, err = strconv.Atoi(string(m[1]))
	if err != nil {
		return "", 0, fmt.Errorf("parse postgres major version: %w", err)
	}
	full := strings.TrimPrefix(string(m[0]), "(PostgreSQL) ")
	return full, major, nil
}
