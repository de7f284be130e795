package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/queue"
)

// Branch is the branch of an issue's work: whilly/issue-N. It is one per issue, so a
// second intake of the issue continues on it, and its pull request is found again.
func Branch(ref IssueRef) string { return "whilly/issue-" + strconv.Itoa(ref.Number) }

// WorkspaceConfig tunes Workspaces.
type WorkspaceConfig struct {
	// RepoTTL is how long a repository's default branch and installation are cached;
	// default 1 h.
	RepoTTL time.Duration
	// MaxFiles and MaxLines are the diff gate's limits for every workspace (0: the
	// worker's defaults).
	MaxFiles int
	MaxLines int
}

// Workspaces hands the control plane the workspace of each claim of a GitHub plan tied
// to a repository (its WorkspaceProvider): the HTTPS clone URL, the repository's
// default branch as the base, the issue's branch, the App's bot as the commit author,
// and a token minted for that one claim and that one repository, that can only push
// (contents: write). The token is recorded with the lease (sealed) and revoked when the
// lease ends (PushTokens). Workers never see the App's key, an installation-wide token or
// another lease's token. Default branches and the bot's identity are cached; it is safe
// for concurrent use.
type Workspaces struct {
	clients Clients
	store   *queue.Store
	seal    *sealer
	revoke  func(ctx context.Context, token string) error
	gitURL  func(Repo) string
	host    string
	log     *slog.Logger
	cfg     WorkspaceConfig

	mu    sync.Mutex
	repos map[string]repoEntry // lower-case owner/name
	bot   *botIdentity
}

type repoEntry struct {
	info         RepoInfo
	installation int64
	at           time.Time
}

type botIdentity struct{ name, email string }

// NewWorkspaces returns the workspaces of the App behind f; store records each lease's
// push token for its revocation. The App (not only a token) must be configured.
func NewWorkspaces(f *Factory, store *queue.Store, log *slog.Logger, cfg WorkspaceConfig) (*Workspaces, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.RepoTTL <= 0 {
		cfg.RepoTTL = time.Hour
	}
	seal, err := newSealer(f)
	if err != nil {
		return nil, err
	}
	return &Workspaces{clients: f, store: store, seal: seal, revoke: f.RevokeToken, gitURL: f.GitURL, host: f.GitHost(), log: log, cfg: cfg,
		repos: map[string]repoEntry{}}, nil
}

// Workspace returns the workspace of the claim l of plan p; it has the signature of
// control.WorkspaceProvider. A plan without an issue (imported from a file) gets none:
// whilly has no branch to deliver it on.
func (w *Workspaces) Workspace(ctx context.Context, p queue.PlanInfo, l queue.Lease) (*client.Workspace, error) {
	if p.Repo == "" || p.GitHubIssueRef == "" {
		return nil, nil
	}
	ref, err := ParseIssueRef(p.GitHubIssueRef)
	if err != nil {
		return nil, fmt.Errorf("workspace of plan %s: %w", p.ID, err)
	}
	repo, err := ParseRepo(p.Repo)
	if err != nil {
		return nil, fmt.Errorf("workspace of plan %s: %w", p.ID, err)
	}
	inst := p.InstallationID
	if inst == 0 {
		// A plan taken in with WHILLY_GITHUB_TOKEN: push with the App all the same.
		if inst, err = w.installation(ctx, repo); err != nil {
			return nil, fmt.Errorf("workspace of plan %s: %w", p.ID, err)
		}
	}
	info, tok, err := w.access(ctx, inst, repo)
	if errors.Is(err, ErrNotFound) && p.InstallationID != 0 {
		// The App may have been installed anew since the intake: ask which installation
		// covers the repository now.
		if now, ierr := w.installation(ctx, repo); ierr == nil && now != inst {
			inst = now
			info, tok, err = w.access(ctx, inst, repo)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("workspace of plan %s: %w", p.ID, err)
	}
	if err := w.record(ctx, l, inst, tok); err != nil {
		return nil, fmt.Errorf("workspace of plan %s: %w", p.ID, err)
	}
	name, email := w.author(ctx, inst)
	exp := tok.ExpiresAt
	return &client.Workspace{
		CloneURL: w.gitURL(repo), BaseBranch: info.DefaultBranch, Branch: Branch(ref),
		Token: tok.Value, TokenExpiresAt: &exp, AuthorName: name, AuthorEmail: email,
		MaxFiles: w.cfg.MaxFiles, MaxLines: w.cfg.MaxLines,
	}, nil
}

// access reads the repository and returns a push token for it.
func (w *Workspaces) access(ctx context.Context, inst int64, repo Repo) (RepoInfo, Token, error) {
	info, err := w.repoInfo(ctx, inst, repo)
	if err != nil {
		return RepoInfo{}, Token{}, err
	}
	tok, err := w.token(ctx, inst, repo)
	if err != nil {
		return RepoInfo{}, Token{}, err
	}
	return info, tok, nil
}

// token mints a new token for repo: one per claim, never shared.
func (w *Workspaces) token(ctx context.Context, inst int64, repo Repo) (Token, error) {
	ac, err := w.clients.App(ctx)
	if err != nil {
		return Token{}, err
	}
	return ac.RepoToken(ctx, inst, repo)
}

// record keeps the lease's token, sealed, until PushTokens revokes it when the lease
// ends; a token the lease had before (its claim delivered again) is revoked now. A token
// that cannot be recorded is revoked at once and not handed out.
func (w *Workspaces) record(ctx context.Context, l queue.Lease, inst int64, tok Token) error {
	var old []byte
	sealed, err := w.seal.seal(tok.Value, l.LeaseID)
	if err == nil {
		old, err = w.store.RecordPushToken(ctx, queue.PushToken{LeaseID: l.LeaseID, PlanID: l.PlanID, TaskID: l.TaskID,
			InstallationID: inst, Sealed: sealed, ExpiresAt: tok.ExpiresAt})
	}
	if err != nil {
		w.revokeQuietly(ctx, l, tok.Value)
		return err
	}
	if old != nil {
		if prev, err := w.seal.open(old, l.LeaseID); err == nil {
			w.revokeQuietly(ctx, l, prev)
		}
	}
	return nil
}

// revokeQuietly revokes a token that must not live on; a failure is logged (the token
// expires within the hour).
func (w *Workspaces) revokeQuietly(ctx context.Context, l queue.Lease, token string) {
	if err := w.revoke(context.WithoutCancel(ctx), token); err != nil {
		w.log.WarnContext(ctx, "a push token could not be revoked; it expires within the hour", "plan_id", l.PlanID, "task_id", l.TaskID, "error", err)
	}
}

// installation finds the installation of repo through the App (cached).
func (w *Workspaces) installation(ctx context.Context, repo Repo) (int64, error) {
	key := strings.ToLower(repo.String())
	w.mu.Lock()
	e, ok := w.repos[key]
	w.mu.Unlock()
	if ok && e.installation != 0 && time.Since(e.at) < w.cfg.RepoTTL {
		return e.installation, nil
	}
	ac, err := w.clients.App(ctx)
	if err != nil {
		return 0, err
	}
	id, err := ac.RepoInstallation(ctx, repo)
	if err != nil {
		return 0, err
	}
	w.mu.Lock()
	e = w.repos[key]
	e.installation = id
	if e.at.IsZero() {
		e.at = time.Now()
	}
	w.repos[key] = e
	w.mu.Unlock()
	return id, nil
}

// repoInfo reads the repository (its default branch, the base of the plan branches),
// cached for RepoTTL.
func (w *Workspaces) repoInfo(ctx context.Context, inst int64, repo Repo) (RepoInfo, error) {
	key := strings.ToLower(repo.String())
	w.mu.Lock()
	e, ok := w.repos[key]
	w.mu.Unlock()
	if ok && e.info.DefaultBranch != "" && time.Since(e.at) < w.cfg.RepoTTL {
		return e.info, nil
	}
	c, err := w.clients.Installation(ctx, inst)
	if err != nil {
		return RepoInfo{}, err
	}
	info, err := c.RepoInfo(ctx, repo)
	if err != nil {
		return RepoInfo{}, err
	}
	if info.DefaultBranch == "" {
		return RepoInfo{}, fmt.Errorf("repository %s has no default branch (is it empty?)", repo)
	}
	w.mu.Lock()
	e = w.repos[key]
	e.info, e.at = info, time.Now()
	w.repos[key] = e
	w.mu.Unlock()
	return info, nil
}

// author is the App's bot as a commit author: SLUG[bot] and its noreply address
// ID+SLUG[bot]@users.noreply.HOST, which GitHub links to the bot. When GitHub cannot
// say, the worker's default author is used and the next claim asks again.
func (w *Workspaces) author(ctx context.Context, inst int64) (name, email string) {
	w.mu.Lock()
	bot := w.bot
	w.mu.Unlock()
	if bot != nil {
		return bot.name, bot.email
	}
	b, err := w.lookupBot(ctx, inst)
	if err != nil {
		w.log.WarnContext(ctx, "bot identity unknown; commits get the worker's default author", "installation_id", inst, "error", err)
		return "", ""
	}
	w.mu.Lock()
	w.bot = &b
	w.mu.Unlock()
	return b.name, b.email
}

func (w *Workspaces) lookupBot(ctx context.Context, inst int64) (botIdentity, error) {
	login, err := w.clients.Login(ctx, inst)
	if err != nil {
		return botIdentity{}, err
	}
	c, err := w.clients.Installation(ctx, inst)
	if err != nil {
		return botIdentity{}, err
	}
	u, err := c.User(ctx, login)
	if err != nil {
		return botIdentity{}, err
	}
	return botIdentity{name: login, email: fmt.Sprintf("%d+%s@users.noreply.%s", u.ID, login, w.host)}, nil
}
