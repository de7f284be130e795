package cli

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"

	ghapp "github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/testkit"
)

func githubTestApp(env map[string]string) (*app, *bytes.Buffer) {
	var out bytes.Buffer
	stdio := IO{In: strings.NewReader(""), Out: &out, Err: &out, Getenv: func(k string) string { return env[k] }}
	return newApp(stdio, slog.New(slog.DiscardHandler)), &out
}

func TestAppManifestPrintsAppYML(t *testing.T) {
	t.Parallel()
	a, out := githubTestApp(map[string]string{"WHILLY_PUBLIC_URL": "https://w.example.com"})
	cmd := a.appCommand()
	cmd.SetArgs([]string{"manifest"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if out.String() != string(ghapp.ManifestYAML()) {
		t.Errorf("manifest output differs from app.yml")
	}
	out.Reset()
	cmd = a.appCommand()
	cmd.SetArgs([]string{"manifest", "--json"})
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), `"url": "https://w.example.com/webhook"`) {
		t.Errorf("manifest JSON:\n%s", out.String())
	}
}

func TestForgeIntakeWithAToken(t *testing.T) {
	t.Parallel()
	gh := testkit.NewGitHub(t)
	body := "Fix the README.\n\n- [ ] Fix the spelling of commit in README.md\n\n## Acceptance criteria\n- no commmit\n\n## Test steps\n- grep -c commmit README.md\n"
	gh.AddIssue("octo/shop", 3, "Spelling", body, "octo")
	dsn := testkit.DSN(t)
	env := map[string]string{"WHILLY_DATABASE_URL": dsn, "WHILLY_GITHUB_TOKEN": gh.Token, "WHILLY_GITHUB_API_URL": gh.URL()}
	a, out := githubTestApp(env)
	cmd := a.forgeCommand()
	cmd.SetArgs([]string{"intake", "octo/shop/3"})
	if err := cmd.Execute(); err != nil {
		t.Fatalf("forge intake: %v\n%s", err, out)
	}
	if !strings.Contains(out.String(), "planned gh/octo/shop/3") {
		t.Errorf("output: %s", out)
	}
	if got := gh.IssueLabels("octo/shop", 3); len(got) != 1 || got[0] != ghapp.LabelInProgress {
		t.Errorf("labels = %v, want whilly-in-progress", got)
	}
	cs := gh.IssueComments("octo/shop", 3)
	if len(cs) != 1 || !strings.HasPrefix(cs[0].Body, ghapp.Marker("gh/octo/shop/3")) {
		t.Errorf("comments = %+v, want the status comment", cs)
	}
	// Again: the plan is live, nothing changes.
	cmd = a.forgeCommand()
	cmd.SetArgs([]string{"intake", "octo/shop/3"})
	_ = cmd.Execute()
	if n := len(gh.IssueComments("octo/shop", 3)); n != 1 {
		t.Errorf("%d comments after a second intake, want 1", n)
	}
	a, _ = githubTestApp(map[string]string{"WHILLY_DATABASE_URL": dsn})
	cmd = a.forgeCommand()
	cmd.SetArgs([]string{"intake", "octo/shop/3"})
	var ee *exitError
	if err := cmd.Execute(); !errors.As(err, &ee) || ee.code != ExitEnv {
		t.Errorf("without GitHub configured: %v, want exit 2", err)
	}
}

// `whilly serve` with the App hands claims of issue plans their workspace: the control
// plane gets the GitHub extension's WorkspaceProvider.
func TestServeGivesClaimsOfIssuePlansAWorkspace(t *testing.T) {
	t.Parallel()
	gh := testkit.NewGitHub(t)
	gh.Install(7, "octo/shop")
	gh.AddIssue("octo/shop", 3, "Spelling", "body", "octo")
	env := map[string]string{
		"WHILLY_GITHUB_APP_ID": "4242", "WHILLY_GITHUB_PRIVATE_KEY": string(gh.KeyPEM),
		"WHILLY_GITHUB_WEBHOOK_SECRET": "s", "WHILLY_GITHUB_API_URL": gh.URL(),
	}
	a, _ := githubTestApp(env)
	st := queue.NewStore(testkit.DB(t), nil, queue.Config{})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	cp, err := a.startControlPlane(ctx, st.Pool(), ln)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Shutdown(ctx) })
	p := &plan.Plan{ID: "gh/octo/shop/3", Name: "Spelling", Repo: "octo/shop", Tasks: []plan.Task{
		{ID: "T1", Priority: plan.PriorityMedium, Description: "Fix the spelling of commit in README.md"}}}
	if _, err := cp.Store().Import(ctx, p, queue.ImportOptions{GitHubIssueRef: "octo/shop#3", InstallationID: 7}); err != nil {
		t.Fatal(err)
	}
	w, token, err := cp.Store().RegisterWorker(ctx, "host", nil)
	if err != nil {
		t.Fatal(err)
	}
	api, err := client.New("http://"+ln.Addr().String(), token, client.Options{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := api.Claim(ctx, client.ClaimRequest{PlanID: p.ID})
	if err != nil || c == nil || c.Workspace == nil {
		t.Fatalf("claim by %s = %+v, %v; want a workspace", w.ID, c, err)
	}
	if ws := c.Workspace; ws.Branch != "whilly/issue-3" || ws.CloneURL != gh.Server.URL+"/octo/shop.git" || ws.Token == "" {
		t.Errorf("workspace = %v", ws.LogValue())
	}
}
