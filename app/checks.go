package app

// What whilly reads of a pull request's feedback (issue 16): a review and its comments,
// the failed runs of a check suite with their annotations, and the tail of a failed
// GitHub Actions job's log.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/google/go-github/v62/github"
)

// Review is a pull request review.
type Review struct {
	ID     int64
	State  string // APPROVED, CHANGES_REQUESTED, COMMENTED, DISMISSED (as the REST API spells it)
	Body   string
	Author string
}

// ReviewComment is a comment of a review, on a line of the diff.
type ReviewComment struct {
	ID       int64
	Path     string
	Line     int // the line of the file it is on (0: on the file or an outdated line)
	DiffHunk string
	Body     string
	Author   string
}

// CheckRun is a run of a check suite.
type CheckRun struct {
	ID         int64
	Name       string
	Conclusion string // success, failure, timed_out, cancelled, neutral, skipped, action_required
	Title      string
	Summary    string
	Text       string
	App        string // the slug of the App that runs it; github-actions for Actions jobs
}

// Annotation is a check run's annotation on a line.
type Annotation struct {
	Path      string
	StartLine int
	EndLine   int
	Level     string // notice, warning, failure
	Title     string
	Message   string
}

// Feedback is what the pull request loop reads from GitHub; *ghClient is one.
type Feedback interface {
	// Review reads one review of a pull request.
	Review(ctx context.Context, repo Repo, number int, reviewID int64) (Review, error)
	// ReviewComments lists the comments of one review (at most a few hundred).
	ReviewComments(ctx context.Context, repo Repo, number int, reviewID int64) ([]ReviewComment, error)
	// CheckRuns lists the runs of a check suite.
	CheckRuns(ctx context.Context, repo Repo, suiteID int64) ([]CheckRun, error)
	// Annotations lists a check run's annotations (at most the first 100).
	Annotations(ctx context.Context, repo Repo, runID int64) ([]Annotation, error)
	// JobLogTail returns the last max bytes of an Actions job's log (GitHub answers with
	// a redirect to the log, which is fetched without whilly's credentials).
	JobLogTail(ctx context.Context, repo Repo, jobID int64, max int) (string, error)
}

func (c *ghClient) Review(ctx context.Context, repo Repo, number int, reviewID int64) (Review, error) {
	r, resp, err := c.gh.PullRequests.GetReview(ctx, repo.Owner, repo.Name, number, reviewID)
	if err != nil {
		return Review{}, mapErr(fmt.Sprintf("read review %d of %s#%d", reviewID, repo, number), resp, err)
	}
	return Review{ID: r.GetID(), State: r.GetState(), Body: r.GetBody(), Author: r.GetUser().GetLogin()}, nil
}

func (c *ghClient) ReviewComments(ctx context.Context, repo Repo, number int, reviewID int64) ([]ReviewComment, error) {
	var out []ReviewComment
	opts := &github.ListOptions{PerPage: 100}
	for page := 0; page < 5; page++ {
		cs, resp, err := c.gh.PullRequests.ListReviewComments(ctx, repo.Owner, repo.Name, number, reviewID, opts)
		if err != nil {
			return nil, mapErr(fmt.Sprintf("list comments of review %d of %s#%d", reviewID, repo, number), resp, err)
		}
		for _, cm := range cs {
			out = append(out, ReviewComment{ID: cm.GetID(), Path: cm.GetPath(), Line: cm.GetLine(), DiffHunk: cm.GetDiffHunk(),
				Body: cm.GetBody(), Author: cm.GetUser().GetLogin()})
		}
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	return out, nil
}

func (c *ghClient) CheckRuns(ctx context.Context, repo Repo, suiteID int64) ([]CheckRun, error) {
	var out []CheckRun
	opts := &github.ListCheckRunsOptions{ListOptions: github.ListOptions{PerPage: 100}}
	for page := 0; page < 5; page++ {
		res, resp, err := c.gh.Checks.ListCheckRunsCheckSuite(ctx, repo.Owner, repo.Name, suiteID, opts)
		if err != nil {
			return nil, mapErr(fmt.Sprintf("list runs of check suite %d in %s", suiteID, repo), resp, err)
		}
		for _, r := range res.CheckRuns {
			out = append(out, CheckRun{ID: r.GetID(), Name: r.GetName(), Conclusion: r.GetConclusion(),
				Title: r.GetOutput().GetTitle(), Summary: r.GetOutput().GetSummary(), Text: r.GetOutput().GetText(), App: r.GetApp().GetSlug()})
		}
		if resp.NextPage == 0 {
			break
		}
		opts.Page = resp.NextPage
	}
	return out, nil
}

func (c *ghClient) Annotations(ctx context.Context, repo Repo, runID int64) ([]Annotation, error) {
	as, resp, err := c.gh.Checks.ListCheckRunAnnotations(ctx, repo.Owner, repo.Name, runID, &github.ListOptions{PerPage: 100})
	if err != nil {
		return nil, mapErr(fmt.Sprintf("list annotations of check run %d in %s", runID, repo), resp, err)
	}
	out := make([]Annotation, 0, len(as))
	for _, a := range as {
		out = append(out, Annotation{Path: a.GetPath(), StartLine: a.GetStartLine(), EndLine: a.GetEndLine(),
			Level: a.GetAnnotationLevel(), Title: a.GetTitle(), Message: a.GetMessage()})
	}
	return out, nil
}

// maxJobLog bounds what is read of a job's log to find its tail.
const maxJobLog = 8 << 20

func (c *ghClient) JobLogTail(ctx context.Context, repo Repo, jobID int64, max int) (string, error) {
	u, resp, err := c.gh.Actions.GetWorkflowJobLogs(ctx, repo.Owner, repo.Name, jobID, 1)
	if err != nil {
		return "", mapErr(fmt.Sprintf("find the log of job %d in %s", jobID, repo), resp, err)
	}
	// The redirect goes to short-lived signed storage: no credentials of whilly's go there.
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return "", fmt.Errorf("read the log of job %d in %s: %w", jobID, repo, err)
	}
	lr, err := (&http.Client{}).Do(req)
	if err != nil {
		return "", fmt.Errorf("read the log of job %d in %s: %w", jobID, repo, err)
	}
	defer func() { _ = lr.Body.Close() }()
	if lr.StatusCode != http.StatusOK {
		return "", fmt.Errorf("read the log of job %d in %s: %w", jobID, repo, &StatusError{Status: lr.StatusCode})
	}
	b, err := io.ReadAll(io.LimitReader(lr.Body, maxJobLog))
	if err != nil {
		return "", fmt.Errorf("read the log of job %d in %s: %w", jobID, repo, err)
	}
	if len(b) > max {
		b = b[len(b)-max:]
	}
	return string(b), nil
}
