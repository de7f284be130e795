package fakegithub

import (
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/golang-jwt/jwt/v4"
)

// GitHub is a stateful fake of the GitHub endpoints whilly calls: installation tokens
// (repository-scoped ones too), issues, labels, comments, reactions, collaborator
// permissions, the App's webhook deliveries and installations, repositories and their
// files (SetFile, github_contents.go), pull requests (with the one
// GraphQL mutation whilly sends), repository_dispatch, and git itself over smart HTTP
// for repositories made with AddGitRepo (see github_pulls.go). Clients reach it through
// the real go-github and ghinstallation code and real git: App requests must carry a JWT
// signed with Key (generated per fake), repository requests an installation token it
// issued or the static Token. It records every request, injects faults (Fail), and
// reports a route it does not know to its errorf (a test fails; a benchmark logs).
type GitHub struct {
	errorf func(format string, args ...any)
	Server *httptest.Server
	AppID  int64
	Key    *rsa.PrivateKey
	KeyPEM []byte
	// Token is a static token (WHILLY_GITHUB_TOKEN) the fake accepts as user TokenUser.
	Token     string
	TokenUser string

	mu            sync.Mutex
	repos         map[string]*fakeRepo
	installations map[int64][]string // installation → repos (lower-case owner/name); nil list: all
	tokens        map[string]fakeToken
	requests      []GitHubRequest
	faults        []*Fault
	nextID        int64
	deliveries    []FakeHookDelivery
	redelivered   []int64
	routes        []fakeRoute
	tokenTTL      time.Duration
	limits        Limits
	latency       time.Duration         // SetLatency
	hours         map[int64]hourWindow  // requests per installation in its current hour
	writesAt      map[int64][]time.Time // content writes per installation in the last minute
	tokenRequests []TokenRequest
	gitRoot       string   // bare repositories: <gitRoot>/<owner>/<name>.git
	git           *GitHTTP // serves the repositories under gitRoot
	flow          manifestFlow
	oauth         fakeOAuth  // github_oauth.go
	checks        fakeChecks // reviews, check suites and runs (github_checks.go)
	check         Check      // SetCheck
}

// Check judges a request before the fake answers it: a non-nil error is a request
// GitHub would refuse, with the status GitHub would answer. It must leave r.Body
// readable.
type Check func(r *http.Request) (status int, err error)

// GitHubRequest is one request the fake answered.
type GitHubRequest struct {
	Method       string
	Path         string
	Status       int
	Installation int64 // 0: App JWT or static token
	// Scoped: the request carried a token minted for some repositories and
	// permissions only (a worker's push token).
	Scoped bool
	At     time.Time
	// Limited: the fake's rate limits (SetLimits) refused the request.
	Limited bool
}

// Write reports whether the request changed something on GitHub (a content write in
// GitHub's rate-limit sense); token exchanges and redelivery requests are not counted.
func (r GitHubRequest) Write() bool {
	return r.Method != http.MethodGet && strings.HasPrefix(r.Path, "/repos/")
}

// Fault makes matching requests fail: Times of them (0: every one) get Status with
// Header, after Delay (a GitHub that stalls; closing the fake waits for it). Path is a
// regular expression matched against the whole path.
type Fault struct {
	Method string
	Path   string
	Status int
	Header map[string]string
	Times  int
	Delay  time.Duration

	re   *regexp.Regexp
	used int
}

// FakeComment is an issue comment held by the fake.
type FakeComment struct {
	ID     int64
	Body   string
	Author string
	Bot    bool
}

// FakeHookDelivery is a webhook delivery the fake lists under /app/hook/deliveries.
type FakeHookDelivery struct {
	ID          int64
	GUID        string
	DeliveredAt time.Time
	StatusCode  int
	Event       string
	Action      string
	// Payload is what GitHub sent (GET /app/hook/deliveries/{id} returns it); a
	// delivery without one cannot be read back.
	Payload []byte
}

type fakeToken struct {
	installation int64
	expires      time.Time
	repos        []string          // lower-case owner/name; nil: every repository of the installation
	perms        map[string]string // nil: the installation's
	request      int               // its entry in tokenRequests
}

// scoped reports whether the token was minted for some repositories or permissions.
func (t fakeToken) scoped() bool { return t.repos != nil || t.perms != nil }

// mayCall reports whether a scoped token may make an API call (m: the route's match). A
// push token may read its repositories' metadata and nothing else of the API.
func (t fakeToken) mayCall(method, path string, m []string) bool {
	if method == http.MethodDelete && path == "/installation/token" {
		return true // every token may revoke itself
	}
	return method == http.MethodGet && repoMetadata.MatchString(path) && slices.Contains(t.repos, strings.ToLower(m[1]+"/"+m[2]))
}

type fakeIssue struct {
	title, body, state, author string
	labels                     []string
	comments                   []int64
	reactions                  []string
}

type fakeRepo struct {
	name          string
	labels        map[string]fakeLabel
	issues        map[int]*fakeIssue
	comments      map[int64]*FakeComment
	commentOf     map[int64]int // comment → issue
	reactions     map[int64][]string
	perms         map[string]string
	defaultBranch string
	gitDir        string // bare repository (AddGitRepo); "" when git is not served
	pulls         map[int]*FakePull
	dispatches    []FakeDispatch
	files         map[string]string // path → content, for the contents API (SetFile)
}

type fakeLabel struct{ Name, Color, Description string }

// authKind is how a route authenticates.
type authKind int

const (
	authToken authKind = iota // an installation token or the static token
	authApp                   // the App's JWT
	authGit                   // git over HTTP: basic auth, x-access-token and a token
	authNone                  // the web pages and the manifest conversion: no credentials
)

type fakeRoute struct {
	method string
	re     *regexp.Regexp
	auth   authKind
	h      func(w http.ResponseWriter, r *http.Request, inst int64, m []string) int
}

// BotLogin is the login of the App's bot user in the fake.
const BotLogin = "whilly[bot]"

// New starts a fake with a fresh 2048-bit App key. errorf hears what a test would fail
// on (an unknown route, a bad App JWT); Close stops the fake.
func New(errorf func(format string, args ...any)) (*GitHub, error) {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, fmt.Errorf("generate the fake GitHub's App key: %w", err)
	}
	g := &GitHub{
		errorf: errorf, AppID: 4242, Key: key,
		KeyPEM:        pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}),
		Token:         "ghp_" + randomHex(16),
		TokenUser:     "octo-operator",
		repos:         map[string]*fakeRepo{},
		installations: map[int64][]string{},
		tokens:        map[string]fakeToken{},
		nextID:        1000,
		hours:         map[int64]hourWindow{},
		writesAt:      map[int64][]time.Time{},
		tokenTTL:      time.Hour,
	}
	g.routes = append(append(append(g.oauthRoutes(), g.checkRoutes()...), g.contentRoutes()...), g.routeTable()...)
	g.Server = httptest.NewServer(http.HandlerFunc(g.serve))
	return g, nil
}

// Close stops the server and removes the git repositories AddGitRepo made.
func (g *GitHub) Close() {
	g.Server.Close()
	g.mu.Lock()
	root := g.gitRoot
	g.mu.Unlock()
	if root != "" {
		_ = os.RemoveAll(root)
	}
}

// randomHex returns n random bytes in hex (crypto/rand.Read never fails).
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// SetCheck makes the fake judge every request with check (the tests check them against
// GitHub's published API descriptions): a request check refuses is reported to errorf
// and answered with check's status, as GitHub would refuse it.
func (g *GitHub) SetCheck(check Check) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.check = check
}

// URL is the API base URL to configure (WHILLY_GITHUB_API_URL).
func (g *GitHub) URL() string { return g.Server.URL + "/" }

// Install registers an installation covering repos (owner/name).
func (g *GitHub) Install(id int64, repos ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for i := range repos {
		repos[i] = strings.ToLower(repos[i])
	}
	g.installations[id] = append(g.installations[id], repos...)
}

func (g *GitHub) repo(name string) *fakeRepo {
	k := strings.ToLower(name)
	r := g.repos[k]
	if r == nil {
		r = &fakeRepo{name: name, labels: map[string]fakeLabel{}, issues: map[int]*fakeIssue{},
			comments: map[int64]*FakeComment{}, commentOf: map[int64]int{}, reactions: map[int64][]string{}, perms: map[string]string{},
			defaultBranch: "main", pulls: map[int]*FakePull{}}
		g.repos[k] = r
	}
	return r
}

// AddIssue creates an open issue.
func (g *GitHub) AddIssue(repo string, number int, title, body, author string, labels ...string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.repo(repo)
	r.issues[number] = &fakeIssue{title: title, body: body, state: "open", author: author}
	for _, l := range labels {
		g.addLabelLocked(r, r.issues[number], l)
	}
}

// SetPermission sets a user's permission on repo (admin, write, read, none).
func (g *GitHub) SetPermission(repo, user, permission string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.repo(repo).perms[strings.ToLower(user)] = permission
}

// IssueLabels returns the labels on an issue.
func (g *GitHub) IssueLabels(repo string, number int) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if is := g.repo(repo).issues[number]; is != nil {
		return slices.Clone(is.labels)
	}
	return nil
}

// RepoLabel returns a repository label's colour and description.
func (g *GitHub) RepoLabel(repo, name string) (color, description string, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	l, ok := g.repo(repo).labels[strings.ToLower(name)]
	return l.Color, l.Description, ok
}

// IssueComments returns an issue's comments, oldest first.
func (g *GitHub) IssueComments(repo string, number int) []FakeComment {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.repo(repo)
	var out []FakeComment
	if is := r.issues[number]; is != nil {
		for _, id := range is.comments {
			out = append(out, *r.comments[id])
		}
	}
	return out
}

// IssueReactions returns the reactions on an issue.
func (g *GitHub) IssueReactions(repo string, number int) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	if is := g.repo(repo).issues[number]; is != nil {
		return slices.Clone(is.reactions)
	}
	return nil
}

// CommentReactions returns the reactions on a comment.
func (g *GitHub) CommentReactions(repo string, id int64) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.repo(repo).reactions[id])
}

// AddComment posts a comment as a person (not through the API: no request recorded).
func (g *GitHub) AddComment(repo string, number int, author, body string) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.repo(repo)
	return g.addCommentLocked(r, r.issues[number], number, author, false, body)
}

// AddBotComment posts a comment as another App's bot user, login (e.g. "other[bot]").
func (g *GitHub) AddBotComment(repo string, number int, login, body string) int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.repo(repo)
	return g.addCommentLocked(r, r.issues[number], number, login, true, body)
}

// RemoveLabelByHand takes a label off an issue as a person would (no request recorded).
func (g *GitHub) RemoveLabelByHand(repo string, number int, label string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if is := g.repo(repo).issues[number]; is != nil {
		is.labels = slices.DeleteFunc(is.labels, func(l string) bool { return strings.EqualFold(l, label) })
	}
}

// AddLabelByHand puts a label on an issue as a person would (no request recorded;
// deliver the issues.labeled webhook yourself).
func (g *GitHub) AddLabelByHand(repo string, number int, label string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.repo(repo)
	if is := r.issues[number]; is != nil {
		g.addLabelLocked(r, is, label)
	}
}

// CloseIssueByHand closes an issue as a person would (no request recorded).
func (g *GitHub) CloseIssueByHand(repo string, number int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if is := g.repo(repo).issues[number]; is != nil {
		is.state = "closed"
	}
}

// DeleteCommentByHand deletes a comment as a person would.
func (g *GitHub) DeleteCommentByHand(repo string, id int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	r := g.repo(repo)
	if n, ok := r.commentOf[id]; ok {
		is := r.issues[n]
		is.comments = slices.DeleteFunc(is.comments, func(c int64) bool { return c == id })
	}
	delete(r.comments, id)
	delete(r.commentOf, id)
}

// AddHookDelivery adds a delivery to the App's delivery log.
func (g *GitHub) AddHookDelivery(d FakeHookDelivery) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.deliveries = append(g.deliveries, d)
}

// Redelivered returns the ids of the deliveries whose redelivery was requested.
func (g *GitHub) Redelivered() []int64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.redelivered)
}

// Fail injects a fault.
func (g *GitHub) Fail(f Fault) {
	g.mu.Lock()
	defer g.mu.Unlock()
	f.re = regexp.MustCompile("^" + f.Path + "$")
	g.faults = append(g.faults, &f)
}

// Requests returns every request answered so far.
func (g *GitHub) Requests() []GitHubRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.requests)
}

// Writes counts the content writes answered with a 2xx.
func (g *GitHub) Writes() int {
	n := 0
	for _, r := range g.Requests() {
		if r.Write() && r.Status < 300 {
			n++
		}
	}
	return n
}

// CountRequests counts answered requests with this method whose path matches the
// regular expression (whole path), and a 2xx status.
func (g *GitHub) CountRequests(method, path string) int {
	re := regexp.MustCompile("^" + path + "$")
	n := 0
	for _, r := range g.Requests() {
		if r.Method == method && re.MatchString(r.Path) && r.Status < 300 {
			n++
		}
	}
	return n
}

func (g *GitHub) serve(w http.ResponseWriter, r *http.Request) {
	path := r.URL.EscapedPath()
	g.wait()
	rec := GitHubRequest{Method: r.Method, Path: path, At: time.Now()}
	defer func() {
		g.mu.Lock()
		g.requests = append(g.requests, rec)
		g.mu.Unlock()
	}()
	g.mu.Lock()
	check := g.check
	g.mu.Unlock()
	if check != nil {
		if status, err := check(r); err != nil {
			g.errorf("GitHub would refuse %s %s: %v", r.Method, r.URL.RequestURI(), err)
			rec.Status = writeJSON(w, status, map[string]string{"message": err.Error()})
			return
		}
	}
	var route *fakeRoute
	var m []string
	for i := range g.routes {
		if g.routes[i].method == r.Method {
			if m = g.routes[i].re.FindStringSubmatch(path); m != nil {
				route = &g.routes[i]
				break
			}
		}
	}
	if route == nil {
		g.errorf("fake GitHub: unknown route %s %s", r.Method, path)
		rec.Status = writeJSON(w, http.StatusNotFound, map[string]string{"message": "Not Found (unknown route in the fake)"})
		return
	}
	for i := 1; i < len(m); i++ {
		if u, err := url.PathUnescape(m[i]); err == nil {
			m[i] = u
		}
	}
	tok, status := g.authenticate(r, route.auth, m)
	inst := tok.installation
	rec.Installation, rec.Scoped = inst, tok.scoped()
	if status != 0 {
		if route.auth == authGit {
			w.Header().Set("WWW-Authenticate", `Basic realm="GitHub"`)
		}
		rec.Status = writeJSON(w, status, map[string]string{"message": "Bad credentials"})
		return
	}
	if tok.scoped() && route.auth == authToken && !tok.mayCall(r.Method, path, m) {
		rec.Status = writeJSON(w, http.StatusForbidden, map[string]string{"message": "Resource not accessible by integration"})
		return
	}
	if f := g.fault(r.Method, path); f != nil {
		time.Sleep(f.Delay)
		for k, v := range f.Header {
			w.Header().Set(k, v)
		}
		rec.Status = writeJSON(w, f.Status, map[string]string{"message": fmt.Sprintf("injected HTTP %d", f.Status)})
		return
	}
	// The App's own requests (its JWT: token exchanges, the delivery log) have a budget
	// of their own on GitHub, apart from its installations': not counted here.
	if route.auth != authApp {
		if rec.Status, rec.Limited = g.rateLimit(w, inst, rec.Write(), rec.At); rec.Limited {
			return
		}
	}
	rec.Status = route.h(w, r, inst, m)
}

func (g *GitHub) fault(method, path string) *Fault {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, f := range g.faults {
		if (f.Method == "" || f.Method == method) && f.re.MatchString(path) && (f.Times == 0 || f.used < f.Times) {
			f.used++
			return f
		}
	}
	return nil
}

// authenticate checks the App JWT (app routes), git's basic auth (git routes, m naming
// the repository) or the token; it returns the token and a non-zero status when refused.
func (g *GitHub) authenticate(r *http.Request, kind authKind, m []string) (fakeToken, int) {
	auth := r.Header.Get("Authorization")
	switch kind {
	case authGit:
		return g.authenticateGit(r, m)
	case authApp:
		raw, ok := strings.CutPrefix(auth, "Bearer ")
		if !ok {
			return fakeToken{}, http.StatusUnauthorized
		}
		claims := &jwt.RegisteredClaims{}
		_, err := jwt.ParseWithClaims(raw, claims, func(tok *jwt.Token) (any, error) {
			if _, ok := tok.Method.(*jwt.SigningMethodRSA); !ok {
				return nil, fmt.Errorf("unexpected signing method %v", tok.Header["alg"])
			}
			return &g.Key.PublicKey, nil
		})
		if err != nil || claims.Issuer != strconv.FormatInt(g.AppID, 10) {
			g.errorf("fake GitHub: bad App JWT on %s %s: %v", r.Method, r.URL.Path, err)
			return fakeToken{}, http.StatusUnauthorized
		}
		return fakeToken{}, 0
	case authNone:
		return fakeToken{}, 0
	case authToken:
	}
	return g.lookupToken(strings.TrimPrefix(strings.TrimPrefix(auth, "token "), "Bearer "))
}

// lookupToken finds a token the fake accepts: the static one or an unexpired issued one.
func (g *GitHub) lookupToken(tok string) (fakeToken, int) {
	if tok == "" {
		return fakeToken{}, http.StatusUnauthorized
	}
	if tok == g.Token {
		return fakeToken{}, 0
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	ft, ok := g.tokens[tok]
	if !ok || time.Now().After(ft.expires) {
		return fakeToken{}, http.StatusUnauthorized
	}
	return ft, 0
}

func writeJSON(w http.ResponseWriter, status int, v any) int {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	if v != nil {
		_ = json.NewEncoder(w).Encode(v)
	}
	return status
}

const (
	repoRe  = `/repos/([^/]+)/([^/]+)`
	issueRe = repoRe + `/issues/([0-9]+)`
)

// repoMetadata is GET /repos/OWNER/NAME, all a push token may read of the API.
var repoMetadata = regexp.MustCompile("^" + repoRe + "$")

func (g *GitHub) routeTable() []fakeRoute {
	rt := func(method, pattern string, auth authKind, h func(http.ResponseWriter, *http.Request, int64, []string) int) fakeRoute {
		return fakeRoute{method: method, re: regexp.MustCompile("^" + pattern + "$"), auth: auth, h: h}
	}
	return []fakeRoute{
		rt("POST", `/app/installations/([0-9]+)/access_tokens`, authApp, g.accessToken),
		rt("DELETE", `/installation/token`, authToken, g.revokeToken),
		rt("GET", `/app`, authApp, g.getApp),
		rt("POST", `/settings/apps/new`, authNone, g.newApp),
		rt("POST", `/organizations/([^/]+)/settings/apps/new`, authNone, g.newApp),
		rt("POST", `/app-manifests/([^/]+)/conversions`, authNone, g.convertManifest),
		rt("GET", `/app/hook/deliveries`, authApp, g.listDeliveries),
		rt("POST", `/app/hook/deliveries/([0-9]+)/attempts`, authApp, g.redeliver),
		rt("GET", `/app/hook/deliveries/([0-9]+)`, authApp, g.getDelivery),
		rt("GET", repoRe+`/installation`, authApp, g.repoInstallation),
		rt("GET", issueRe, authToken, g.getIssue),
		rt("GET", issueRe+`/labels`, authToken, g.listIssueLabels),
		rt("POST", issueRe+`/labels`, authToken, g.addIssueLabels),
		rt("DELETE", issueRe+`/labels/([^/]+)`, authToken, g.removeIssueLabel),
		rt("GET", repoRe+`/labels/([^/]+)`, authToken, g.getLabel),
		rt("POST", repoRe+`/labels`, authToken, g.createLabel),
		rt("GET", issueRe+`/comments`, authToken, g.listComments),
		rt("POST", issueRe+`/comments`, authToken, g.createComment),
		rt("GET", repoRe+`/issues/comments/([0-9]+)`, authToken, g.getComment),
		rt("PATCH", repoRe+`/issues/comments/([0-9]+)`, authToken, g.editComment),
		rt("POST", issueRe+`/reactions`, authToken, g.reactIssue),
		rt("POST", repoRe+`/issues/comments/([0-9]+)/reactions`, authToken, g.reactComment),
		rt("GET", repoRe+`/collaborators/([^/]+)/permission`, authToken, g.permission),
		rt("GET", `/users/([^/]+)`, authToken, g.getUser),
		rt("GET", `/user`, authToken, g.getAuthenticatedUser),
		rt("GET", repoRe, authToken, g.getRepo),
		rt("GET", repoRe+`/pulls`, authToken, g.listPulls),
		rt("POST", repoRe+`/pulls`, authToken, g.createPull),
		rt("GET", repoRe+`/pulls/([0-9]+)`, authToken, g.getPull),
		rt("PATCH", repoRe+`/pulls/([0-9]+)`, authToken, g.editPull),
		rt("POST", repoRe+`/dispatches`, authToken, g.dispatch),
		rt("POST", `/graphql`, authToken, g.graphQL),
		rt("GET", gitRe+`/info/refs`, authGit, g.serveGit),
		rt("POST", gitRe+`/git-(?:upload|receive)-pack`, authGit, g.serveGit),
	}
}

func notFound(w http.ResponseWriter) int {
	return writeJSON(w, http.StatusNotFound, map[string]string{"message": "Not Found"})
}

// TokenRequest is one installation token the fake minted, with the repositories and
// permissions it was asked to restrict the token to (none: the whole installation), and
// when it was revoked (DELETE /installation/token; zero: live). A revoked token is
// refused from then on, by the API and by git.
type TokenRequest struct {
	Installation int64
	Repositories []string
	Permissions  map[string]string
	Token        string
	RevokedAt    time.Time
}

// revokeToken is DELETE /installation/token: the token of the request revokes itself.
func (g *GitHub) revokeToken(w http.ResponseWriter, r *http.Request, _ int64, _ []string) int {
	tok := strings.TrimPrefix(strings.TrimPrefix(r.Header.Get("Authorization"), "token "), "Bearer ")
	g.mu.Lock()
	defer g.mu.Unlock()
	ft, ok := g.tokens[tok]
	if !ok {
		return writeJSON(w, http.StatusUnauthorized, map[string]string{"message": "Bad credentials"})
	}
	delete(g.tokens, tok)
	g.tokenRequests[ft.request].RevokedAt = time.Now()
	w.WriteHeader(http.StatusNoContent)
	return http.StatusNoContent
}

// TokenRequests returns the tokens minted so far.
func (g *GitHub) TokenRequests() []TokenRequest {
	g.mu.Lock()
	defer g.mu.Unlock()
	return slices.Clone(g.tokenRequests)
}

// SetTokenTTL sets the lifetime of the tokens minted from now on (default an hour).
func (g *GitHub) SetTokenTTL(d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.tokenTTL = d
}

func (g *GitHub) accessToken(w http.ResponseWriter, req *http.Request, _ int64, m []string) int {
	id, _ := strconv.ParseInt(m[1], 10, 64)
	var opts struct {
		Repositories []string          `json:"repositories"`
		Permissions  map[string]string `json:"permissions"`
	}
	if req.ContentLength != 0 {
		if err := json.NewDecoder(req.Body).Decode(&opts); err != nil {
			return writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"message": "Invalid request"})
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	repos, known := g.installations[id]
	if !known {
		return notFound(w)
	}
	ft := fakeToken{installation: id, expires: time.Now().Add(g.tokenTTL), perms: opts.Permissions}
	if opts.Repositories != nil {
		ft.repos = []string{}
		for _, name := range opts.Repositories {
			full := ""
			for _, r := range repos {
				if _, n, _ := strings.Cut(r, "/"); n == strings.ToLower(name) {
					full = r
				}
			}
			if full == "" {
				return writeJSON(w, http.StatusUnprocessableEntity, map[string]string{
					"message": "There is at least one repository that does not exist or is not accessible to the parent installation."})
			}
			ft.repos = append(ft.repos, full)
		}
	}
	for perm, level := range opts.Permissions {
		if perm != "contents" && perm != "metadata" && perm != "issues" && perm != "pull_requests" {
			return writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"message": "The permissions requested are not granted to this installation."})
		}
		if level != "read" && level != "write" {
			return writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"message": "Invalid permission level " + level})
		}
	}
	tok := "ghs_" + randomHex(16)
	ft.request = len(g.tokenRequests)
	g.tokenRequests = append(g.tokenRequests, TokenRequest{Installation: id, Repositories: slices.Clone(opts.Repositories), Permissions: opts.Permissions, Token: tok})
	g.tokens[tok] = ft
	out := map[string]any{"token": tok, "expires_at": ft.expires.UTC().Format(time.RFC3339)}
	if ft.perms != nil {
		out["permissions"] = ft.perms
	}
	return writeJSON(w, http.StatusCreated, out)
}

func (g *GitHub) listDeliveries(w http.ResponseWriter, r *http.Request, _ int64, _ []string) int {
	g.mu.Lock()
	ds := slices.Clone(g.deliveries)
	g.mu.Unlock()
	slices.SortFunc(ds, func(a, b FakeHookDelivery) int { return b.DeliveredAt.Compare(a.DeliveredAt) })
	per, _ := strconv.Atoi(r.URL.Query().Get("per_page"))
	if per <= 0 {
		per = 30
	}
	start, _ := strconv.Atoi(r.URL.Query().Get("cursor"))
	end := min(start+per, len(ds))
	start = min(start, end)
	if end < len(ds) {
		next := *r.URL
		q := next.Query()
		q.Set("cursor", strconv.Itoa(end))
		next.RawQuery = q.Encode()
		w.Header().Set("Link", fmt.Sprintf(`<%s%s>; rel="next"`, g.Server.URL, next.RequestURI()))
	}
	out := []map[string]any{}
	for _, d := range ds[start:end] {
		out = append(out, map[string]any{"id": d.ID, "guid": d.GUID, "delivered_at": d.DeliveredAt.UTC().Format(time.RFC3339),
			"status_code": d.StatusCode, "status": http.StatusText(d.StatusCode), "event": d.Event, "action": d.Action, "redelivery": false})
	}
	return writeJSON(w, http.StatusOK, out)
}

// LogDelivery records a delivery of payload in the App's delivery log as GitHub does
// when it posts a webhook (failed, as to a URL nothing answers: pull mode's case), and
// returns it.
func (g *GitHub) LogDelivery(event, guid string, payload []byte) FakeHookDelivery {
	var head struct {
		Action string `json:"action"`
	}
	_ = json.Unmarshal(payload, &head) // a payload without an action has none
	g.mu.Lock()
	defer g.mu.Unlock()
	g.nextID++
	d := FakeHookDelivery{ID: g.nextID, GUID: guid, DeliveredAt: time.Now(), StatusCode: http.StatusBadGateway,
		Event: event, Action: head.Action, Payload: slices.Clone(payload)}
	g.deliveries = append(g.deliveries, d)
	return d
}

func (g *GitHub) getDelivery(w http.ResponseWriter, _ *http.Request, _ int64, m []string) int {
	id, _ := strconv.ParseInt(m[1], 10, 64)
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, d := range g.deliveries {
		if d.ID == id && d.Payload != nil {
			return writeJSON(w, http.StatusOK, map[string]any{
				"id": d.ID, "guid": d.GUID, "delivered_at": d.DeliveredAt.UTC().Format(time.RFC3339),
				"status_code": d.StatusCode, "status": http.StatusText(d.StatusCode), "event": d.Event, "action": d.Action,
				"redelivery": false, "duration": 0.1,
				"request": map[string]any{
					"headers": map[string]string{"X-GitHub-Event": d.Event, "X-GitHub-Delivery": d.GUID, "Content-Type": "application/json"},
					"payload": json.RawMessage(d.Payload),
				},
				"response": map[string]any{"headers": map[string]string{}, "payload": "Bad Gateway"},
			})
		}
	}
	return notFound(w)
}

func (g *GitHub) redeliver(w http.ResponseWriter, _ *http.Request, _ int64, m []string) int {
	id, _ := strconv.ParseInt(m[1], 10, 64)
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, d := range g.deliveries {
		if d.ID == id {
			g.redelivered = append(g.redelivered, id)
			return writeJSON(w, http.StatusAccepted, map[string]any{})
		}
	}
	return notFound(w)
}

func (g *GitHub) repoInstallation(w http.ResponseWriter, _ *http.Request, _ int64, m []string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	full := strings.ToLower(m[1] + "/" + m[2])
	for id, repos := range g.installations {
		if slices.Contains(repos, full) {
			return writeJSON(w, http.StatusOK, map[string]any{"id": id, "app_id": g.AppID})
		}
	}
	return notFound(w)
}

// issue finds the repository and issue of m, checking the installation may see it.
func (g *GitHub) issue(inst int64, m []string) (*fakeRepo, *fakeIssue, int, bool) {
	r, ok := g.repoFor(inst, m)
	if !ok {
		return nil, nil, 0, false
	}
	n, _ := strconv.Atoi(m[3])
	is := r.issues[n]
	return r, is, n, is != nil
}

func (g *GitHub) repoFor(inst int64, m []string) (*fakeRepo, bool) {
	full := strings.ToLower(m[1] + "/" + m[2])
	if inst != 0 && !slices.Contains(g.installations[inst], full) {
		return nil, false
	}
	r, ok := g.repos[full]
	return r, ok
}

func labelJSON(l fakeLabel) map[string]any {
	return map[string]any{"name": l.Name, "color": l.Color, "description": l.Description}
}

func (g *GitHub) labelsJSON(r *fakeRepo, is *fakeIssue) []map[string]any {
	out := []map[string]any{}
	for _, name := range is.labels {
		out = append(out, labelJSON(r.labels[strings.ToLower(name)]))
	}
	return out
}

func (g *GitHub) getIssue(w http.ResponseWriter, _ *http.Request, inst int64, m []string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, is, n, ok := g.issue(inst, m)
	if !ok {
		return notFound(w)
	}
	return writeJSON(w, http.StatusOK, map[string]any{
		"number": n, "title": is.title, "body": is.body, "state": is.state, "labels": g.labelsJSON(r, is),
		"user": map[string]any{"login": is.author, "type": "User"}, "html_url": fmt.Sprintf("https://github.com/%s/issues/%d", r.name, n),
	})
}

func (g *GitHub) listIssueLabels(w http.ResponseWriter, _ *http.Request, inst int64, m []string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, is, _, ok := g.issue(inst, m)
	if !ok {
		return notFound(w)
	}
	return writeJSON(w, http.StatusOK, g.labelsJSON(r, is))
}

func (g *GitHub) addLabelLocked(r *fakeRepo, is *fakeIssue, name string) {
	l, ok := r.labels[strings.ToLower(name)]
	if !ok {
		l = fakeLabel{Name: name, Color: "ededed"} // GitHub creates unknown labels bare
		r.labels[strings.ToLower(name)] = l
	}
	if !slices.ContainsFunc(is.labels, func(x string) bool { return strings.EqualFold(x, name) }) {
		is.labels = append(is.labels, l.Name)
	}
}

func (g *GitHub) addIssueLabels(w http.ResponseWriter, req *http.Request, inst int64, m []string) int {
	// GitHub takes {"labels": [...]} or, as its documentation allows, a bare array.
	var names []string
	var in struct {
		Labels []string `json:"labels"`
	}
	raw, err := io.ReadAll(req.Body)
	if json.Unmarshal(raw, &in) == nil {
		names = in.Labels
	} else if err != nil || json.Unmarshal(raw, &names) != nil {
		return writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"message": "Validation Failed"})
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	r, is, _, ok := g.issue(inst, m)
	if !ok {
		return notFound(w)
	}
	for _, n := range names {
		g.addLabelLocked(r, is, n)
	}
	return writeJSON(w, http.StatusOK, g.labelsJSON(r, is))
}

func (g *GitHub) removeIssueLabel(w http.ResponseWriter, _ *http.Request, inst int64, m []string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, is, _, ok := g.issue(inst, m)
	if !ok {
		return notFound(w)
	}
	i := slices.IndexFunc(is.labels, func(x string) bool { return strings.EqualFold(x, m[4]) })
	if i < 0 {
		return writeJSON(w, http.StatusNotFound, map[string]string{"message": "Label does not exist"})
	}
	is.labels = slices.Delete(is.labels, i, i+1)
	return writeJSON(w, http.StatusOK, g.labelsJSON(r, is))
}

func (g *GitHub) getLabel(w http.ResponseWriter, _ *http.Request, inst int64, m []string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.repoFor(inst, m)
	if !ok {
		return notFound(w)
	}
	l, ok := r.labels[strings.ToLower(m[3])]
	if !ok {
		return notFound(w)
	}
	return writeJSON(w, http.StatusOK, labelJSON(l))
}

func (g *GitHub) createLabel(w http.ResponseWriter, req *http.Request, inst int64, m []string) int {
	var l fakeLabel
	if err := json.NewDecoder(req.Body).Decode(&l); err != nil || l.Name == "" {
		return writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"message": "Validation Failed"})
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.repoFor(inst, m)
	if !ok {
		return notFound(w)
	}
	if _, exists := r.labels[strings.ToLower(l.Name)]; exists {
		return writeJSON(w, http.StatusUnprocessableEntity, map[string]any{"message": "Validation Failed",
			"errors": []map[string]string{{"resource": "Label", "code": "already_exists", "field": "name"}}})
	}
	r.labels[strings.ToLower(l.Name)] = l
	return writeJSON(w, http.StatusCreated, labelJSON(l))
}

func commentJSON(c *FakeComment) map[string]any {
	typ := "User"
	if c.Bot {
		typ = "Bot"
	}
	return map[string]any{"id": c.ID, "body": c.Body, "user": map[string]any{"login": c.Author, "type": typ}}
}

func (g *GitHub) addCommentLocked(r *fakeRepo, is *fakeIssue, n int, author string, bot bool, body string) int64 {
	g.nextID++
	c := &FakeComment{ID: g.nextID, Body: body, Author: author, Bot: bot}
	r.comments[c.ID] = c
	r.commentOf[c.ID] = n
	is.comments = append(is.comments, c.ID)
	return c.ID
}

func (g *GitHub) listComments(w http.ResponseWriter, req *http.Request, inst int64, m []string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, is, _, ok := g.issue(inst, m)
	if !ok {
		return notFound(w)
	}
	per, _ := strconv.Atoi(req.URL.Query().Get("per_page"))
	if per <= 0 {
		per = 30
	}
	page, _ := strconv.Atoi(req.URL.Query().Get("page"))
	page = max(page, 1)
	start := min((page-1)*per, len(is.comments))
	end := min(start+per, len(is.comments))
	if end < len(is.comments) {
		next := *req.URL
		q := next.Query()
		q.Set("page", strconv.Itoa(page+1))
		next.RawQuery = q.Encode()
		w.Header().Set("Link", fmt.Sprintf(`<%s%s>; rel="next"`, g.Server.URL, next.RequestURI()))
	}
	out := []map[string]any{}
	for _, id := range is.comments[start:end] {
		out = append(out, commentJSON(r.comments[id]))
	}
	return writeJSON(w, http.StatusOK, out)
}

func (g *GitHub) author(inst int64) (string, bool) {
	if inst == 0 {
		return g.TokenUser, false
	}
	return BotLogin, true
}

func (g *GitHub) createComment(w http.ResponseWriter, req *http.Request, inst int64, m []string) int {
	var in struct{ Body string }
	if err := json.NewDecoder(req.Body).Decode(&in); err != nil || in.Body == "" {
		return writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"message": "Validation Failed"})
	}
	if len(in.Body) > 65536 {
		return writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"message": "body is too long (maximum is 65536 characters)"})
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	r, is, n, ok := g.issue(inst, m)
	if !ok {
		return notFound(w)
	}
	login, bot := g.author(inst)
	id := g.addCommentLocked(r, is, n, login, bot, in.Body)
	return writeJSON(w, http.StatusCreated, commentJSON(r.comments[id]))
}

func (g *GitHub) getComment(w http.ResponseWriter, _ *http.Request, inst int64, m []string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.repoFor(inst, m)
	if !ok {
		return notFound(w)
	}
	id, _ := strconv.ParseInt(m[3], 10, 64)
	c, ok := r.comments[id]
	if !ok {
		return notFound(w)
	}
	return writeJSON(w, http.StatusOK, commentJSON(c))
}

func (g *GitHub) editComment(w http.ResponseWriter, req *http.Request, inst int64, m []string) int {
	var in struct{ Body string }
	if err := json.NewDecoder(req.Body).Decode(&in); err != nil || in.Body == "" {
		return writeJSON(w, http.StatusUnprocessableEntity, map[string]string{"message": "Validation Failed"})
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.repoFor(inst, m)
	if !ok {
		return notFound(w)
	}
	id, _ := strconv.ParseInt(m[3], 10, 64)
	c, ok := r.comments[id]
	if !ok {
		return notFound(w)
	}
	if login, _ := g.author(inst); login != c.Author {
		return writeJSON(w, http.StatusForbidden, map[string]string{"message": "Resource not accessible by integration"})
	}
	c.Body = in.Body
	return writeJSON(w, http.StatusOK, commentJSON(c))
}

func (g *GitHub) reactIssue(w http.ResponseWriter, req *http.Request, inst int64, m []string) int {
	var in struct{ Content string }
	_ = json.NewDecoder(req.Body).Decode(&in)
	g.mu.Lock()
	defer g.mu.Unlock()
	_, is, _, ok := g.issue(inst, m)
	if !ok {
		return notFound(w)
	}
	if slices.Contains(is.reactions, in.Content) {
		return writeJSON(w, http.StatusOK, map[string]any{"id": 1, "content": in.Content})
	}
	is.reactions = append(is.reactions, in.Content)
	return writeJSON(w, http.StatusCreated, map[string]any{"id": 1, "content": in.Content})
}

func (g *GitHub) reactComment(w http.ResponseWriter, req *http.Request, inst int64, m []string) int {
	var in struct{ Content string }
	_ = json.NewDecoder(req.Body).Decode(&in)
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.repoFor(inst, m)
	if !ok {
		return notFound(w)
	}
	id, _ := strconv.ParseInt(m[3], 10, 64)
	if _, ok := r.comments[id]; !ok {
		return notFound(w)
	}
	r.reactions[id] = append(r.reactions[id], in.Content)
	return writeJSON(w, http.StatusCreated, map[string]any{"id": 1, "content": in.Content})
}

func (g *GitHub) permission(w http.ResponseWriter, _ *http.Request, inst int64, m []string) int {
	g.mu.Lock()
	defer g.mu.Unlock()
	r, ok := g.repoFor(inst, m)
	if !ok {
		return notFound(w)
	}
	p, ok := r.perms[strings.ToLower(m[3])]
	if !ok {
		return writeJSON(w, http.StatusNotFound, map[string]string{"message": fmt.Sprintf("%s is not a user", m[3])})
	}
	return writeJSON(w, http.StatusOK, map[string]any{"permission": p, "user": map[string]any{"login": m[3]}})
}
