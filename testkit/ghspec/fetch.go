package ghspec

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// npmFile is one file of a published npm package, pinned by version and by the
// integrity (sha512 of the tarball) the registry publishes for it.
type npmFile struct {
	pkg       string // @scope/name
	version   string
	integrity string // "sha512-<base64>", as `npm view <pkg>@<version> dist.integrity` prints it
	file      string // path inside the package, e.g. generated/api.github.com.json
}

// GitHub's published API descriptions, pinned (`npm view @octokit/openapi versions`).
var (
	restDescription = npmFile{
		pkg: "@octokit/openapi", version: "23.0.2",
		integrity: "sha512-pV8M7L9GY23AybNvTmo2nyjmpmnt6+2sRE/tqr0ZLQcPS4lnw7u5eZGNmwRNkBC3D7gZXbFx5AHzLUVRBXGDhg==",
		file:      "generated/api.github.com.json",
	}
	graphQLSchema = npmFile{
		pkg: "@octokit/graphql-schema", version: "15.26.1",
		integrity: "sha512-RFDC2MpRBd4AxSRvUeBIVeBU7ojN/SxDfALUd7iVYOSeEK3gZaqR2MGOysj4Zh2xj2RY5fQAUT+Oqq7hWTraMA==",
		file:      "schema.graphql",
	}
)

// registry is the npm registry the descriptions come from (a variable for the tests).
var registry = "https://registry.npmjs.org"

// tarballURL is the registry's address of the package's tarball.
func (f npmFile) tarballURL() string {
	_, name, _ := strings.Cut(f.pkg, "/") // @octokit/openapi → openapi
	return fmt.Sprintf("%s/%s/-/%s-%s.tgz", registry, f.pkg, name, f.version)
}

// cachePath is where the file is kept under the cache directory once fetched and
// verified, per version, so that a second test run reads it from disk.
func (f npmFile) cachePath(cacheDir string) string {
	pkg := strings.NewReplacer("@", "", "/", "-").Replace(f.pkg)
	return filepath.Join(cacheDir, pkg+"-"+f.version, filepath.Base(f.file))
}

// read returns the file, from the cache or else from the registry (verified, then cached).
func (f npmFile) read(ctx context.Context, cacheDir string) ([]byte, error) {
	path := f.cachePath(cacheDir)
	if b, err := os.ReadFile(path); err == nil {
		return b, nil
	}
	tgz, err := f.download(ctx)
	if err != nil {
		return nil, err
	}
	b, err := extract(tgz, "package/"+f.file)
	if err != nil {
		return nil, fmt.Errorf("read %s from %s@%s: %w", f.file, f.pkg, f.version, err)
	}
	if err := writeAtomic(path, b); err != nil {
		return nil, fmt.Errorf("cache %s@%s: %w", f.pkg, f.version, err)
	}
	return b, nil
}

// download fetches the tarball and checks it against the pinned integrity.
func (f npmFile) download(ctx context.Context) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, f.tarballURL(), nil)
	if err != nil {
		return nil, fmt.Errorf("fetch %s@%s: %w", f.pkg, f.version, err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch %s@%s from the npm registry: %w", f.pkg, f.version, err)
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch %s: HTTP %d", f.tarballURL(), resp.StatusCode)
	}
	tgz, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("fetch %s@%s: %w", f.pkg, f.version, err)
	}
	sum := sha512.Sum512(tgz)
	if got := "sha512-" + base64.StdEncoding.EncodeToString(sum[:]); got != f.integrity {
		return nil, fmt.Errorf("%s@%s from %s has integrity %s, want the pinned %s", f.pkg, f.version, f.tarballURL(), got, f.integrity)
	}
	return tgz, nil
}

// extract returns one file of a gzipped tarball.
func extract(tgz []byte, name string) ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(tgz))
	if err != nil {
		return nil, fmt.Errorf("ungzip: %w", err)
	}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("no %s in the package", name)
		}
		if err != nil {
			return nil, fmt.Errorf("untar: %w", err)
		}
		if h.Name == name {
			b, err := io.ReadAll(tr)
			if err != nil {
				return nil, fmt.Errorf("untar %s: %w", name, err)
			}
			return b, nil
		}
	}
}

// writeAtomic writes b to path through a temporary file, so that test processes
// running side by side never read a half-written file.
func writeAtomic(path string, b []byte) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return fmt.Errorf("create the cache directory: %w", err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), ".tmp-*")
	if err != nil {
		return fmt.Errorf("create a temporary file: %w", err)
	}
	defer func() { _ = os.Remove(tmp.Name()) }()
	if _, err := tmp.Write(b); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Chmod(0o644); err != nil {
		_ = tmp.Close()
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("write %s: %w", tmp.Name(), err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("rename into %s: %w", path, err)
	}
	return nil
}
