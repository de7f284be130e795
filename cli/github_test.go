package cli

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"net"
	"strings"
	"testing"

	"github.com/riverqueue/river"

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

func TestGitHubExtensionIsOffWithoutAnAppAndStrictWithOne(t *testing.T) {
	t.Parallel()
	gh := testkit.NewGitHub(t)
	st := queue.NewStore(testkit.DB(t), nil, queue.Config{})
	a, _ := githubTestApp(map[string]string{"WHILLY_DATA_DIR": t.TempDir()})
	if h, err := a.storeHooks(nil); err != nil || h.PlanChanged != nil || h.TaskFailed != nil {
		t.Errorf("store hooks without WHILLY_GITHUB_APP_ID: %+v, %v; want none", h, err)
	}
	if ext, err := a.githubExtension(context.Background(), st, nil); err != nil || ext == nil || ext.register != nil ||
		len(ext.routes) != 1 || ext.routes["/webhook"] == nil {
		t.Errorf("without WHILLY_GITHUB_APP_ID: %+v, %v; want only /webhook (503)", ext, err)
	}
	full := map[string]string{
		"WHILLY_GITHUB_APP_ID": "4242", "WHILLY_GITHUB_PRIVATE_KEY": string(gh.KeyPEM),
		"WHILLY_GITHUB_WEBHOOK_SECRET": "s", "WHILLY_GITHUB_API_URL": gh.URL(), "WHILLY_DATA_DIR": t.TempDir(),
	}
	for _, missing := range []string{"WHILLY_GITHUB_WEBHOOK_SECRET", "WHILLY_GITHUB_PRIVATE_KEY"} {
		env := map[string]string{}
		for k, v := range full {
			if k != missing {
				env[k] = v
			}
		}
		a, _ := githubTestApp(env)
		_, err := a.githubExtension(context.Background(), st, nil)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != ExitEnv || !strings.Contains(err.Error(), missing) {
			t.Errorf("without %s: %v, want exit 2 naming it", missing, err)
		}
	}
	a, _ = githubTestApp(full)
	ext, err := a.githubExtension(context.Background(), st, nil)
	if err != nil || ext == nil || ext.routes["/webhook"] == nil || ext.workspaces == nil {
		t.Fatalf("configured: %+v, %v", ext, err)
	}
	if h, err := a.storeHooks(nil); err != nil || h.PlanChanged == nil {
		t.Fatalf("store hooks with the App: %+v, %v; want the GitHub side's PlanChanged", h, err)
	}
	w := river.NewWorkers()
	// The reconciler is enqueued by this process itself, not by whichever process leads
	// River, and the GitHub jobs have a queue that only this process works.
	if periodic := ext.register(w); len(periodic) != 0 || len(ext.schedules) != 2 || ext.schedules[0].Name != ghapp.KindReconcile ||
		ext.schedules[1].Name != ghapp.KindRevokePushTokens {
		t.Errorf("%d River periodic jobs and schedules %+v; want the reconciler and the push token sweep scheduled by the process", len(periodic), ext.schedules)
	}
	for _, q := range []string{queue.QueueGitHub, queue.QueueGitHubIntake} {
		if _, ok := ext.queues[q]; !ok {
			t.Errorf("queues %v do not include %s", ext.queues, q)
		}
	}
	// Without WHILLY_DISPATCH_ACTIONS no dispatch worker is registered; with it, one is.
	if err := river.AddWorkerSafely(w, ghapp.NewDispatcher(st, nil, nil, ghapp.DispatchConfig{}).Worker()); err != nil {
		t.Errorf("a dispatch worker was registered without WHILLY_DISPATCH_ACTIONS: %v", err)
	}
	full["WHILLY_DISPATCH_ACTIONS"] = "1"
	a, _ = githubTestApp(full)
	if ext, err = a.githubExtension(context.Background(), st, nil); err != nil {
		t.Fatal(err)
	}
	w = river.NewWorkers()
	ext.register(w)
	if err := river.AddWorkerSafely(w, ghapp.NewDispatcher(st, nil, nil, ghapp.DispatchConfig{}).Worker()); err == nil {
		t.Error("WHILLY_DISPATCH_ACTIONS=1 registered no dispatch worker")
	}
	full["WHILLY_DISPATCH_ACTIONS"] = "sure"
	a, _ = githubTestApp(full)
	var ee *exitError
	if _, err := a.githubExtension(context.Background(), st, nil); !errors.As(err, &ee) || ee.code != ExitEnv || !strings.Contains(err.Error(), "WHILLY_DISPATCH_ACTIONS") {
		t.Errorf("WHILLY_DISPATCH_ACTIONS=sure: %v, want exit 2 naming it", err)
	}
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
	cp, err := a.startControlPlane(ctx, st, ln)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cp.Shutdown(ctx) })
	p := &plan.Plan{ID: "gh/octo/shop/3", Name: "Spelling", Repo: "octo/shop", Tasks: []plan.Task{
		{ID: "T1", Priority: plan.PriorityMedium, Description: "Fix the spelling of commit in README.md"}}}
	if _, err := cp.store.Import(ctx, p, queue.ImportOptions{GitHubIssueRef: "octo/shop#3", InstallationID: 7}); err != nil {
		t.Fatal(err)
	}
	w, token, err := cp.store.RegisterWorker(ctx, "host", nil)
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
