package ghspec

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha512"
	"encoding/base64"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync/atomic"
	"testing"
)

// TestFetchVerifiesAndCaches: a package is used only when its tarball has the pinned
// integrity, and is then read from the cache without the registry.
func TestFetchVerifiesAndCaches(t *testing.T) {
	var tgz bytes.Buffer
	zw := gzip.NewWriter(&tgz)
	tw := tar.NewWriter(zw)
	content := []byte("type Query { ok: Boolean }\n")
	if err := tw.WriteHeader(&tar.Header{Name: "package/schema.graphql", Mode: 0o644, Size: int64(len(content))}); err != nil {
		t.Fatal(err)
	}
	if _, err := tw.Write(content); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	sum := sha512.Sum512(tgz.Bytes())
	var served atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		served.Add(1)
		if r.URL.Path != "/@octokit/graphql-schema/-/graphql-schema-1.2.3.tgz" {
			http.NotFound(w, r)
			return
		}
		_, _ = w.Write(tgz.Bytes())
	}))
	defer srv.Close()
	defer func(old string) { registry = old }(registry)
	registry = srv.URL

	pkg := npmFile{pkg: "@octokit/graphql-schema", version: "1.2.3", file: "schema.graphql",
		integrity: "sha512-" + base64.StdEncoding.EncodeToString(make([]byte, sha512.Size))}
	dir := t.TempDir()
	if _, err := pkg.read(t.Context(), dir); err == nil || !strings.Contains(err.Error(), "integrity") {
		t.Fatalf("a tarball with another integrity: %v, want refused", err)
	}
	if _, err := os.Stat(pkg.cachePath(dir)); err == nil {
		t.Fatalf("the refused tarball's file was cached")
	}

	pkg.integrity = "sha512-" + base64.StdEncoding.EncodeToString(sum[:])
	for range 2 {
		got, err := pkg.read(t.Context(), dir)
		if err != nil || !bytes.Equal(got, content) {
			t.Fatalf("read = %q, %v; want the package's file", got, err)
		}
	}
	if served.Load() != 2 {
		t.Errorf("the registry served %d requests, want 2 (the refused one, then one: the second read is cached)", served.Load())
	}
}
