package intake_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"

	"github.com/riverqueue/river"
	"github.com/riverqueue/river/riverdriver/riverpgxv5"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/intake"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

// issueIntake is the GitHub side as `whilly forge intake` builds it: the App (or only a
// token), an insert-only River client, no River workers running.
func issueIntake(t *testing.T, gh *testkit.GitHub, asApp bool) (*intake.GitHub, *queue.Store) {
	t.Helper()
	pool := testkit.DB(t)
	log := slog.New(slog.DiscardHandler)
	cfg := app.Config{APIURL: gh.URL(), Token: gh.Token}
	if asApp {
		cfg.AppID, cfg.PrivateKey = gh.AppID, gh.KeyPEM
	}
	f, err := app.NewFactory(cfg)
	if err != nil {
		t.Fatal(err)
	}
	jobs, err := river.NewClient(riverpgxv5.New(pool), &river.Config{Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	gcfg := intake.GitHubConfig{
		Intake: intake.Config{Redact: agent.Redact},
		Mirror: app.MirrorConfig{PublicURL: "https://whilly.example.com"},
	}
	st := queue.NewStore(pool, log, queue.Config{Hooks: gcfg.Hooks(jobs)})
	g, err := intake.NewGitHub(st, f, jobs, log, gcfg)
	if err != nil {
		t.Fatal(err)
	}
	return g, st
}

// Acting as the App, an issue of a repository no webhook has told whilly about is taken
// in under the installation GitHub names, its labels and status comment written at once;
// asking again while the plan is live writes nothing more.
func TestIntakeIssueFindsTheInstallationAndWritesAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	gh := testkit.NewGitHub(t)
	gh.Install(instID, repoName)
	gh.AddIssue(repoName, issueNum, "Spelling error in the README file", goodBody, admin) // no whilly-pending: the operator asked
	g, st := issueIntake(t, gh, true)
	ref := app.IssueRef{Repo: app.Repo{Owner: "Codertocat", Name: "Hello-World"}, Number: issueNum}

	res, err := g.IntakeIssue(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Planned || res.PlanID == "" {
		t.Fatalf("result = %+v, want a plan", res)
	}
	pi, err := st.GetPlan(ctx, res.PlanID)
	if err != nil {
		t.Fatal(err)
	}
	if pi.InstallationID != instID || pi.GitHubIssueRef != issueRef {
		t.Errorf("plan installation %d, issue %q; want %d, %q", pi.InstallationID, pi.GitHubIssueRef, instID, issueRef)
	}
	if got := gh.IssueLabels(repoName, issueNum); !slices.Contains(got, app.LabelInProgress) {
		t.Errorf("labels = %v, want %s now, not when a control plane works the mirror job", got, app.LabelInProgress)
	}
	cs := gh.IssueComments(repoName, issueNum)
	if len(cs) != 1 || !strings.HasPrefix(cs[0].Body, app.Marker(res.PlanID)) {
		t.Fatalf("comments = %+v, want the status comment", cs)
	}

	again, err := g.IntakeIssue(ctx, ref)
	if err != nil {
		t.Fatal(err)
	}
	if again.Planned || again.PlanID != res.PlanID {
		t.Errorf("second intake = %+v, want the live plan %s untouched", again, res.PlanID)
	}
	if n := len(gh.IssueComments(repoName, issueNum)); n != 1 {
		t.Errorf("%d comments after a second intake, want 1", n)
	}
}

// What the operator names may not be there to take in: each refusal is one sentence,
// and nothing is written, neither in the store nor on GitHub.
func TestIntakeIssueRefusals(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		asApp bool
		ref   app.IssueRef
		want  string
	}{
		{"repository without the App", true, app.IssueRef{Repo: app.Repo{Owner: "someone", Name: "else"}, Number: 1},
			"the GitHub App is not installed on someone/else"},
		{"missing issue", true, app.IssueRef{Repo: app.Repo{Owner: "Codertocat", Name: "Hello-World"}, Number: 9},
			"issue Codertocat/Hello-World#9 does not exist or is not visible"},
		{"closed issue", true, app.IssueRef{Repo: app.Repo{Owner: "Codertocat", Name: "Hello-World"}, Number: 2},
			"issue Codertocat/Hello-World#2 is closed"},
		{"closed issue, with a token", false, app.IssueRef{Repo: app.Repo{Owner: "Codertocat", Name: "Hello-World"}, Number: 2},
			"issue Codertocat/Hello-World#2 is closed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			gh := testkit.NewGitHub(t)
			gh.Install(instID, repoName)
			gh.AddIssue(repoName, 2, "Closed already", goodBody, admin, app.LabelPending)
			gh.CloseIssueByHand(repoName, 2)
			gh.AddIssue("someone/else", 1, "Not ours", goodBody, "someone", app.LabelPending)
			g, st := issueIntake(t, gh, tc.asApp)

			res, err := g.IntakeIssue(ctx, tc.ref)
			if !errors.Is(err, intake.ErrIssueRefused) || err.Error() != tc.want {
				t.Fatalf("IntakeIssue = %+v, %v; want the refusal %q", res, err, tc.want)
			}
			plans, _, err := st.ListPlans(ctx, queue.PlanPage{})
			if err != nil {
				t.Fatal(err)
			}
			if len(plans) != 0 {
				t.Errorf("plans = %+v, want none", plans)
			}
			if n := gh.Writes(); n != 0 {
				t.Errorf("%d writes to GitHub, want none", n)
			}
		})
	}
}
