// Package app is whilly's GitHub App: the installation-client factory (one ghinstallation
// transport per installation, cached, over one shared http.Transport), the go-github
// adapter behind the small Client interface the rest of whilly sees, the App manifest
// (app.yml), the state labels, the status-comment renderer, the mirror job that brings an
// issue to its plan's state, and the reconciler that repairs drift and asks GitHub to
// redeliver failed webhooks. From issue to pull request: the workspace of each claim (a
// push token minted for one repository), the plan's pull request (opened after the first
// push, its checklist kept by the mirror, ready for review when the plan is done), and
// the repository_dispatch events that start GitHub Actions workers.
//
// go-github and ghinstallation types never leave this package: callers speak in Repo,
// IssueRef, Comment and the error values below (policy-bot's shape). It imports queue,
// plan and control/client (the wire type of a claim's workspace); it must not import
// control, webhook, intake, worker or cli.
package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/riverqueue/river"
)

// Repo is a repository, owner/name.
type Repo struct {
	Owner string
	Name  string
}

// String returns owner/name.
func (r Repo) String() string { return r.Owner + "/" + r.Name }

// ParseRepo reads owner/name.
func ParseRepo(s string) (Repo, error) {
	owner, name, ok := strings.Cut(s, "/")
	if !ok || owner == "" || name == "" || strings.Contains(name, "/") {
		return Repo{}, fmt.Errorf("repository %q is not owner/name", s)
	}
	return Repo{Owner: owner, Name: name}, nil
}

// IssueRef names an issue: owner/repo#N.
type IssueRef struct {
	Repo
	Number int
}

// String returns owner/repo#N, the form stored in plans.github_issue_ref.
func (r IssueRef) String() string { return r.Repo.String() + "#" + strconv.Itoa(r.Number) }

// ParseIssueRef reads owner/repo#N, and also owner/repo/N (the CLI's form).
func ParseIssueRef(s string) (IssueRef, error) {
	i := strings.LastIndexAny(s, "#/")
	if i < 0 {
		return IssueRef{}, fmt.Errorf("issue %q is not owner/repo#N or owner/repo/N", s)
	}
	n, err := strconv.Atoi(s[i+1:])
	if err != nil || n <= 0 {
		return IssueRef{}, fmt.Errorf("issue %q does not end in an issue number", s)
	}
	repo, err := ParseRepo(s[:i])
	if err != nil {
		return IssueRef{}, fmt.Errorf("issue %q: %w", s, err)
	}
	return IssueRef{Repo: repo, Number: n}, nil
}

// Issue is what whilly reads of an issue.
type Issue struct {
	Number int
	Title  string
	Body   string
	State  string // open, closed
	Labels []string
	Author string
	URL    string
}

// Comment is an issue comment.
type Comment struct {
	ID        int64
	Body      string
	Author    string
	AuthorBot bool // the author is a GitHub App (a Bot user)
}

// Label is a repository label.
type Label struct {
	Name        string
	Color       string // hex without #
	Description string
}

// HookDelivery is one delivery attempt of the App's webhook, as GitHub lists them.
type HookDelivery struct {
	ID          int64
	GUID        string // X-GitHub-Delivery; shared by a delivery's redeliveries
	DeliveredAt time.Time
	StatusCode  int
	Event       string
	Action      string
	Redelivery  bool
}

// RepoInfo is what whilly reads of a repository.
type RepoInfo struct {
	DefaultBranch string
	Private       bool
}

// User is a GitHub account.
type User struct {
	ID    int64
	Login string
	Bot   bool
}

// AppInfo is the GitHub App itself.
type AppInfo struct {
	ID   int64
	Slug string // the bot user is Slug[bot]
	Name string
}

// Pull is a pull request.
type Pull struct {
	Number int
	NodeID string // the GraphQL id (markPullRequestReadyForReview takes it)
	URL    string // html_url
	State  string // open, closed
	Draft  bool
	Merged bool
	Head   string // branch
	Base   string // branch
	Body   string
}

// NewPull is a pull request to open from Head to Base in the same repository.
type NewPull struct {
	Title string
	Body  string
	Head  string
	Base  string
	Draft bool
}

// Token is an installation access token. Its LogValue hides the secret.
type Token struct {
	Value     string
	ExpiresAt time.Time
}

// LogValue keeps the token out of logs.
func (t Token) LogValue() slog.Value {
	return slog.GroupValue(slog.Bool("set", t.Value != ""), slog.Time("expires_at", t.ExpiresAt))
}

// Reactions whilly uses.
const (
	ReactionEyes     = "eyes"
	ReactionThumbsUp = "+1"
	ReactionConfused = "confused"
)

// Permissions a collaborator may have (the permission field of GitHub's API: maintain
// reads as write, triage as read).
const (
	PermissionAdmin = "admin"
	PermissionWrite = "write"
	PermissionRead  = "read"
	PermissionNone  = "none"
)

// CanWrite reports whether a collaborator permission allows steering whilly: write,
// maintain (reported as write) or admin.
func CanWrite(permission string) bool {
	return permission == PermissionAdmin || permission == PermissionWrite || permission == "maintain"
}

// Client is what whilly does on GitHub for one installation (or one token). Every method
// maps GitHub's errors to ErrNotFound, *RateLimitError and *StatusError.
type Client interface {
	Issue(ctx context.Context, ref IssueRef) (Issue, error)
	// React adds a reaction to the issue itself; adding one twice is harmless.
	React(ctx context.Context, ref IssueRef, content string) error
	// ReactToComment adds a reaction to an issue comment.
	ReactToComment(ctx context.Context, repo Repo, commentID int64, content string) error
	// Permission returns the user's permission on repo (PermissionAdmin …).
	Permission(ctx context.Context, repo Repo, user string) (string, error)
	IssueLabels(ctx context.Context, ref IssueRef) ([]string, error)
	AddLabels(ctx context.Context, ref IssueRef, names ...string) error
	// RemoveLabel removes a label from the issue; a label it does not carry is no error.
	RemoveLabel(ctx context.Context, ref IssueRef, name string) error
	// RepoLabel returns a repository label; ErrNotFound when it does not exist.
	RepoLabel(ctx context.Context, repo Repo, name string) (Label, error)
	// CreateLabel creates a repository label; one that already exists is no error.
	CreateLabel(ctx context.Context, repo Repo, l Label) error
	CreateComment(ctx context.Context, ref IssueRef, body string) (int64, error)
	// EditComment replaces a comment's body; ErrNotFound when it was deleted.
	EditComment(ctx context.Context, repo Repo, id int64, body string) error
	GetComment(ctx context.Context, repo Repo, id int64) (Comment, error)
	// Comments lists the issue's comments, oldest first (at most a few thousand).
	Comments(ctx context.Context, ref IssueRef) ([]Comment, error)

	// RepoInfo reads a repository (its default branch).
	RepoInfo(ctx context.Context, repo Repo) (RepoInfo, error)
	// User reads an account by login (ErrNotFound when there is none); "" reads the
	// authenticated user (a token's, not an installation's).
	User(ctx context.Context, login string) (User, error)
	// FindPull returns the open pull request from branch (of repo itself); ErrNotFound
	// when there is none.
	FindPull(ctx context.Context, repo Repo, branch string) (Pull, error)
	// CreatePull opens a pull request. GitHub refuses (a *StatusError 422) when one is
	// already open from the branch, or when the branch has no commits over the base.
	CreatePull(ctx context.Context, repo Repo, p NewPull) (Pull, error)
	GetPull(ctx context.Context, repo Repo, number int) (Pull, error)
	// EditPullBody replaces a pull request's body.
	EditPullBody(ctx context.Context, repo Repo, number int, body string) error
	// MarkPullReady turns a draft pull request ready for review (GraphQL: REST has no
	// way to do it). A pull request that is no draft is no error.
	MarkPullReady(ctx context.Context, nodeID string) error
	// ConvertPullToDraft turns a pull request ready for review back into a draft
	// (GraphQL). A draft is no error.
	ConvertPullToDraft(ctx context.Context, nodeID string) error
	// Dispatch sends a repository_dispatch event of eventType with payload as its
	// client_payload.
	Dispatch(ctx context.Context, repo Repo, eventType string, payload map[string]any) error
	// Feedback reads reviews and checks of a pull request (its review/CI loop).
	Feedback
}

// AppClient is what whilly does as the App itself (JWT), not as an installation.
type AppClient interface {
	// HookDeliveries lists the webhook's deliveries since the given time, newest first.
	HookDeliveries(ctx context.Context, since time.Time) ([]HookDelivery, error)
	// Redeliver asks GitHub to deliver a delivery again.
	Redeliver(ctx context.Context, id int64) error
	// HookDelivery reads one delivery of the log with the payload GitHub sent.
	HookDelivery(ctx context.Context, id int64) (HookDelivery, []byte, error)
	// RepoInstallation returns the id of the installation that covers repo.
	RepoInstallation(ctx context.Context, repo Repo) (int64, error)
	// Self reads the App (its slug names its bot user).
	Self(ctx context.Context) (AppInfo, error)
	// RepoToken mints a token of installationID that may do only this: write the
	// contents of repo (push), and read its metadata. Each call mints a new one.
	RepoToken(ctx context.Context, installationID int64, repo Repo) (Token, error)
}

// Clients hands out clients; *Factory is the real one.
type Clients interface {
	// Installation returns the client of an installation (0: the static token, when
	// configured).
	Installation(ctx context.Context, installationID int64) (Client, error)
	// App returns the App's own client; ErrNoApp when only a token is configured.
	App(ctx context.Context) (AppClient, error)
	// Login returns the login whilly's comments carry on an installation: the App's bot
	// (SLUG[bot]), or the token's user for installation 0.
	Login(ctx context.Context, installationID int64) (string, error)
}

// Sentinel errors.
var (
	// ErrNotFound: GitHub answered 404 (or 410).
	ErrNotFound = errors.New("not found on GitHub")
	// ErrNoApp: the operation needs the GitHub App (WHILLY_GITHUB_APP_ID and its key).
	ErrNoApp = errors.New("the GitHub App is not configured")
)

// RateLimitError is GitHub refusing a call for a while (403 or 429 with Retry-After or
// X-RateLimit-Reset, or a secondary rate limit). Wait is how long to hold off.
type RateLimitError struct {
	Status int
	Wait   time.Duration
}

func (e *RateLimitError) Error() string {
	return fmt.Sprintf("GitHub rate limit (HTTP %d): retry in %s", e.Status, e.Wait.Round(time.Second))
}

// StatusError is any other unsuccessful answer from GitHub.
type StatusError struct {
	Status  int
	Message string
}

func (e *StatusError) Error() string {
	if e.Message == "" {
		return fmt.Sprintf("GitHub answered HTTP %d", e.Status)
	}
	return fmt.Sprintf("GitHub answered HTTP %d: %s", e.Status, e.Message)
}

// Temporary reports whether trying again later may succeed (a 5xx).
func (e *StatusError) Temporary() bool { return e.Status >= 500 }

// Permanent reports whether GitHub refused a call for good (a 4xx other than a rate
// limit): trying again cannot help.
func Permanent(err error) bool {
	var se *StatusError
	return errors.Is(err, ErrNotFound) || (errors.As(err, &se) && !se.Temporary())
}

// JobError turns an error of a GitHub call into what a River job returns: a rate limit
// snoozes the job until the limit resets (not counted as an attempt); anything else is
// returned as is and retried with backoff.
func JobError(err error) error {
	var rl *RateLimitError
	if errors.As(err, &rl) {
		return river.JobSnooze(max(rl.Wait, time.Second))
	}
	return err
}
