package app_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/riverqueue/river"

	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/testkit"
)

const repo = "octo/shop"

func newFake(t *testing.T) (*testkit.GitHub, *app.Factory) {
	t.Helper()
	gh := testkit.NewGitHub(t)
	gh.Install(7, repo)
	gh.AddIssue(repo, 12, "Harden login", "body", "octo")
	gh.SetPermission(repo, "octo", "admin")
	f, err := app.NewFactory(app.Config{AppID: gh.AppID, PrivateKey: gh.KeyPEM, APIURL: gh.URL(), Token: gh.Token})
	if err != nil {
		t.Fatal(err)
	}
	return gh, f
}

// newInstallation is the fake and the client of its installation 7.
func newInstallation(t *testing.T) (*testkit.GitHub, app.Client) {
	t.Helper()
	gh, f := newFake(t)
	c, err := f.Installation(context.Background(), 7)
	if err != nil {
		t.Fatal(err)
	}
	return gh, c
}

var ref = app.IssueRef{Repo: app.Repo{Owner: "octo", Name: "shop"}, Number: 12}

func TestInstallationClientsShareOneCachedTokenPerInstallation(t *testing.T) {
	t.Parallel()
	gh, f := newFake(t)
	gh.Install(8, "octo/other")
	ctx := context.Background()
	var wg sync.WaitGroup
	for i := range 20 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			id := int64(7)
			if i%2 == 1 {
				id = 8
			}
			c, err := f.Installation(ctx, id)
			if err != nil {
				t.Error(err)
				return
			}
			if _, err := c.Permission(ctx, ref.Repo, "octo"); err != nil && id == 7 {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := gh.CountRequests("POST", `/app/installations/7/access_tokens`); n != 1 {
		t.Errorf("%d token exchanges for installation 7, want 1 (cached)", n)
	}
	if n := gh.CountRequests("POST", `/app/installations/8/access_tokens`); n != 1 {
		t.Errorf("%d token exchanges for installation 8, want 1", n)
	}
	c, _ := f.Installation(ctx, 7)
	if p, err := c.Permission(ctx, ref.Repo, "stranger"); err != nil || p != app.PermissionNone {
		t.Errorf("permission of a stranger = %q, %v; want none", p, err)
	}
}

func TestStaticTokenAndAppClients(t *testing.T) {
	t.Parallel()
	gh, f := newFake(t)
	ctx := context.Background()
	c, err := f.Installation(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	is, err := c.Issue(ctx, ref)
	if err != nil || is.Title != "Harden login" || is.State != "open" {
		t.Fatalf("issue = %+v, %v", is, err)
	}
	id, err := c.CreateComment(ctx, ref, "hello")
	if err != nil {
		t.Fatal(err)
	}
	if cm, err := c.GetComment(ctx, ref.Repo, id); err != nil || cm.Author != gh.TokenUser || cm.AuthorBot {
		t.Errorf("comment by the token = %+v, %v", cm, err)
	}
	ac, err := f.App(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if inst, err := ac.RepoInstallation(ctx, ref.Repo); err != nil || inst != 7 {
		t.Errorf("installation of %s = %d, %v; want 7", repo, inst, err)
	}
	tokenOnly, err := app.NewFactory(app.Config{Token: "x", APIURL: gh.URL()})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tokenOnly.App(ctx); !errors.Is(err, app.ErrNoApp) {
		t.Errorf("App without a key = %v, want ErrNoApp", err)
	}
	if _, err := app.NewFactory(app.Config{AppID: 1, PrivateKey: []byte("not a key")}); err == nil {
		t.Error("a bad private key was accepted")
	}
}

func TestGitHubErrorsMapToWhillysAndRateLimitsSnooze(t *testing.T) {
	t.Parallel()
	gh, c := newInstallation(t)
	ctx := context.Background()
	path := `/repos/octo/shop/issues/12/labels`
	gh.Fail(testkit.Fault{Method: "POST", Path: path, Status: http.StatusTooManyRequests, Header: map[string]string{"Retry-After": "7"}, Times: 1})
	var rl *app.RateLimitError
	err := c.AddLabels(ctx, ref, "x")
	if !errors.As(err, &rl) || rl.Wait != 7*time.Second || rl.Status != 429 {
		t.Fatalf("429 Retry-After 7 = %v, want a 7 s rate limit", err)
	}
	var snooze *river.JobSnoozeError
	if !errors.As(app.JobError(err), &snooze) || snooze.Duration != 7*time.Second {
		t.Errorf("JobError(rate limit) = %v, want a 7 s snooze", app.JobError(err))
	}

	gh.Fail(testkit.Fault{Method: "POST", Path: path, Status: http.StatusBadGateway, Times: 1})
	var se *app.StatusError
	if err := c.AddLabels(ctx, ref, "x"); !errors.As(err, &se) || !se.Temporary() {
		t.Errorf("502 = %v, want a temporary StatusError", err)
	} else if errors.As(app.JobError(err), &snooze) {
		t.Errorf("a 5xx must be retried with backoff, not snoozed")
	}
	if err := c.EditComment(ctx, ref.Repo, 999999, "x"); !errors.Is(err, app.ErrNotFound) {
		t.Errorf("editing a missing comment = %v, want ErrNotFound", err)
	}
	if err := c.RemoveLabel(ctx, ref, "not-there"); err != nil {
		t.Errorf("removing an absent label = %v, want nil", err)
	}

	reset := time.Now().Add(3 * time.Second).Unix()
	gh.Fail(testkit.Fault{Method: "GET", Path: `/repos/octo/shop/issues/12`, Status: http.StatusForbidden, Times: 1,
		Header: map[string]string{"X-RateLimit-Remaining": "0", "X-RateLimit-Limit": "5000", "X-RateLimit-Reset": strconv.FormatInt(reset, 10)}})
	_, err = c.Issue(ctx, ref)
	if !errors.As(err, &rl) || rl.Wait < time.Second || rl.Wait > 5*time.Second {
		t.Fatalf("403 with X-RateLimit-Reset = %v, want a rate limit until the reset", err)
	}
	// go-github remembers the reset: the next call waits without asking GitHub.
	before := len(gh.Requests())
	if _, err := c.Issue(ctx, ref); !errors.As(err, &rl) {
		t.Errorf("call before the reset = %v, want a rate limit", err)
	}
	if len(gh.Requests()) != before {
		t.Errorf("a call was sent to GitHub before the rate limit reset")
	}
}

func TestLabelsCommentsAndReactionsRoundTrip(t *testing.T) {
	t.Parallel()
	gh, f := newFake(t)
	ctx := context.Background()
	c, _ := f.Installation(ctx, 7)
	if _, err := c.RepoLabel(ctx, ref.Repo, app.LabelDone); !errors.Is(err, app.ErrNotFound) {
		t.Errorf("missing label = %v, want ErrNotFound", err)
	}
	l, _ := app.StateLabel(app.LabelDone)
	if err := c.CreateLabel(ctx, ref.Repo, l); err != nil {
		t.Fatal(err)
	}
	if err := c.CreateLabel(ctx, ref.Repo, l); err != nil {
		t.Errorf("creating an existing label = %v, want nil", err)
	}
	if got, err := c.RepoLabel(ctx, ref.Repo, app.LabelDone); err != nil || got != l {
		t.Errorf("label = %+v, %v; want %+v", got, err, l)
	}
	for i := range 130 {
		if _, err := c.CreateComment(ctx, ref, "c"+strconv.Itoa(i)); err != nil {
			t.Fatal(err)
		}
	}
	cms, err := c.Comments(ctx, ref)
	if err != nil || len(cms) != 130 || !cms[0].AuthorBot || cms[129].Body != "c129" {
		t.Errorf("comments: %d, %v (paging over 100)", len(cms), err)
	}
	if err := c.React(ctx, ref, app.ReactionEyes); err != nil {
		t.Fatal(err)
	}
	if err := c.ReactToComment(ctx, ref.Repo, cms[0].ID, app.ReactionThumbsUp); err != nil {
		t.Fatal(err)
	}
	if got := gh.CommentReactions(repo, cms[0].ID); len(got) != 1 {
		t.Errorf("comment reactions = %v", got)
	}
}

func TestParseIssueRef(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{"octo/shop#12": "octo/shop#12", "octo/shop/12": "octo/shop#12", "a-b/c.d_e#1": "a-b/c.d_e#1"} {
		got, err := app.ParseIssueRef(in)
		if err != nil || got.String() != want {
			t.Errorf("ParseIssueRef(%q) = %v, %v; want %s", in, got, err, want)
		}
	}
	for _, in := range []string{"", "octo#1", "octo/shop", "octo/shop#0", "octo/shop#x", "/shop#1", "o/s/t#1"} {
		if _, err := app.ParseIssueRef(in); err == nil {
			t.Errorf("ParseIssueRef(%q) accepted", in)
		}
	}
}

func TestManifestFlowJSON(t *testing.T) {
	t.Parallel()
	m, err := app.LoadManifest()
	if err != nil {
		t.Fatal(err)
	}
	b, err := m.FlowJSON("https://whilly.example.org/")
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	for _, want := range []string{`"url": "https://whilly.example.org/webhook"`, `"https://whilly.example.org/auth/github/callback"`, `"issues": "write"`, `"issue_comment"`, `"pull_request"`} {
		if !contains(s, want) {
			t.Errorf("manifest JSON lacks %s:\n%s", want, s)
		}
	}
	if contains(s, `"installation"`) {
		t.Errorf("installation events are delivered to every App and must not be listed for the manifest flow:\n%s", s)
	}
}

func contains(s, sub string) bool { return strings.Contains(s, sub) }

// A refused token exchange (a 401 for a clock that drifted, a key being rotated) is
// whilly's credentials failing, not GitHub refusing the call: it must not count as
// Permanent, which makes the intake skip its 👀 and the mirror a pull request for good.
func TestARefusedTokenExchangeIsNotARefusalOfTheCall(t *testing.T) {
	t.Parallel()
	gh, c := newInstallation(t)
	ctx := context.Background()
	for _, status := range []int{http.StatusUnauthorized, http.StatusForbidden, http.StatusUnprocessableEntity} {
		gh.Fail(testkit.Fault{Method: "POST", Path: `/app/installations/7/access_tokens`, Status: status, Times: 1})
		err := c.React(ctx, ref, app.ReactionEyes)
		if err == nil || app.Permanent(err) {
			t.Errorf("the 👀 with the token exchange answered %d = %v, want an error to try again", status, err)
		}
		if !strings.Contains(fmt.Sprint(err), "installation token") {
			t.Errorf("the error %q does not say that the installation token failed", err)
		}
	}
	if err := c.React(ctx, ref, app.ReactionEyes); err != nil {
		t.Errorf("the 👀 once the exchange works = %v", err)
	}
	// GitHub's own refusal of the call still is one.
	gh.Fail(testkit.Fault{Method: "POST", Path: `/repos/octo/shop/issues/12/reactions`, Status: http.StatusForbidden, Times: 1})
	if err := c.React(ctx, ref, app.ReactionEyes); !app.Permanent(err) {
		t.Errorf("a 403 on the reaction itself = %v, want Permanent", err)
	}
}
