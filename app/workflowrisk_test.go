package app

import (
	"slices"
	"strings"
	"testing"
)

const useSecret = "\njobs:\n  j:\n    runs-on: x\n    steps:\n      - run: echo ${{ secrets.K }}\n"

func TestRiskyWorkflows(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, yaml string
		risky      bool
	}{
		{"push without filter", "on: push" + useSecret, true},
		{"push in a list", "on: [pull_request, push]" + useSecret, true},
		{"push with paths only", "on:\n  push:\n    paths: ['src/**']" + useSecret, true},
		{"push to main", "on:\n  push:\n    branches: [main]" + useSecret, false},
		{"push to a single branch as a scalar", "on:\n  push:\n    branches: main" + useSecret, false},
		{"push to **", "on:\n  push:\n    branches: ['**']" + useSecret, true},
		{"push to whilly/*", "on:\n  push:\n    branches: ['whilly/*']" + useSecret, true},
		{"push to *: no slash", "on:\n  push:\n    branches: ['*']" + useSecret, false},
		{"push to ** but not whilly/**", "on:\n  push:\n    branches: ['**', '!whilly/**']" + useSecret, false},
		{"push ignoring whilly/**", "on:\n  push:\n    branches-ignore: ['whilly/**']" + useSecret, false},
		{"push ignoring other branches", "on:\n  push:\n    branches-ignore: [main, 'release/*']" + useSecret, true},
		{"push with tags only", "on:\n  push:\n    tags: ['v*']" + useSecret, false},
		{"pull_request", "on:\n  pull_request:" + useSecret, true},
		{"pull_request to the default branch", "on:\n  pull_request:\n    branches: [main]" + useSecret, true},
		{"pull_request to another base", "on:\n  pull_request:\n    branches: [release]" + useSecret, false},
		{"pull_request_target", "on: pull_request_target" + useSecret, true},
		{"pull_request_review", "on: pull_request_review" + useSecret, true},
		{"schedule", "on:\n  schedule:\n    - cron: '0 0 * * *'" + useSecret, false},
		{"issue_comment", "on: issue_comment" + useSecret, false},
		{"only GITHUB_TOKEN", "on: push\njobs:\n  j:\n    runs-on: x\n    steps:\n      - run: gh pr list\n        env: {GH_TOKEN: '${{ secrets.GITHUB_TOKEN }}'}\n", false},
		{"github_token in lower case", "on: push\njobs:\n  j:\n    runs-on: x\n    steps:\n      - run: echo ${{ secrets.github_token }}\n", false},
		{"a secret in a comment only", "on: push\njobs:\n  j:\n    runs-on: x\n    steps:\n      # ${{ secrets.K }}\n      - run: make\n", false},
		{"an input named secrets", "on: push\njobs:\n  j:\n    runs-on: x\n    steps:\n      - run: echo ${{ inputs.secrets }}\n", false},
		{"the whole secrets context", "on: push\njobs:\n  j:\n    runs-on: x\n    steps:\n      - run: echo '${{ toJSON(secrets) }}'\n", true},
		{"secrets: inherit", "on: push\njobs:\n  j:\n    uses: o/r/.github/workflows/x.yml@main\n    secrets: inherit\n", true},
		{"a secret in a job's if", "on: push\njobs:\n  j:\n    if: secrets.K != ''\n    runs-on: x\n    steps: [{run: make}]\n", true},
		{"a secret by index", "on: push\njobs:\n  j:\n    runs-on: x\n    steps: [{run: 'echo ${{ secrets[\"K\"] }}'}]\n", true},
		{"a secret through an anchor", "on: push\nx: &e {K: '${{ secrets.K }}'}\njobs:\n  j:\n    runs-on: x\n    env: *e\n    steps: [{run: make}]\n", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			risks, bad := RiskyWorkflows([]WorkflowFile{{Path: ".github/workflows/w.yml", Content: tc.yaml}}, "main")
			if len(bad) > 0 {
				t.Fatalf("unreadable: %v", bad)
			}
			if got := len(risks) == 1; got != tc.risky {
				t.Errorf("risky %v, want %v (%+v)", got, tc.risky, risks)
			}
		})
	}
}

// workflow_run follows chains: c runs after b, which runs after a, which runs on push.
// Only the workflows with secrets are listed; a name that matches no workflow that runs
// on whilly's work starts nothing.
func TestRiskyWorkflowsFollowWorkflowRunChains(t *testing.T) {
	t.Parallel()
	files := []WorkflowFile{
		{Path: "c.yml", Content: "name: C\non:\n  workflow_run:\n    workflows: [B]" + useSecret},
		{Path: "b.yml", Content: "name: B\non:\n  workflow_run:\n    workflows: [A]\njobs: {}\n"},
		{Path: "a.yml", Content: "name: A\non: push\njobs: {}\n"},
		{Path: "d.yml", Content: "name: D\non:\n  workflow_run:\n    workflows: [Nightly]" + useSecret},
		{Path: "e.yml", Content: "name: E\non:\n  workflow_run:\n    workflows: [A]\n    branches: [main]" + useSecret},
		{Path: "bad.yml", Content: "on: [push\n"},
	}
	risks, bad := RiskyWorkflows(files, "main")
	var paths []string
	for _, r := range risks {
		paths = append(paths, r.Path)
	}
	if !slices.Equal(paths, []string{"c.yml"}) || !strings.Contains(risks[0].Triggers[0], `workflow_run after "B"`) {
		t.Errorf("risks %+v, want c.yml after B", risks)
	}
	if len(bad) != 1 || !strings.HasPrefix(bad[0], "bad.yml: not valid YAML") {
		t.Errorf("unreadable %v, want bad.yml", bad)
	}
}
