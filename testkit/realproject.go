package testkit

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Real open-source projects for the tests that build and test them in the box: fetched
// by the ecosystems' own clients from the registries this machine reaches, into a cache
// shared by test runs, so that only a first run downloads them.

// CacheDir returns the directory that test runs share for downloads: WHILLY_TEST_CACHE,
// default <user cache dir>/whilly-test. It is created when missing.
func CacheDir(t testing.TB) string {
	t.Helper()
	dir := os.Getenv("WHILLY_TEST_CACHE")
	if dir == "" {
		c, err := os.UserCacheDir()
		if err != nil {
			t.Fatalf("testkit: no cache directory for downloads (set WHILLY_TEST_CACHE): %v", err)
		}
		dir = filepath.Join(c, "whilly-test")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatalf("testkit: %v", err)
	}
	return dir
}

// GoModCache is the module cache GoModule downloads into (under CacheDir): the modules it
// holds and their dependencies are what an offline `go` (GOPROXY=off) finds there.
func GoModCache(t testing.TB) string {
	t.Helper()
	return filepath.Join(CacheDir(t), "gomod")
}

// GoModule downloads module@version and the modules its go.mod requires with `go mod
// download` into GoModCache and returns the module's source directory (read-only, as the
// module cache keeps it). When the download fails it skips the test only if the Go
// module proxy cannot be reached at all (and fails it under CI, where it must be).
func GoModule(t testing.TB, module, version string) string {
	t.Helper()
	goBin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("testkit: the go command is needed to fetch %s: %v", module, err)
	}
	cache := GoModCache(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run := func(dir string, args ...string) ([]byte, error) {
		cmd := exec.CommandContext(ctx, goBin, args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "GOMODCACHE="+cache, "GOFLAGS=-mod=mod", "GOWORK=off", "GOTOOLCHAIN=local")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			return out, fmt.Errorf("go %s: %w\n%s", strings.Join(args, " "), err, stderr.Bytes())
		}
		return out, nil
	}
	out, err := run(t.TempDir(), "mod", "download", "-json", module+"@"+version)
	var m struct{ Dir, Error string }
	if err == nil {
		err = json.Unmarshal(out, &m)
	}
	if err == nil && m.Error != "" {
		err = errors.New(m.Error)
	}
	if err == nil {
		// The module's own dependencies, as its tests need them.
		_, err = run(m.Dir, "mod", "download")
	}
	if err != nil {
		unreachable(t, goProxy(ctx, goBin), fmt.Errorf("download %s@%s: %w", module, version, err))
	}
	return m.Dir
}

// goProxy is the first registry of the go command's GOPROXY.
func goProxy(ctx context.Context, goBin string) string {
	out, err := exec.CommandContext(ctx, goBin, "env", "GOPROXY").Output()
	if err != nil {
		return "https://proxy.golang.org"
	}
	first, _, _ := strings.Cut(strings.TrimSpace(string(out)), ",")
	first, _, _ = strings.Cut(first, "|")
	if !strings.HasPrefix(first, "http") {
		return "https://proxy.golang.org"
	}
	return first
}

// NpmPackage fetches pkg@version with `npm pack` (the tarball the registry serves, tests
// included when the package ships them) into CacheDir and returns the directory it is
// unpacked in. Like GoModule, it skips only when the registry cannot be reached.
func NpmPackage(t testing.TB, pkg, version string) string {
	t.Helper()
	npm, err := exec.LookPath("npm")
	if err != nil {
		t.Fatalf("testkit: npm is needed to fetch %s: %v", pkg, err)
	}
	dir := filepath.Join(CacheDir(t), "npm", strings.ReplaceAll(pkg, "/", "+")+"@"+version)
	if _, err := os.Stat(filepath.Join(dir, "package.json")); err == nil {
		return dir
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	tmp := t.TempDir()
	cmd := exec.CommandContext(ctx, npm, "pack", "--json", "--pack-destination", tmp, pkg+"@"+version)
	cmd.Dir = tmp
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var packed []struct{ Filename string }
	if err == nil {
		err = json.Unmarshal(out, &packed)
	}
	if err == nil && len(packed) != 1 {
		err = fmt.Errorf("npm pack reported %d tarballs", len(packed))
	}
	if err != nil {
		registry := "https://registry.npmjs.org/"
		if out, rerr := exec.CommandContext(ctx, npm, "config", "get", "registry").Output(); rerr == nil {
			registry = strings.TrimSpace(string(out))
		}
		unreachable(t, registry, fmt.Errorf("npm pack %s@%s: %w\n%s", pkg, version, err, stderr.Bytes()))
	}
	staging := filepath.Join(tmp, "unpacked")
	if err := untarPackage(filepath.Join(tmp, packed[0].Filename), staging); err != nil {
		t.Fatalf("testkit: unpack %s@%s: %v", pkg, version, err)
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatalf("testkit: %v", err)
	}
	// Another test process may have won the race: then its copy is used.
	if err := os.Rename(staging, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "package.json")); serr != nil {
			t.Fatalf("testkit: keep %s@%s in %s: %v", pkg, version, dir, err)
		}
	}
	return dir
}

// untarPackage unpacks an npm tarball's package/ directory into dir: regular files (with
// their executable bits) and directories only.
func untarPackage(tarball, dir string) error {
	f, err := os.Open(tarball)
	if err != nil {
		return err
	}
	defer func() { _ = f.Close() }()
	gz, err := gzip.NewReader(f)
	if err != nil {
		return err
	}
	tr := tar.NewReader(gz)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		name := path.Clean(h.Name)
		rel, ok := strings.CutPrefix(name, "package/")
		if !ok || !fs.ValidPath(rel) {
			return fmt.Errorf("unexpected entry %q in the tarball", h.Name)
		}
		target := filepath.Join(dir, filepath.FromSlash(rel))
		switch h.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return err
			}
		case tar.TypeReg:
			mode := os.FileMode(0o644)
			if h.Mode&0o111 != 0 {
				mode = 0o755
			}
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return err
			}
			b, err := io.ReadAll(io.LimitReader(tr, 64<<20))
			if err != nil {
				return err
			}
			if err := os.WriteFile(target, b, mode); err != nil {
				return err
			}
		default:
			return fmt.Errorf("entry %q of the tarball is neither a file nor a directory", h.Name)
		}
	}
}

// unreachable ends a test whose download failed: a skip naming the reason when the
// registry cannot be reached at all (a failure under CI, which must reach it), else a
// failure with the download's error.
func unreachable(t testing.TB, registry string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	var probe error
	req, rerr := http.NewRequestWithContext(ctx, http.MethodHead, registry, nil)
	if rerr == nil {
		var resp *http.Response
		if resp, probe = http.DefaultClient.Do(req); probe == nil {
			_ = resp.Body.Close()
		}
	} else {
		probe = rerr
	}
	if probe == nil {
		t.Fatalf("testkit: %v", err)
	}
	if os.Getenv("CI") != "" {
		t.Fatalf("testkit: the registry %s cannot be reached (%v), and under CI it must be: %v", registry, probe, err)
	}
	t.Skipf("the registry %s cannot be reached from here: %v", registry, probe)
}

// ProjectFiles reads a project's directory into the files AddGitRepo commits (slash path
// → content, binary content included). AddGitRepo writes every file without its
// executable bit, and git keeps no other mode: an executable file, a link or anything
// else but regular files and directories fails the test rather than being lost.
func ProjectFiles(t testing.TB, dir string) map[string]string {
	t.Helper()
	root, err := os.OpenRoot(dir)
	if err != nil {
		t.Fatalf("testkit: %v", err)
	}
	defer func() { _ = root.Close() }()
	fsys := root.FS()
	files := map[string]string{}
	err = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			return nil
		case !info.Mode().IsRegular():
			return fmt.Errorf("%s is not a regular file (%v)", p, info.Mode().Type())
		case info.Mode()&0o111 != 0:
			return fmt.Errorf("%s is executable: its mode would be lost", p)
		}
		b, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		files[p] = string(b)
		return nil
	})
	if err != nil {
		t.Fatalf("testkit: read the project in %s: %v", dir, err)
	}
	return files
}
