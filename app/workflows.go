package app

import (
	"context"
	"errors"
	"fmt"
	"path"
	"strings"

	"github.com/google/go-github/v62/github"
	"golang.org/x/sync/errgroup"
)

// WorkflowScanLimits bound ScanWorkflows.
type WorkflowScanLimits struct {
	// Repos is the most repositories read, over every installation in the order GitHub
	// lists them (installations by id, then their repositories by name).
	Repos int
	// FilesPerRepo is the most workflow files read in one repository.
	FilesPerRepo int
}

// DefaultWorkflowScanLimits are `whilly doctor`'s: at most 2 + 100×(1+50) API calls.
var DefaultWorkflowScanLimits = WorkflowScanLimits{Repos: 100, FilesPerRepo: 50}

// RepoWorkflows is what ScanWorkflows found in one repository.
type RepoWorkflows struct {
	Repo          Repo
	DefaultBranch string
	Risks         []WorkflowRisk
	// Unread names files that could not be read or parsed, and why.
	Unread []string
	// FilesLeft counts workflow files past FilesPerRepo, not read.
	FilesLeft int
	// Err is why the repository's workflows could not be listed.
	Err error
}

// WorkflowScan is the result of ScanWorkflows.
type WorkflowScan struct {
	Repos []RepoWorkflows
	// ReposLeft reports whether repositories past Limits.Repos were not read.
	ReposLeft bool
}

// ScanWorkflows reads the workflows of every repository the App's installations cover,
// within lim, and finds those that would run whilly's work with secrets (RiskyWorkflows).
// It needs the App; a repository that cannot be read is reported in its Err, not as
// the scan's error.
func (f *Factory) ScanWorkflows(ctx context.Context, lim WorkflowScanLimits) (WorkflowScan, error) {
	ac, err := f.App(ctx)
	if err != nil {
		return WorkflowScan{}, err
	}
	app := ac.(*ghApp)
	type target struct {
		inst *ghClient
		repo *github.Repository
	}
	var (
		targets []target
		scan    WorkflowScan
	)
	opts := &github.ListOptions{PerPage: 100}
list:
	for {
		insts, resp, err := app.gh.Apps.ListInstallations(ctx, opts)
		if err != nil {
			return WorkflowScan{}, mapErr("list the App's installations", resp, err)
		}
		for _, in := range insts {
			c, err := f.Installation(ctx, in.GetID())
			if err != nil {
				return WorkflowScan{}, err
			}
			ic := c.(*ghClient)
			ropts := &github.ListOptions{PerPage: 100}
			for {
				repos, resp, err := ic.gh.Apps.ListRepos(ctx, ropts)
				if err != nil {
					return WorkflowScan{}, mapErr(fmt.Sprintf("list the repositories of installation %d", in.GetID()), resp, err)
				}
				for _, r := range repos.Repositories {
					if len(targets) == lim.Repos {
						scan.ReposLeft = true
						break list
					}
					targets = append(targets, target{inst: ic, repo: r})
				}
				if resp.NextPage == 0 {
					break
				}
				ropts.Page = resp.NextPage
			}
		}
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	scan.Repos = make([]RepoWorkflows, len(targets))
	g, gctx := errgroup.WithContext(ctx)
	g.SetLimit(4)
	for i, t := range targets {
		scan.Repos[i] = RepoWorkflows{
			Repo:          Repo{Owner: t.repo.GetOwner().GetLogin(), Name: t.repo.GetName()},
			DefaultBranch: t.repo.GetDefaultBranch(),
		}
		g.Go(func() error {
			t.inst.scanRepoWorkflows(gctx, &scan.Repos[i], lim.FilesPerRepo)
			return nil
		})
	}
	_ = g.Wait() // each repository keeps its own error
	return scan, nil
}

// workflowDir is where GitHub Actions reads workflows: files directly in it.
const workflowDir = ".github/workflows"

func (c *ghClient) scanRepoWorkflows(ctx context.Context, rw *RepoWorkflows, maxFiles int) {
	repo := rw.Repo
	_, dir, resp, err := c.gh.Repositories.GetContents(ctx, repo.Owner, repo.Name, workflowDir, nil)
	if err != nil {
		if err = mapErr("list "+workflowDir+" of "+repo.String(), resp, err); errors.Is(err, ErrNotFound) {
			return // no workflows (or an empty repository)
		}
		rw.Err = err
		return
	}
	var files []WorkflowFile
	for _, e := range dir {
		name := e.GetName()
		if e.GetType() != "file" || (!strings.HasSuffix(name, ".yml") && !strings.HasSuffix(name, ".yaml")) {
			continue
		}
		if len(files)+len(rw.Unread) == maxFiles {
			rw.FilesLeft++
			continue
		}
		p := path.Join(workflowDir, name)
		fc, _, resp, err := c.gh.Repositories.GetContents(ctx, repo.Owner, repo.Name, p, nil)
		if err != nil {
			rw.Unread = append(rw.Unread, fmt.Sprintf("%s: %v", p, mapErr("read "+p, resp, err)))
			continue
		}
		text, err := fc.GetContent()
		if err != nil {
			rw.Unread = append(rw.Unread, fmt.Sprintf("%s: %v", p, err))
			continue
		}
		files = append(files, WorkflowFile{Path: p, Content: text})
	}
	risks, bad := RiskyWorkflows(files, rw.DefaultBranch)
	rw.Risks = risks
	rw.Unread = append(rw.Unread, bad...)
}
