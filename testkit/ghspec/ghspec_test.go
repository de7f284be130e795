package ghspec_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/testkit"
	"github.com/whilly-go/whilly/testkit/ghspec"
)

func loadSpec(t *testing.T) *ghspec.Spec {
	t.Helper()
	start := time.Now()
	s, err := ghspec.Load(testkit.CacheDir(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("Load: %v", time.Since(start))
	return s
}

// TestMatch: requests find GitHub's operation the way GitHub routes them.
func TestMatch(t *testing.T) {
	s := loadSpec(t)
	cases := []struct {
		method, path, template string
		params                 map[string]string
	}{
		{"GET", "/repos/octo/shop/issues/comments/5", "/repos/{owner}/{repo}/issues/comments/{comment_id}", map[string]string{"comment_id": "5"}},
		{"GET", "/repos/octo/shop/issues/5", "/repos/{owner}/{repo}/issues/{issue_number}", map[string]string{"issue_number": "5"}},
		{"GET", "/repos/octo/shop/contents/.github/workflows/ci.yml", "/repos/{owner}/{repo}/contents/{path}",
			map[string]string{"path": ".github/workflows/ci.yml"}},
		{"DELETE", "/repos/octo/shop/issues/5/labels/needs%20review", "/repos/{owner}/{repo}/issues/{issue_number}/labels/{name}",
			map[string]string{"name": "needs review"}},
		{"GET", "/repos/octo/shop/issue/5", "", nil},      // not an operation
		{"GET", "/repos/octo/shop/nothing/here", "", nil}, // {repo} takes one segment only
	}
	for _, c := range cases {
		template, params := s.Operation(c.method, c.path)
		if template != c.template {
			t.Errorf("%s %s reached %q, want %q", c.method, c.path, template, c.template)
			continue
		}
		for k, v := range c.params {
			if params[k] != v {
				t.Errorf("%s %s: parameter %s = %q, want %q", c.method, c.path, k, params[k], v)
			}
		}
	}
}

// TestCheckCost measures the checks: the first request of an operation loads it, the
// next ones only validate.
func TestCheckCost(t *testing.T) {
	s := loadSpec(t)
	req := func() *http.Request {
		r, _ := http.NewRequest("POST", "http://fake/repos/octo/shop/issues/1/comments", strings.NewReader(`{"body":"hi"}`))
		r.Header.Set("Content-Type", "application/json")
		return r
	}
	start := time.Now()
	if _, err := s.Check(req()); err != nil {
		t.Fatal(err)
	}
	first := time.Since(start)
	start = time.Now()
	const n = 200
	for range n {
		if _, err := s.Check(req()); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("first check %v, then %v per request", first, time.Since(start)/n)
}
