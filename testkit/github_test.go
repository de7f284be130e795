package testkit_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"

	"github.com/whilly-go/whilly/testkit"
)

// failures is a testing.TB that records what would fail the test instead of failing it.
type failures struct {
	testing.TB
	mu   sync.Mutex
	errs []string
}

func (f *failures) Errorf(format string, args ...any) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.errs = append(f.errs, fmt.Sprintf(format, args...))
}

func (f *failures) take() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	errs := f.errs
	f.errs = nil
	return errs
}

// send makes one request to the fake with its static token and returns the status.
func send(t *testing.T, gh *testkit.GitHub, method, path, body string) int {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, gh.Server.URL+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "token "+gh.Token)
	if body != "" {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode
}

const readyForReview = `mutation($id: ID!) { markPullRequestReadyForReview(input: {pullRequestId: $id}) { pullRequest { number isDraft } } }`

// graphQL is the body of a GraphQL request.
func graphQL(query, variables string) string {
	return fmt.Sprintf(`{"query": %q, "variables": %s}`, query, variables)
}

// TestFakeRefusesWhatGitHubWould: a request GitHub's published API descriptions say
// GitHub would refuse fails the test that sent it through the fake, and the same
// request made right does not.
func TestFakeRefusesWhatGitHubWould(t *testing.T) {
	cases := []struct {
		name             string
		method, path     string
		bad, good        string // bodies
		badPath, goodURL string // when the path differs
	}{
		{name: "unknown path", method: "GET", badPath: "/repos/octo/shop/issue/1", goodURL: "/repos/octo/shop/issues/1"},
		{name: "undeclared query parameter", method: "GET",
			badPath: "/repos/octo/shop/issues/1/comments?label=x", goodURL: "/repos/octo/shop/issues/1/comments?per_page=100"},
		{name: "query parameter out of its schema", method: "GET",
			badPath: "/repos/octo/shop/issues/1/comments?per_page=many", goodURL: "/repos/octo/shop/issues/1/comments?per_page=100"},
		{name: "body field of the wrong type", method: "POST", path: "/repos/octo/shop/issues/1/comments",
			bad: `{"body": 42}`, good: `{"body": "hello"}`},
		{name: "body without a required field", method: "POST", path: "/repos/octo/shop/labels",
			bad: `{"color": "ededed"}`, good: `{"name": "whilly-pending", "color": "ededed"}`},
		{name: "GraphQL field that does not exist", method: "POST", path: "/graphql",
			bad:  graphQL(strings.Replace(readyForReview, "isDraft", "isDrafted", 1), `{"id": "PR_1"}`),
			good: graphQL(readyForReview, `{"id": "PR_1"}`)},
		{name: "GraphQL variable of the wrong type", method: "POST", path: "/graphql",
			bad: graphQL(readyForReview, `{"id": {"node": "PR_1"}}`), good: graphQL(readyForReview, `{"id": "PR_1"}`)},
		{name: "GraphQL variable missing", method: "POST", path: "/graphql",
			bad: graphQL(readyForReview, `{}`), good: graphQL(readyForReview, `{"id": "PR_1"}`)},
		{name: "GraphQL document that does not parse", method: "POST", path: "/graphql",
			bad: graphQL("mutation { markPullRequestReadyForReview(", `{}`), good: graphQL(readyForReview, `{"id": "PR_1"}`)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rec := &failures{TB: t}
			gh := testkit.NewGitHub(rec)
			gh.AddIssue("octo/shop", 1, "t", "b", "alice")
			bad, good := c.path, c.path
			if c.badPath != "" {
				bad, good = c.badPath, c.goodURL
			}
			status := send(t, gh, c.method, bad, c.bad)
			errs := rec.take()
			if len(errs) == 0 {
				t.Errorf("%s %s %s (answered %d) did not fail the test", c.method, bad, c.bad, status)
			}
			if status < 400 || status >= 500 {
				t.Errorf("%s %s %s answered %d, want the 4xx GitHub answers", c.method, bad, c.bad, status)
			}
			t.Logf("reported: %q", errs)
			if status := send(t, gh, c.method, good, c.good); status >= 300 {
				t.Errorf("%s %s %s answered %d, want it accepted", c.method, good, c.good, status)
			}
			if errs := rec.take(); len(errs) > 0 {
				t.Errorf("%s %s %s failed the test: %q", c.method, good, c.good, errs)
			}
		})
	}
}

// TestFakeOffSpecAllowed: a test may send a request GitHub would refuse on purpose, and
// the endpoints GitHub serves outside its API (the OAuth web flow, git) are not judged.
func TestFakeOffSpecAllowed(t *testing.T) {
	rec := &failures{TB: t}
	gh := testkit.NewGitHub(rec)
	gh.AddIssue("octo/shop", 1, "t", "b", "alice")
	gh.AllowOffSpec("GET", `/repos/octo/shop/issues/1/comments`)
	if status := send(t, gh, "GET", "/repos/octo/shop/issues/1/comments?label=x", ""); status != http.StatusOK {
		t.Errorf("the allowed request answered %d, want 200", status)
	}
	if status := send(t, gh, "GET", "/login/oauth/authorize?client_id=nosuch&redirect_uri=x", ""); status != http.StatusNotFound {
		t.Errorf("the OAuth page answered %d, want the fake's 404 for an unknown client", status)
	}
	if errs := rec.take(); len(errs) > 0 {
		t.Errorf("failed the test: %q", errs)
	}
	if send(t, gh, "GET", "/repos/octo/shop/issues/2/comments?label=x", ""); len(rec.take()) == 0 {
		t.Errorf("a request outside the allowed path did not fail the test")
	}
}
