package cli

import (
	"strconv"
	"strings"
	"testing"

	ghapp "github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/server"
	"github.com/whilly-go/whilly/testkit"
)

// The workflows of an installed repository, read through the contents API of the fake
// GitHub: those that run whilly's branch or pull request with secrets are listed, one
// warning each with the repository, the file, why and what to do; the others are not,
// and warnings leave doctor's exit code at 0.
func TestDoctorListsWorkflowsThatRunTheAgentsCodeWithSecrets(t *testing.T) {
	t.Parallel()
	gh := testkit.NewGitHub(t)
	gh.Install(71, "acme/app")
	gh.Install(72, "octo/quiet")
	files := map[string]string{
		// (i) every branch, a deploy key: whilly/issue-N's push runs it.
		"deploy.yml": `name: deploy
on: push
jobs:
  deploy:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
      - run: make deploy
        env:
          KEY: ${{ secrets.DEPLOY_KEY }}
`,
		// (ii) main only: whilly never pushes there.
		"release.yml": `on:
  push:
    branches: [main]
jobs:
  release:
    runs-on: ubuntu-latest
    steps:
      - run: make release
        env:
          TOKEN: ${{ secrets.RELEASE_TOKEN }}
`,
		// (iii) pull_request_target with a secret: whilly's pull request starts it.
		"label.yaml": `on:
  pull_request_target:
    types: [opened, synchronize]
jobs:
  check:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@v4
        with:
          ref: ${{ github.event.pull_request.head.sha }}
      - run: ./ci/check.sh
        env:
          NPM_TOKEN: ${{ secrets['NPM_TOKEN'] }}
`,
		// (iv) runs on every push, but only with GITHUB_TOKEN (and a comment naming a
		// secret is no use of it).
		"test.yml": `name: test
on: [push, pull_request]
jobs:
  test:
    runs-on: ubuntu-latest
    steps:
      # secrets.DEPLOY_KEY is not needed here
      - run: go test ./...
        env:
          GH_TOKEN: ${{ secrets.GITHUB_TOKEN }}
`,
		// A workflow_run after test, which runs on whilly's work: it runs too, with
		// every secret the calling workflow passes on.
		"after-test.yml": `on:
  workflow_run:
    workflows: [test]
    types: [completed]
jobs:
  publish:
    uses: acme/shared/.github/workflows/publish.yml@main
    secrets: inherit
`,
		// Tags only: a branch push does not start it.
		"tag.yml": `on:
  push:
    tags: ['v*']
jobs:
  pub:
    runs-on: ubuntu-latest
    steps:
      - run: echo ${{ secrets.PYPI }}
`,
		// Not a workflow file GitHub reads.
		"README.md": "uses ${{ secrets.NOTHING }} on: push",
	}
	for name, content := range files {
		gh.SetFile("acme/app", ".github/workflows/"+name, content)
	}
	gh.SetFile("acme/app", "main.go", "package main\n")
	gh.SetFile("octo/quiet", "README.md", "no workflows\n")

	env := map[string]string{
		"WHILLY_DATABASE_URL": testkit.DSN(t), "WHILLY_DATA_DIR": t.TempDir(), "HOME": t.TempDir(),
		"WHILLY_AGENT": "sim", "WHILLY_SANDBOX": "none",
		"WHILLY_GITHUB_APP_ID": strconv.FormatInt(gh.AppID, 10), "WHILLY_GITHUB_PRIVATE_KEY": string(gh.KeyPEM),
		"WHILLY_GITHUB_WEBHOOK_SECRET": "s", "WHILLY_GITHUB_API_URL": gh.URL(), "WHILLY_GITHUB_DELIVERIES": "pull",
	}
	rep, text, code := runDoctor(t, env)
	t.Logf("doctor:\n%s", text)
	if code != ExitOK || !rep.OK {
		t.Fatalf("doctor with risky workflows: exit %d (ok %v), want 0: a warning is not a failure\n%s", code, rep.OK, text)
	}
	var lines []string
	for _, c := range rep.Checks {
		if c.Name == ciSecretsCheck {
			if c.Status != checkWarn {
				t.Errorf("ci secrets line %q is %s, want warn", c.Detail, c.Status)
			}
			lines = append(lines, c.Detail)
		}
	}
	want := []struct{ file, secret, why, fix string }{
		{".github/workflows/after-test.yml", "secrets: inherit", `workflow_run after "test"`, "workflow_run: branches-ignore: ['whilly/**']"},
		{".github/workflows/deploy.yml", "secrets.DEPLOY_KEY", "push to whilly/** (no branch filter)", "push: branches-ignore: ['whilly/**']"},
		{".github/workflows/label.yaml", "secrets.NPM_TOKEN", "pull_request_target (whilly's pull requests)", "startsWith(github.head_ref, 'whilly/')"},
	}
	if len(lines) != len(want) {
		t.Fatalf("ci secrets lines:\n%s\nwant %d", strings.Join(lines, "\n"), len(want))
	}
	for i, w := range want {
		l := lines[i]
		for _, s := range []string{"acme/app " + w.file, w.secret, w.why, w.fix, "environment with required reviewers"} {
			if !strings.Contains(l, s) {
				t.Errorf("line %d does not say %q:\n%s", i, s, l)
			}
		}
	}
	for _, s := range []string{"release.yml", "RELEASE_TOKEN", "/test.yml", "GITHUB_TOKEN", "tag.yml", "PYPI", "README", "octo/quiet"} {
		if strings.Contains(strings.Join(lines, "\n"), s) {
			t.Errorf("the ci secrets lines name %q:\n%s", s, strings.Join(lines, "\n"))
		}
	}
	if !strings.Contains(text, "warn  ci secrets") {
		t.Errorf("the text output has no ci secrets warning:\n%s", text)
	}
	// Read through the installations' tokens: the list of each, and each workflow file.
	if n := gh.CountRequests("GET", "/installation/repositories"); n != 4 {
		t.Errorf("GET /installation/repositories answered %d times, want once per installation and run", n)
	}
	if n := gh.CountRequests("GET", "/repos/acme/app/contents/.github/workflows/.*"); n != 2*6 {
		t.Errorf("%d workflow files read, want the 6 .yml/.yaml ones per run", n)
	}
}

// The scan's bound: past it, doctor says how many repositories it read and that the
// others were not checked.
func TestDoctorSaysWhenTheWorkflowScanStopsAtItsBound(t *testing.T) {
	t.Parallel()
	gh := testkit.NewGitHub(t)
	gh.Install(9, "acme/a", "acme/b", "acme/c")
	for _, r := range []string{"acme/a", "acme/b", "acme/c"} {
		gh.SetFile(r, ".github/workflows/ci.yml", "on: push\njobs: {x: {runs-on: x, steps: [{run: 'echo ${{ secrets.K }}'}]}}\n")
	}
	f, err := server.GitHub{AppID: gh.AppID, PrivateKey: gh.KeyPEM, APIURL: gh.URL()}.Factory(nil)
	if err != nil {
		t.Fatal(err)
	}
	rep := &doctorReport{}
	doctorWorkflows(t.Context(), rep, f, ghapp.WorkflowScanLimits{Repos: 2, FilesPerRepo: 50})
	var got []string
	for _, c := range rep.Checks {
		got = append(got, c.Status+" "+c.Detail)
	}
	all := strings.Join(got, "\n")
	if len(got) != 3 || !strings.Contains(all, "acme/a .github/workflows/ci.yml") || !strings.Contains(all, "acme/b .github/workflows/ci.yml") ||
		strings.Contains(all, "acme/c") || !strings.Contains(got[2], "warn only the App's first 2 repositories were read") {
		t.Errorf("doctor lines:\n%s", all)
	}
}

// A repository whose workflows cannot be listed is named as not checked (a warning),
// and the others are still read.
func TestDoctorNamesTheRepositoriesItCouldNotRead(t *testing.T) {
	t.Parallel()
	gh := testkit.NewGitHub(t)
	gh.Install(9, "acme/a", "acme/b")
	gh.SetFile("acme/a", ".github/workflows/ci.yml", "on: push\njobs: {x: {runs-on: x, steps: [{run: 'echo ${{ secrets.K }}'}]}}\n")
	gh.SetFile("acme/b", ".github/workflows/ci.yml", "on: push\n")
	gh.Fail(testkit.Fault{Method: "GET", Path: "/repos/acme/b/contents/.*", Status: 403})
	f, err := server.GitHub{AppID: gh.AppID, PrivateKey: gh.KeyPEM, APIURL: gh.URL()}.Factory(nil)
	if err != nil {
		t.Fatal(err)
	}
	rep := &doctorReport{}
	doctorWorkflows(t.Context(), rep, f, ghapp.DefaultWorkflowScanLimits)
	var got []string
	for _, c := range rep.Checks {
		got = append(got, c.Status+" "+c.Detail)
	}
	all := strings.Join(got, "\n")
	if len(got) != 2 || !strings.HasPrefix(got[0], "warn acme/a .github/workflows/ci.yml reads secrets.K") ||
		!strings.HasPrefix(got[1], "warn not checked: list .github/workflows of acme/b: GitHub answered HTTP 403") {
		t.Errorf("doctor lines:\n%s", all)
	}
}
