package fakegithub

import (
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
)

// The fake's reviews of pull requests, check suites with their runs and annotations, and
// GitHub Actions job logs (issue 16: the pull request answers back). Tests add them by
// hand (AddReview, AddCheckSuite), then deliver the webhook that tells of them; whilly
// reads them back through the API as it does on GitHub.

// FakeReview is a pull request review held by the fake.
type FakeReview struct {
	ID       int64
	Pull     int
	State    string // APPROVED, CHANGES_REQUESTED, COMMENTED
	Body     string
	Author   string
	Comments []FakeReviewComment
}

// FakeReviewComment is a comment of a review on a line of the diff.
type FakeReviewComment struct {
	ID       int64
	Path     string
	Line     int
	DiffHunk string
	Body     string
}

// FakeCheckRun is a run of a check suite. App "github-actions" makes it an Actions job
// whose log (Log) the job-log endpoint serves.
type FakeCheckRun struct {
	ID          int64
	Name        string
	Conclusion  string
	Title       string
	Summary     string
	App         string
	Annotations []FakeAnnotation
	Log         string
}

// FakeAnnotation is a check run's annotation.
type FakeAnnotation struct {
	Path    string
	Line    int
	Level   string // notice, warning, failure
	Title   string
	Message string
}

// fakeChecks is the fake's state of reviews, suites and runs, by lower-case repository.
type fakeChecks struct {
	reviews map[string]map[int64]*FakeReview
	suites  map[string]map[int64][]int64 // suite → its runs
	runs    map[int64]*FakeCheckRun
}

func (g *GitHub) checkRoutes() []fakeRoute {
	rt := func(method, pattern string, auth authKind, h func(http.ResponseWriter, *http.Request, int64, []string) int) fakeRoute {
		return fakeRoute{method: method, re: regexp.MustCompile("^" + pattern + "$"), auth: auth, h: h}
	}
	return []fakeRoute{
		rt("GET", repoRe+`/pulls/([0-9]+)/reviews/([0-9]+)`, authToken, g.getReview),
		rt("GET", repoRe+`/pulls/([0-9]+)/reviews/([0-9]+)/comments`, authToken, g.listReviewComments),
		rt("GET", repoRe+`/check-suites/([0-9]+)/check-runs`, authToken, g.listSuiteRuns),
		rt("GET", repoRe+`/check-runs/([0-9]+)/annotations`, authToken, g.listAnnotations),
		rt("GET", repoRe+`/actions/jobs/([0-9]+)/logs`, authToken, g.jobLogs),
		// Where GitHub's redirect points: signed storage, no credentials.
		rt("GET", `/_fake/job-logs/([0-9]+)`, authNone, g.jobLogBody),
	}
}

// AddReview records a review of pull request pull of repo by author (state
// CHANGES_REQUESTED, COMMENTED or APPROVED) with its comments, giving them ids; it
// returns the review.
func (g *GitHub) AddReview(repo string, pull int, author, state, body string, comments ...FakeReviewComment) FakeReview {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.checks.reviews == nil {
		g.checks.reviews = map[string]map[int64]*FakeReview{}
	}
	key := strings.ToLower(repo)
	if g.checks.reviews[key] == nil {
		g.checks.reviews[key] = map[int64]*FakeReview{}
	}
	g.nextID++
	r := &FakeReview{ID: g.nextID, Pull: pull, State: state, Body: body, Author: author}
	for _, c := range comments {
		g.nextID++
		c.ID = g.nextID
		r.Comments = append(r.Comments, c)
	}
	g.checks.reviews[key][r.ID] = r
	return *r
}

// AddCheckSuite records a check suite of repo with its runs, giving the suite and the
// runs ids; it returns the suite's id. Calling it again with the id of an existing suite
// (id != 0) replaces its runs: a re-run.
func (g *GitHub) AddCheckSuite(repo string, id int64, runs ...FakeCheckRun) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.checks.suites == nil {
		g.checks.suites, g.checks.runs = map[string]map[int64][]int64{}, map[int64]*FakeCheckRun{}
	}
	key := strings.ToLower(repo)
	if g.checks.suites[key] == nil {
		g.checks.suites[key] = map[int64][]int64{}
	}
	if id == 0 {
		g.nextID++
		id = g.nextID
	}
	var ids []int64
	for _, r := range runs {
		g.nextID++
		r.ID = g.nextID
		run := r
		g.checks.runs[r.ID] = &run
		ids = append(ids, r.ID)
	}
	g.checks.suites[key][id] = ids
	return id
}

func reviewJSON(r *FakeReview) map[string]any {
	return map[string]any{"id": r.ID, "state": r.State, "body": r.Body, "user": map[string]any{"login": r.Author, "type": "User"}}
}

func (g *GitHub) getReview(w http.ResponseWriter, _ *http.Request, inst int64, m []string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.review(inst, m)
	if !ok {
		return notFound(w)
	}
	return writeJSON(w, http.StatusOK, reviewJSON(r))
}

func (g *GitHub) listReviewComments(w http.ResponseWriter, _ *http.Request, inst int64, m []string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.review(inst, m)
	if !ok {
		return notFound(w)
	}
	out := []map[string]any{}
	for _, c := range r.Comments {
		out = append(out, map[string]any{"id": c.ID, "pull_request_review_id": r.ID, "path": c.Path, "line": c.Line,
			"diff_hunk": c.DiffHunk, "body": c.Body, "user": map[string]any{"login": r.Author, "type": "User"}})
	}
	return writeJSON(w, http.StatusOK, out)
}

// review finds the review of m (repository, pull request, review id) the installation may see.
func (g *GitHub) review(inst int64, m []string) (*FakeReview, bool) {
	rp, ok := g.repoFor(inst, m)
	if !ok {
		return nil, false
	}
	pull, _ := strconv.Atoi(m[3])
	id, _ := strconv.ParseInt(m[4], 10, 64)
	r := g.checks.reviews[strings.ToLower(rp.name)][id]
	return r, r != nil && r.Pull == pull
}

func (g *GitHub) listSuiteRuns(w http.ResponseWriter, _ *http.Request, inst int64, m []string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	rp, ok := g.repoFor(inst, m)
	if !ok {
		return notFound(w)
	}
	id, _ := strconv.ParseInt(m[3], 10, 64)
	ids, ok := g.checks.suites[strings.ToLower(rp.name)][id]
	if !ok {
		return notFound(w)
	}
	out := []map[string]any{}
	for _, rid := range ids {
		r := g.checks.runs[rid]
		out = append(out, map[string]any{"id": r.ID, "name": r.Name, "status": "completed", "conclusion": r.Conclusion,
			"output":      map[string]any{"title": r.Title, "summary": r.Summary, "annotations_count": len(r.Annotations)},
			"check_suite": map[string]any{"id": id}, "app": map[string]any{"slug": r.App}})
	}
	return writeJSON(w, http.StatusOK, map[string]any{"total_count": len(out), "check_runs": out})
}

// run finds the check run of m (repository, run id) the installation may see.
func (g *GitHub) run(inst int64, m []string) (*FakeCheckRun, bool) {
	rp, ok := g.repoFor(inst, m)
	if !ok {
		return nil, false
	}
	id, _ := strconv.ParseInt(m[3], 10, 64)
	for _, ids := range g.checks.suites[strings.ToLower(rp.name)] {
		for _, rid := range ids {
			if rid == id {
				return g.checks.runs[id], true
			}
		}
	}
	return nil, false
}

func (g *GitHub) listAnnotations(w http.ResponseWriter, _ *http.Request, inst int64, m []string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.run(inst, m)
	if !ok {
		return notFound(w)
	}
	out := []map[string]any{}
	for _, a := range r.Annotations {
		out = append(out, map[string]any{"path": a.Path, "start_line": a.Line, "end_line": a.Line,
			"annotation_level": a.Level, "title": a.Title, "message": a.Message})
	}
	return writeJSON(w, http.StatusOK, out)
}

// jobLogs answers as GitHub does: 302 to where the log is, valid for a minute.
func (g *GitHub) jobLogs(w http.ResponseWriter, _ *http.Request, inst int64, m []string) int {
	g.mu.Lock()
	r, ok := g.run(inst, m)
	g.mu.Unlock()
	if !ok || r.App != "github-actions" {
		return notFound(w)
	}
	w.Header().Set("Location", fmt.Sprintf("%s/_fake/job-logs/%d", g.Server.URL, r.ID))
	w.WriteHeader(http.StatusFound)
	return http.StatusFound
}

func (g *GitHub) jobLogBody(w http.ResponseWriter, req *http.Request, _ int64, m []string) int {
	if req.Header.Get("Authorization") != "" {
		g.errorf("fake GitHub: the job log's storage got credentials")
	}
	id, _ := strconv.ParseInt(m[1], 10, 64)
	g.mu.Lock()
	r, ok := g.checks.runs[id]
	g.mu.Unlock()
	if !ok {
		return notFound(w)
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write([]byte(r.Log))
	return http.StatusOK
}
