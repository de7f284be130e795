package fakegithub

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The fake's repositories, pull requests, repository_dispatch, GraphQL and git over
// smart HTTP (git http-backend as CGI). A repository made with AddGitRepo is a bare
// repository served at <Server.URL>/OWNER/NAME.git, the clone URL whilly derives from
// the API URL; git authenticates as GitHub's does (user x-access-token, the token as
// password), and a token minted for some repositories may fetch and push only those,
// and push only with contents: write.

// BotUserID is the user id of the App's bot (BotLogin) in the fake.
const BotUserID = 9000001

// AppSlug is the App's slug in the fake; its bot is AppSlug[bot] (BotLogin).
const AppSlug = "whilly"

// FakePull is a pull request held by the fake.
type FakePull struct {
	Number        int
	NodeID        string
	Title         string
	Body          string
	Head          string // branch
	Base          string // branch
	State         string // open, closed
	Draft         bool
	OpenedAsDraft bool
	Merged        bool
	Author        string
	BodyEdits     int
}

// FakeDispatch is a repository_dispatch the fake received.
type FakeDispatch struct {
	EventType     string
	ClientPayload map[string]any
	Installation  int64
}

const gitRe = `/([^/]+)/([^/]+)\.git`

// gitEnv isolates the fake's git commands from the machine's configuration.
func gitEnv() []string {
	return append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL="+os.DevNull,
		"GIT_AUTHOR_NAME=Octocat", "GIT_AUTHOR_EMAIL=octocat@example.com",
		"GIT_COMMITTER_NAME=Octocat", "GIT_COMMITTER_EMAIL=octocat@example.com")
}

func runGit(ctx context.Context, dir string, args ...string) (string, error) {
	// Arguments are whilly's test fixtures and refs/heads/ names, never options.
	cmd := exec.CommandContext(ctx, "git", args...) //nolint:gosec // G702: a test fake's own git commands
	cmd.Dir, cmd.Env = dir, gitEnv()
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("git %s: %w: %s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out)), nil
}

// AddGitRepo creates repo (owner/name) as a bare git repository served by the fake, its
// default branch holding one commit with files (path → content). It returns the bare
// repository's directory, for the caller's own git commands.
func (g *GitHub) AddGitRepo(ctx context.Context, repo, defaultBranch string, files map[string]string) (string, error) {
	owner, name, ok := strings.Cut(repo, "/")
	if !ok {
		return "", fmt.Errorf("repository %q is not owner/name", repo)
	}
	g.mu.Lock()
	if g.gitRoot == "" {
		dir, err := os.MkdirTemp("", "fakegithub-git-")
		if err != nil {
			g.mu.Unlock()
			return "", fmt.Errorf("make the fake's git directory: %w", err)
		}
		g.gitRoot = dir
		g.git = &GitHTTP{Root: dir, Push: true}
	}
	root := g.gitRoot
	g.mu.Unlock()
	bare := filepath.Join(root, owner, name+".git")
	seed, err := os.MkdirTemp("", "fakegithub-seed-")
	if err != nil {
		return "", fmt.Errorf("make a seed directory for %s: %w", repo, err)
	}
	defer func() { _ = os.RemoveAll(seed) }()
	steps := [][]string{{"init", "-q", "--bare", "-b", defaultBranch, bare}, {"init", "-q", "-b", defaultBranch, seed}}
	for _, args := range steps {
		if _, err := runGit(ctx, root, args...); err != nil {
			return "", err
		}
	}
	for _, path := range slices.Sorted(maps.Keys(files)) {
		full := filepath.Join(seed, filepath.FromSlash(path))
		if err := os.MkdirAll(filepath.Dir(full), 0o750); err != nil {
			return "", fmt.Errorf("seed %s: %w", repo, err)
		}
		if err := os.WriteFile(full, []byte(files[path]), 0o600); err != nil {
			return "", fmt.Errorf("seed %s: %w", repo, err)
		}
	}
	for _, args := range [][]string{{"add", "-A"}, {"commit", "-q", "--allow-empty", "-m", "Initial commit"}, {"push", "-q", bare, defaultBranch}} {
		if _, err := runGit(ctx, seed, args...); err != nil {
			return "", err
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.repo(repo)
	r.gitDir, r.defaultBranch = bare, defaultBranch
	return bare, nil
}

// SetDefaultBranch sets the default branch the fake reports for repo (default main).
func (g *GitHub) SetDefaultBranch(repo, branch string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.repo(repo).defaultBranch = branch
}

// Pulls returns repo's pull requests by number.
func (g *GitHub) Pulls(repo string) []FakePull {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.repo(repo)
	var out []FakePull
	for _, n := range slices.Sorted(maps.Keys(r.pulls)) {
		out = append(out, *r.pulls[n])
	}
	return out
}

// ClosePullByHand closes a pull request as a person would, merged or not (no request
// recorded; deliver the pull_request webhook yourself).
func (g *GitHub) ClosePullByHand(repo string, number int, merged bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p := g.repo(repo).pulls[number]; p != nil {
		p.State, p.Merged = "closed", merged
	}
}

// ReopenPullByHand reopens a closed pull request as a person would.
func (g *GitHub) ReopenPullByHand(repo string, number int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if p := g.repo(repo).pulls[number]; p != nil {
		p.State, p.Merged = "open", false
	}
}

// Dispatches returns the repository_dispatch events repo received.
func (g *GitHub) Dispatches(repo string) []FakeDispatch {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.repo(repo).dispatches)
}

func (g *GitHub) getApp(w http.ResponseWriter, _ *http.Request, _ int64, _ []string) int {
	return writeJSON(w, http.StatusOK, map[string]any{"id": g.AppID, "slug": AppSlug, "name": AppSlug,
		"owner": map[string]any{"login": "whilly-go", "type": "Organization"}})
}

// getAuthenticatedUser is GET /user: the static token's user; an installation token
// gets 403, as on GitHub.
func (g *GitHub) getAuthenticatedUser(w http.ResponseWriter, _ *http.Request, inst int64, _ []string) int {
	if inst != 0 {
		return writeJSON(w, http.StatusForbidden, map[string]string{"message": "Resource not accessible by integration"})
	}
	return writeJSON(w, http.StatusOK, map[string]any{"login": g.TokenUser, "id": 4242, "type": "User"})
}

func (g *GitHub) getUser(w http.ResponseWriter, _ *http.Request, _ int64, m []string) int {
	if strings.EqualFold(m[1], BotLogin) {
		return writeJSON(w, http.StatusOK, map[string]any{"login": BotLogin, "id": BotUserID, "type": "Bot"})
	}
	id := 1
	for _, c := range m[1] {
		id = id*31 + int(c)%1000
	}
	return writeJSON(w, http.StatusOK, map[string]any{"login": m[1], "id": id%1_000_000 + 1, "type": "User"})
}

func (g *GitHub) getRepo(w http.ResponseWriter, _ *http.Request, inst int64, m []string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.repoFor(inst, m)
	if !ok {
		return notFound(w)
	}
	owner, name, _ := strings.Cut(r.name, "/")
	return writeJSON(w, http.StatusOK, map[string]any{"name": name, "full_name": r.name, "private": true,
		"owner": map[string]any{"login": owner}, "default_branch": r.defaultBranch})
}

func pullJSON(r *fakeRepo, p *FakePull) map[string]any {
	owner, _, _ := strings.Cut(r.name, "/")
	typ := "User"
	if p.Author == BotLogin {
		typ = "Bot"
	}
	return map[string]any{
		"number": p.Number, "node_id": p.NodeID, "title": p.Title, "body": p.Body, "state": p.State,
		"draft": p.Draft, "merged": p.Merged, "html_url": fmt.Sprintf("https://github.com/%s/pull/%d", r.name, p.Number),
		"head": map[string]any{"ref": p.Head, "label": owner + ":" + p.Head},
		"base": map[string]any{"ref": p.Base, "label": owner + ":" + p.Base},
		"user": map[string]any{"login": p.Author, "type": typ},
	}
}

func (g *GitHub) listPulls(w http.ResponseWriter, req *http.Request, inst int64, m []string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.repoFor(inst, m)
	if !ok {
		return notFound(w)
	}
	q := req.URL.Query()
	state := q.Get("state")
	if state == "" {
		state = "open"
	}
	headOwner, head, byHead := strings.Cut(q.Get("head"), ":")
	owner, _, _ := strings.Cut(r.name, "/")
	out := []map[string]any{}
	for _, n := range slices.Sorted(maps.Keys(r.pulls)) {
		p := r.pulls[n]
		if (state != "all" && p.State != state) || (byHead && (p.Head != head || !strings.EqualFold(headOwner, owner))) {
			continue
		}
		out = append(out, pullJSON(r, p))
	}
	return writeJSON(w, http.StatusOK, out)
}

func invalid(w http.ResponseWriter, message string) int {
	return writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed",
		"errors": []map[string]string{{"resource": "PullRequest", "code": "custom", "message": message}}})
}

func (g *GitHub) createPull(w http.ResponseWriter, req *http.Request, inst int64, m []string) int {
	var in struct {
		Title, Body, Head, Base string
		Draft                   bool
	}
	if err := json.NewDecoder(req.Body).Decode(&in); err != nil || in.Title == "" || in.Head == "" || in.Base == "" {
		return writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"message": "Validation Failed"})
	}
	if _, branch, ok := strings.Cut(in.Head, ":"); ok {
		in.Head = branch
	}
	g.mu.Lock()
	r, ok := g.repoFor(inst, m)
	gitDir := ""
	if ok {
		gitDir = r.gitDir
	}
	g.mu.Unlock()
	if !ok {
		return notFound(w)
	}
	if gitDir != "" {
		head, herr := runGit(req.Context(), gitDir, "rev-parse", "--verify", "-q", "refs/heads/"+in.Head)
		base, berr := runGit(req.Context(), gitDir, "rev-parse", "--verify", "-q", "refs/heads/"+in.Base)
		switch {
		case herr != nil || berr != nil:
			return writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed",
				"errors": []map[string]string{{"resource": "PullRequest", "field": "head", "code": "invalid"}}})
		case head == base:
			return invalid(w, "No commits between "+in.Base+" and "+in.Head)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, p := range r.pulls {
		if p.State == "open" && p.Head == in.Head {
			owner, _, _ := strings.Cut(r.name, "/")
			return invalid(w, "A pull request already exists for "+owner+":"+in.Head+".")
		}
	}
	n := 1
	for num := range r.issues {
		n = max(n, num+1)
	}
	for num := range r.pulls {
		n = max(n, num+1)
	}
	login, _ := g.author(inst)
	p := &FakePull{Number: n, NodeID: "PR_" + randomHex(8), Title: in.Title, Body: in.Body, Head: in.Head, Base: in.Base,
		State: "open", Draft: in.Draft, OpenedAsDraft: in.Draft, Author: login}
	r.pulls[n] = p
	return writeJSON(w, http.StatusCreated, pullJSON(r, p))
}

// pull finds the pull request of m (repository, number) the installation may see.
func (g *GitHub) pull(inst int64, m []string) (*fakeRepo, *FakePull, bool) {
	r, ok := g.repoFor(inst, m)
	if !ok {
		return nil, nil, false
	}
	n, _ := strconv.Atoi(m[3])
	p := r.pulls[n]
	return r, p, p != nil
}

func (g *GitHub) getPull(w http.ResponseWriter, _ *http.Request, inst int64, m []string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, p, ok := g.pull(inst, m)
	if !ok {
		return notFound(w)
	}
	return writeJSON(w, http.StatusOK, pullJSON(r, p))
}

func (g *GitHub) editPull(w http.ResponseWriter, req *http.Request, inst int64, m []string) int {
	var in struct {
		Title *string `json:"title"`
		Body  *string `json:"body"`
		State *string `json:"state"`
	}
	if err := json.NewDecoder(req.Body).Decode(&in); err != nil {
		return writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"message": "Problems parsing JSON"})
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	r, p, ok := g.pull(inst, m)
	if !ok {
		return notFound(w)
	}
	if in.Title != nil {
		p.Title = *in.Title
	}
	if in.Body != nil {
		p.Body = *in.Body
		p.BodyEdits++
	}
	if in.State != nil {
		p.State = *in.State
	}
	return writeJSON(w, http.StatusOK, pullJSON(r, p))
}

func (g *GitHub) dispatch(w http.ResponseWriter, req *http.Request, inst int64, m []string) int {
	var in struct {
		EventType     string         `json:"event_type"`
		ClientPayload map[string]any `json:"client_payload"`
	}
	if err := json.NewDecoder(req.Body).Decode(&in); err != nil || in.EventType == "" {
		return writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"message": "Invalid request: event_type wasn't supplied."})
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.repoFor(inst, m)
	if !ok {
		return notFound(w)
	}
	r.dispatches = append(r.dispatches, FakeDispatch{EventType: in.EventType, ClientPayload: in.ClientPayload, Installation: inst})
	w.WriteHeader(http.StatusNoContent)
	return http.StatusNoContent
}

// graphQL answers the mutations whilly sends, markPullRequestReadyForReview and
// convertPullRequestToDraft; any other query fails the test.
func (g *GitHub) graphQL(w http.ResponseWriter, req *http.Request, inst int64, _ []string) int {
	var in struct {
		Query     string         `json:"query"`
		Variables map[string]any `json:"variables"`
	}
	if err := json.NewDecoder(req.Body).Decode(&in); err != nil {
		return writeJSON(w, http.StatusBadRequest, map[string]string{"message": "Problems parsing JSON"})
	}
	field, draft := "markPullRequestReadyForReview", false
	switch {
	case strings.Contains(in.Query, field):
	case strings.Contains(in.Query, "convertPullRequestToDraft"):
		field, draft = "convertPullRequestToDraft", true
	default:
		g.errorf("fake GitHub: unknown GraphQL query %q", in.Query)
		return writeJSON(w, http.StatusOK, map[string]any{"errors": []map[string]string{{"message": "unknown query in the fake"}}})
	}
	id, _ := in.Variables["id"].(string)
	g.mu.Lock()
	defer g.mu.Unlock()
	for key, r := range g.repos {
		if inst != 0 && !slices.Contains(g.installations[inst], key) {
			continue
		}
		for _, p := range r.pulls {
			if p.NodeID == id {
				p.Draft = draft
				return writeJSON(w, http.StatusOK, map[string]any{"data": map[string]any{field: map[string]any{
					"pullRequest": map[string]any{"number": p.Number, "isDraft": draft}}}})
			}
		}
	}
	return writeJSON(w, http.StatusOK, map[string]any{"data": map[string]any{field: nil},
		"errors": []map[string]string{{"type": "NOT_FOUND", "message": "Could not resolve to a node with the global id of '" + id + "'"}}})
}

// authenticateGit checks git's basic auth against the repository of m: the token must
// be the fake's, cover the repository, and may push only with contents: write.
func (g *GitHub) authenticateGit(r *http.Request, m []string) (fakeToken, int) {
	user, pass, ok := r.BasicAuth()
	if !ok || user != "x-access-token" {
		return fakeToken{}, http.StatusUnauthorized
	}
	tok, status := g.lookupToken(pass)
	if status != 0 {
		return tok, status
	}
	full := strings.ToLower(m[1] + "/" + m[2])
	g.mu.Lock()
	covered := tok.installation == 0 || slices.Contains(g.installations[tok.installation], full)
	g.mu.Unlock()
	if !covered || (tok.repos != nil && !slices.Contains(tok.repos, full)) {
		return tok, http.StatusNotFound
	}
	push := strings.HasSuffix(r.URL.Path, "/git-receive-pack") || r.URL.Query().Get("service") == "git-receive-pack"
	if push && tok.perms != nil && tok.perms["contents"] != "write" {
		return tok, http.StatusForbidden
	}
	return tok, 0
}

// statusRecorder remembers the status a handler wrote.
type statusRecorder struct {
	http.ResponseWriter
	status int
}

func (s *statusRecorder) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusRecorder) Write(b []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(b)
}

// serveGit runs git http-backend on the repository of m.
func (g *GitHub) serveGit(w http.ResponseWriter, req *http.Request, _ int64, m []string) int {
	g.mu.Lock()
	r, ok := g.repos[strings.ToLower(m[1]+"/"+m[2])]
	dir := ""
	if ok {
		dir = r.gitDir
	}
	backend := g.git
	g.mu.Unlock()
	if dir == "" || backend == nil {
		return notFound(w)
	}
	rel, err := filepath.Rel(backend.Root, dir)
	if err != nil {
		return writeJSON(w, http.StatusInternalServerError, nil)
	}
	status, err := backend.serve(w, req, "/"+filepath.ToSlash(rel)+strings.TrimPrefix(req.URL.Path, "/"+m[1]+"/"+m[2]+".git"))
	if err != nil {
		g.errorf("fake GitHub: %v", err)
		return writeJSON(w, http.StatusInternalServerError, nil)
	}
	return status
}

// Branch returns the commit subjects of a branch of a git repository of the fake,
// newest first, each as "SHA AUTHOR <EMAIL> SUBJECT"; nil when the branch does not
// exist.
func (g *GitHub) Branch(ctx context.Context, repo, branch string) ([]string, error) {
	g.mu.Lock()
	dir := g.repo(repo).gitDir
	g.mu.Unlock()
	if dir == "" {
		return nil, fmt.Errorf("%s is not a git repository of the fake (AddGitRepo)", repo)
	}
	if _, err := runGit(ctx, dir, "rev-parse", "--verify", "-q", "refs/heads/"+branch); err != nil {
		return nil, nil // no such branch: an answer, not a failure
	}
	out, err := runGit(ctx, dir, "log", "--format=%H %an <%ae> %s", "refs/heads/"+branch)
	if err != nil {
		return nil, err
	}
	return strings.Split(out, "\n"), nil
}
