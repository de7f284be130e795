// Package intake turns GitHub events into whilly's actions: the River worker that
// processes stored webhook deliveries, issue intake (an issue labelled whilly-pending
// becomes a plan), the /whilly comment commands, closing an issue (cancels its plan),
// pull request events (merged, closed or reopened, recorded on their plans) and the
// installations table. It decodes payloads with go-github and hands the rest of
// whilly only its own types; it talks to GitHub through app.Client.
//
// It imports app, queue and plan; it must not import webhook, control, worker, agent
// or cli (the planner is injected as a function).
package intake

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-github/v62/github"
	"github.com/riverqueue/river"

	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// Events are the X-GitHub-Event values intake handles; app.yml subscribes to exactly
// these (a test checks it).
func Events() []string {
	return []string{"issues", "issue_comment", "installation", "installation_repositories", "pull_request",
		"pull_request_review", "pull_request_review_comment", "check_suite", "check_run"}
}

// Planner makes a plan from an issue (WHILLY_PLANNER); it is agent.Plan in production.
// The plan's id is given; cost is what the planner spent, also when it fails.
type Planner func(ctx context.Context, it IssueText, planID string) (p *plan.Plan, cost plan.USD, err error)

// Config tunes intake.
type Config struct {
	// Planner, when set, builds plans from issues without a ```whilly block, in at most
	// PlannerLimit (default 20 min: WHILLY_PLANNER_TIMEOUT's 10 for each of the agent's
	// two calls).
	Planner      Planner
	PlannerLimit time.Duration
	// StaleIntake is how long an unfinished intake blocks other deliveries of its issue
	// before one may take it over; default 30 min, or twice a delivery job's time limit
	// when that is longer (a planner's), so that a running intake is never taken over.
	StaleIntake time.Duration
	// Budget caps the budget of plans from issues and is the budget of those that name
	// none (WHILLY_GITHUB_BUDGET_USD); 0 means DefaultBudget.
	Budget plan.USD
	// AllowedOwners (WHILLY_GITHUB_ALLOWED_OWNERS) are the repository owners whose issues
	// and comments whilly acts on, compared case-insensitively; empty allows every owner.
	AllowedOwners []string
	// RequireApproval (WHILLY_REQUIRE_APPROVAL) creates plans PAUSED (reason approval):
	// they run once a write+ user approves their digest (/whilly approve DIGEST).
	RequireApproval bool
	// MaxRounds (WHILLY_PR_MAX_ROUNDS) bounds the review/CI rounds per pull request: 0
	// is the default, 3; negative allows none.
	MaxRounds int
	// AnalysisWait is how long a check round's task waits for the failure analyzer's
	// finding (when TRIZ is on); default 90 s. The finding ends the wait.
	AnalysisWait time.Duration
	// Redact removes secrets from CI logs before they are stored (agent.Redact in
	// production).
	Redact func(string) string
}

func (c Config) maxRounds() int {
	switch {
	case c.MaxRounds == 0:
		return 3
	case c.MaxRounds < 0:
		return 0
	}
	return c.MaxRounds
}

func (c Config) redact(s string) string {
	if c.Redact == nil {
		return s
	}
	return c.Redact(s)
}

// ownerAllowed reports whether the repository's owner is one whilly acts for.
func (c Config) ownerAllowed(owner string) bool {
	if len(c.AllowedOwners) == 0 {
		return true
	}
	return slices.ContainsFunc(c.AllowedOwners, func(o string) bool { return strings.EqualFold(o, owner) })
}

// Service processes GitHub events.
type Service struct {
	store   *queue.Store
	clients app.Clients
	mirror  *app.Mirror
	jobs    app.Jobs
	log     *slog.Logger
	cfg     Config
}

// New returns the service. The store's hooks (GitHubConfig.Hooks) mirror the changes it
// makes; jobs inserts its own jobs.
func New(store *queue.Store, clients app.Clients, mirror *app.Mirror, jobs app.Jobs, log *slog.Logger, cfg Config) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if cfg.PlannerLimit <= 0 {
		cfg.PlannerLimit = 20 * time.Minute
	}
	if cfg.StaleIntake <= 0 {
		cfg.StaleIntake = max(30*time.Minute, 2*cfg.jobTimeout())
	}
	if cfg.AnalysisWait <= 0 {
		cfg.AnalysisWait = 90 * time.Second
	}
	return &Service{store: store, clients: clients, mirror: mirror, jobs: jobs, log: log, cfg: cfg}
}

// Store returns the service's store.
func (s *Service) Store() *queue.Store { return s.store }

// Worker returns the River worker of delivery jobs.
func (s *Service) Worker() river.Worker[queue.GitHubDeliveryArgs] { return &deliveryWorker{s: s} }

type deliveryWorker struct {
	river.WorkerDefaults[queue.GitHubDeliveryArgs]
	s *Service
}

// Timeout is Config.jobTimeout.
func (w *deliveryWorker) Timeout(*river.Job[queue.GitHubDeliveryArgs]) time.Duration {
	return w.s.cfg.jobTimeout()
}

// jobTimeout is how long a delivery's job may run. An intake is a few GitHub calls and
// statements: River's default minute, which keeps a job whose process died from waiting
// longer than queue.RescueAfter to be retried; with a planner agent, a minute more than
// the planner may take (River cuts a job at its limit, and one cut short is cut again on
// every retry).
func (c Config) jobTimeout() time.Duration {
	if c.Planner == nil {
		return time.Minute
	}
	return time.Minute + c.PlannerLimit
}

func (w *deliveryWorker) Work(ctx context.Context, job *river.Job[queue.GitHubDeliveryArgs]) error {
	outcome, err := w.s.HandleDelivery(ctx, job.Args.DeliveryID)
	if err != nil {
		w.s.log.WarnContext(ctx, "github delivery failed", "delivery_id", job.Args.DeliveryID, "error", err)
		return app.JobError(err)
	}
	w.s.log.InfoContext(ctx, "github delivery processed", "delivery_id", job.Args.DeliveryID, "outcome", outcome)
	return nil
}

// HandleDelivery processes one stored delivery and records its outcome. An error means
// "try again" (GitHub or the database failed); everything else, including payloads that
// make no sense, ends with an outcome.
func (s *Service) HandleDelivery(ctx context.Context, id string) (string, error) {
	d, err := s.store.GetDelivery(ctx, id)
	if errors.Is(err, queue.ErrNotFound) {
		return "gone", nil
	}
	if err != nil {
		return "", err
	}
	if d.ProcessedAt != nil {
		return d.Outcome, nil
	}
	outcome, err := s.dispatch(ctx, d)
	if err != nil {
		return "", err
	}
	if err := s.store.FinishDelivery(ctx, id, outcome); err != nil {
		return "", err
	}
	return outcome, nil
}

func (s *Service) dispatch(ctx context.Context, d queue.Delivery) (string, error) {
	ev, err := github.ParseWebHook(d.Event, d.Payload)
	if err != nil {
		return "invalid payload", nil //nolint:nilerr // a payload that cannot be read never will be
	}
	switch e := ev.(type) {
	case *github.IssuesEvent:
		if out, ok := s.refuseOwner(ctx, d.ID, e.GetRepo()); !ok {
			return out, nil
		}
		return s.issueEvent(ctx, d.ID, e)
	case *github.IssueCommentEvent:
		if out, ok := s.refuseOwner(ctx, d.ID, e.GetRepo()); !ok {
			return out, nil
		}
		if e.GetIssue().IsPullRequest() {
			return s.pullCommentEvent(ctx, d.ID, e)
		}
		return s.commentEvent(ctx, d.ID, e)
	case *github.PullRequestReviewEvent:
		return s.reviewEvent(ctx, d.ID, e)
	case *github.PullRequestReviewCommentEvent:
		return s.reviewCommentEvent(ctx, d.ID, e)
	case *github.CheckSuiteEvent:
		return s.checkSuiteEvent(ctx, d.ID, e)
	case *github.CheckRunEvent:
		// Every run belongs to a suite, and the suite's completion carries the verdict
		// of all its runs: acting per run would start a round per failed run.
		return "ignored: check runs are handled with their suite (check_suite completed)", nil
	case *github.InstallationEvent:
		return s.installationEvent(ctx, e)
	case *github.InstallationRepositoriesEvent:
		return s.installationReposEvent(ctx, e)
	case *github.PullRequestEvent:
		return s.pullRequestEvent(ctx, e)
	}
	return "ignored: event not handled", nil
}

// pullRequestEvent records what became of a plan's pull request: merged or closed
// (pr.merged, pr.closed) or reopened, as plan events the status comment shows. Nothing
// else changes: a pull request closed unmerged neither cancels the plan nor reopens
// anything, and whilly opens no other one for that plan.
func (s *Service) pullRequestEvent(ctx context.Context, e *github.PullRequestEvent) (string, error) {
	pr := e.GetPullRequest()
	repo, number := e.GetRepo().GetFullName(), pr.GetNumber()
	if number == 0 {
		number = e.GetNumber()
	}
	if repo == "" || number <= 0 {
		return "ignored: no repository or pull request in the payload", nil
	}
	var (
		state  string
		detail = map[string]any{"sender": e.GetSender().GetLogin(), "url": pr.GetHTMLURL()}
	)
	switch e.GetAction() {
	case "closed":
		state = queue.PullClosed
		if pr.GetMerged() {
			state = queue.PullMerged
			detail["merge_commit_sha"] = pr.GetMergeCommitSHA()
		}
	case "reopened":
		state = queue.PullOpen
	default:
		return "ignored: pull request action " + e.GetAction(), nil
	}
	ids, err := s.store.PullChanged(ctx, repo, number, state, detail)
	if err != nil {
		return "", err
	}
	if len(ids) == 0 {
		return fmt.Sprintf("ignored: %s#%d is no pull request of a plan, or already %s", repo, number, state), nil
	}
	return fmt.Sprintf("pull request %s#%d %s: plans %s", repo, number, state, strings.Join(ids, ", ")), nil
}

// refuseOwner logs and says so when the repository's owner is not in
// WHILLY_GITHUB_ALLOWED_OWNERS; ok is true when whilly may act on it.
func (s *Service) refuseOwner(ctx context.Context, deliveryID string, repo *github.Repository) (outcome string, ok bool) {
	owner := repo.GetOwner().GetLogin()
	if s.cfg.ownerAllowed(owner) {
		return "", true
	}
	s.log.InfoContext(ctx, "github event ignored: owner not allowed", "delivery_id", deliveryID, "owner", owner, "repo", repo.GetFullName())
	return "ignored: owner " + owner + " is not in WHILLY_GITHUB_ALLOWED_OWNERS", false
}

func issueRef(repo *github.Repository, number int) (app.IssueRef, bool) {
	owner, name := repo.GetOwner().GetLogin(), repo.GetName()
	if owner == "" || name == "" || number <= 0 {
		return app.IssueRef{}, false
	}
	return app.IssueRef{Repo: app.Repo{Owner: owner, Name: name}, Number: number}, true
}

func (s *Service) issueEvent(ctx context.Context, deliveryID string, e *github.IssuesEvent) (string, error) {
	ref, ok := issueRef(e.GetRepo(), e.GetIssue().GetNumber())
	if !ok {
		return "ignored: no repository or issue in the payload", nil
	}
	inst := e.GetInstallation().GetID()
	switch e.GetAction() {
	case "labeled":
		if e.GetLabel().GetName() != app.LabelPending {
			return "ignored: not the whilly-pending label", nil
		}
		res, err := s.Intake(ctx, Request{
			Ref: ref, InstallationID: inst, DeliveryID: deliveryID, Sender: e.GetSender().GetLogin(),
			SenderBot: e.GetSender().GetType() == "Bot", CheckPermission: true,
			Issue: IssueText{Ref: ref, Title: e.GetIssue().GetTitle(), Body: e.GetIssue().GetBody()},
		})
		return res.Outcome, err
	case "closed":
		return s.closeIssue(ctx, ref, inst, e.GetSender().GetLogin())
	case "unlabeled":
		// A state label taken off by a person: put the plan's state back at once (the
		// reconciler would, later). whilly's own label changes come from a bot.
		l := e.GetLabel().GetName()
		if !app.IsStateLabel(l) || l == app.LabelPending || e.GetSender().GetType() == "Bot" {
			return "ignored", nil
		}
		pi, err := s.store.IssuePlan(ctx, ref.String())
		if errors.Is(err, queue.ErrNotFound) {
			return "ignored: no plan", nil
		}
		if err != nil {
			return "", err
		}
		if err := s.verify(ctx, pi.ID); err != nil {
			return "", err
		}
		return "label drift: verifying " + pi.ID, nil
	}
	return "ignored: issue action " + e.GetAction(), nil
}

// verify enqueues a mirror job that reads the issue back and repairs it.
func (s *Service) verify(ctx context.Context, planID string) error {
	if _, err := s.jobs.Insert(ctx, app.MirrorArgs{PlanID: planID, Verify: true}, nil); err != nil {
		return fmt.Errorf("enqueue verification of plan %s: %w", planID, err)
	}
	return nil
}

// closeIssue cancels the issue's live plan when the issue was closed by someone with
// write access — which includes whoever merged a pull request that closed it — or when the
// plan's own pull request is merged. The issue's author or a passer-by closing it changes
// nothing (the reconciler leaves the plan running; a writer can /whilly cancel).
func (s *Service) closeIssue(ctx context.Context, ref app.IssueRef, inst int64, sender string) (string, error) {
	pi, err := s.store.IssuePlan(ctx, ref.String())
	if errors.Is(err, queue.ErrNotFound) {
		return "ignored: no plan", nil
	}
	if err != nil {
		return "", err
	}
	if pi.Status != plan.PlanActive && pi.Status != plan.PlanPaused {
		return "ignored: plan " + pi.ID + " is " + string(pi.Status), nil
	}
	c, err := s.clients.Installation(ctx, inst)
	if err != nil {
		return "", err
	}
	perm, err := c.Permission(ctx, ref.Repo, sender)
	if err != nil {
		return "", err
	}
	reason, by := "issue closed by @"+sender, "@"+sender
	if !app.CanWrite(perm) {
		by = ""
		st, err := s.store.GetMirrorState(ctx, pi.ID)
		if err != nil {
			return "", err
		}
		if st.Pull == nil || st.Pull.State != queue.PullMerged {
			return fmt.Sprintf("ignored: issue closed by @%s, who has %s permission, not write; plan %s goes on", sender, perm, pi.ID), nil
		}
		reason = fmt.Sprintf("issue closed after pull request #%d was merged", st.Pull.Number)
	}
	n, err := s.store.CancelPlan(ctx, pi.ID, reason, by)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("cancelled plan %s (%d tasks): %s", pi.ID, n, reason), nil
}

// Request is one intake of an issue.
type Request struct {
	Ref            app.IssueRef
	InstallationID int64 // 0: the static token
	DeliveryID     string
	Sender         string
	SenderBot      bool
	// CheckPermission asks GitHub whether the sender may write to the repository (a
	// webhook); the CLI's operator is trusted.
	CheckPermission bool
	// Explicit takes the issue in even when it does not carry whilly-pending (the CLI).
	Explicit bool
	Issue    IssueText
}

// Result is what an intake did.
type Result struct {
	Outcome string `json:"outcome"`
	PlanID  string `json:"plan_id,omitempty"`
	// Planned: this intake persisted the plan (PlanID).
	Planned bool `json:"planned"`
}

// Intake turns the issue into a plan: 👀 on the issue; a plan from the
// ```whilly block, else the planner, else the task list, else the whole issue; the gate
// in strict mode; the plan persisted with its issue ref (plan.created); the labels and
// the status comment follow through the mirror job inserted with the plan. All tasks
// rejected: whilly-needs-info and a comment saying what is missing. It is idempotent per
// issue whatever the redeliveries and concurrency: BeginIntake lets one delivery through
// per label event, and an issue that no longer carries whilly-pending is not taken in.
func (s *Service) Intake(ctx context.Context, req Request) (Result, error) {
	if req.SenderBot {
		return Result{Outcome: "ignored: labelled by a bot"}, nil
	}
	if !s.cfg.ownerAllowed(req.Ref.Owner) {
		s.log.InfoContext(ctx, "intake refused: owner not allowed", "delivery_id", req.DeliveryID, "owner", req.Ref.Owner, "issue", req.Ref.String())
		return Result{Outcome: "ignored: owner " + req.Ref.Owner + " is not in WHILLY_GITHUB_ALLOWED_OWNERS"}, nil
	}
	c, err := s.clients.Installation(ctx, req.InstallationID)
	if err != nil {
		return Result{}, err
	}
	// The issue's labels are read while the sender's permission is, one round trip to
	// GitHub instead of two before the 👀; they are wasted only on a refusal or a duplicate.
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type labelsRead struct {
		labels []string
		err    error
	}
	read := make(chan labelsRead, 1)
	go func() {
		labels, err := c.IssueLabels(ctx, req.Ref)
		read <- labelsRead{labels, err}
	}()
	if req.CheckPermission {
		perm, err := c.Permission(ctx, req.Ref.Repo, req.Sender)
		if err != nil {
			return Result{}, err
		}
		if !app.CanWrite(perm) {
			return Result{Outcome: fmt.Sprintf("ignored: @%s has %s permission, not write", req.Sender, perm)}, nil
		}
	}
	ref := req.Ref.String()
	claim, err := s.store.BeginIntake(ctx, ref, req.DeliveryID, s.cfg.StaleIntake, func(seq int) string { return PlanID(req.Ref, seq) })
	if err != nil {
		return Result{}, err
	}
	switch claim.Outcome {
	case queue.IntakeLive:
		// A second whilly-pending on a running issue: the mirror takes it off again.
		if err := s.verify(ctx, claim.PlanID); err != nil {
			return Result{}, err
		}
		return Result{Outcome: "duplicate: plan " + claim.PlanID + " is live", PlanID: claim.PlanID}, nil
	case queue.IntakeBusy:
		return Result{Outcome: "duplicate: intake of plan " + claim.PlanID + " under way", PlanID: claim.PlanID}, nil
	case queue.IntakeResumed:
		if _, err := s.store.GetPlan(ctx, claim.PlanID); err == nil {
			// Persisted before the last try stopped, perhaps before its 👀 was there (a
			// repeated reaction is GitHub's no-op): only those and the bookkeeping are left.
			if err := s.acknowledge(ctx, c, req.Ref); err != nil {
				return Result{}, err
			}
			out, err := s.finish(ctx, ref, claim, queue.IntakePlanned, "", nil, "planned "+claim.PlanID)
			return Result{Outcome: out, PlanID: claim.PlanID, Planned: err == nil}, err
		}
	case queue.IntakeStarted:
	}

	r := <-read
	labels := r.labels
	if r.err != nil {
		return Result{}, r.err
	}
	if !req.Explicit && !slices.Contains(labels, app.LabelPending) {
		if err := s.store.AbandonIntake(ctx, ref, claim.Seq); err != nil {
			return Result{}, err
		}
		return Result{Outcome: "stale: whilly-pending is no longer on the issue"}, nil
	}
	// The 👀 goes to GitHub while the plan is built and persisted, so that its round trip
	// is not on the way to the first claim. The intake neither finishes nor answers that
	// it needs information until the 👀 is there: a reaction that failed is tried again
	// with the job, which finds the plan persisted (IntakeResumed).
	reacted := make(chan error, 1)
	go func() { reacted <- s.acknowledge(ctx, c, req.Ref) }()
	acked := sync.OnceValue(func() error { return <-reacted })

	issue, hidden := visibleIssue(req.Issue)
	built, cost := s.build(ctx, issue, claim.PlanID)
	if len(hidden) > 0 {
		built.Notes = append([]string{"Hidden content was removed from the issue before planning (" + strings.Join(hidden, ", ") +
			"): whilly plans and prompts only from what is visible on the page."}, built.Notes...)
	}
	if len(built.Invalid) > 0 {
		out, err := s.needsInfo(ctx, acked, c, req.Ref, labels, claim, built, needsInfoBlock(built.Invalid))
		return Result{Outcome: out}, err
	}
	if missing := Rejected(built.Plan); missing != nil {
		out, err := s.needsInfo(ctx, acked, c, req.Ref, labels, claim, built, needsInfoGate(missing, built.Source))
		return Result{Outcome: out}, err
	}
	opts := queue.ImportOptions{GitHubIssueRef: ref, InstallationID: req.InstallationID}
	if s.cfg.RequireApproval {
		opts.PauseReason = queue.PauseApproval
	}
	res, err := s.store.Apply(ctx, built.Plan, true, opts)
	if err != nil {
		var ve *plan.ValidationError
		if errors.As(err, &ve) {
			out, err := s.needsInfo(ctx, acked, c, req.Ref, labels, claim, built, needsInfoBlock(problemLines(ve)))
			return Result{Outcome: out}, err
		}
		return Result{}, err
	}
	if cost > 0 {
		if err := s.store.Charge(ctx, built.Plan.ID, cost, "planner", map[string]any{"issue": ref}); err != nil {
			return Result{}, err
		}
	}
	if err := acked(); err != nil {
		return Result{}, err
	}
	out, err := s.finish(ctx, ref, claim, queue.IntakePlanned, built.Source, built.Notes,
		fmt.Sprintf("planned %s: %d tasks, %d skipped by the gate", built.Plan.ID, len(built.Plan.Tasks), res.Skipped))
	return Result{Outcome: out, PlanID: built.Plan.ID, Planned: err == nil}, err
}

// acknowledge puts the 👀 on the issue. GitHub may refuse it for good (a locked issue
// answers 403): the 👀 is a courtesy, the label and the status comment still tell the
// issue, so the intake goes on instead of being retried for days.
func (s *Service) acknowledge(ctx context.Context, c app.Client, ref app.IssueRef) error {
	err := c.React(ctx, ref, app.ReactionEyes)
	if app.Permanent(err) {
		s.log.WarnContext(ctx, "GitHub refused the 👀 on the issue; the intake goes on without it", "issue", ref.String(), "error", err)
		return nil
	}
	return err
}

func (s *Service) finish(ctx context.Context, ref string, claim queue.IntakeClaim, state, source string, notes []string, outcome string) (string, error) {
	if err := s.store.FinishIntake(ctx, ref, claim.Seq, state, source, notes); err != nil {
		return "", err
	}
	return outcome, nil
}

// visibleIssue is the issue without what its page does not show (StripHidden), and the
// kinds of hidden content removed.
func visibleIssue(it IssueText) (IssueText, []string) {
	body, kinds := StripHidden(it.Body)
	title, changed := visibleTitle(it.Title)
	if changed && !slices.Contains(kinds, HiddenChars) {
		kinds = append(kinds, HiddenChars)
	}
	it.Title, it.Body = title, body
	return it, kinds
}

// build makes the plan: the block, else the planner, else the text; the policy caps its
// budget and attempts whatever made it.
func (s *Service) build(ctx context.Context, it IssueText, id string) (Built, plan.USD) {
	pol := Policy{MaxAttempts: s.store.Config().MaxAttempts, Budget: s.cfg.Budget}
	if b, ok := FromBlock(it, id, pol); ok {
		return b, 0
	}
	var (
		b    Built
		cost plan.USD
	)
	if s.cfg.Planner != nil {
		var (
			p   *plan.Plan
			err error
		)
		p, cost, err = s.cfg.Planner(ctx, it, id)
		if err == nil && p != nil {
			b = Built{Plan: p, Source: app.SourcePlanner}
		} else {
			s.log.WarnContext(ctx, "planner failed; planning from the issue's text", "plan_id", id, "error", err)
			b = FromText(it, id)
			b.Notes = append(b.Notes, "The planner agent failed, so the plan was made from the issue's text.")
			// a failed planner still cost what it cost: the plan pays for it
		}
	} else {
		b = FromText(it, id)
	}
	pol.apply(&b, it, id)
	return b, cost
}

func problemLines(ve *plan.ValidationError) []string {
	out := make([]string, len(ve.Problems))
	for i, p := range ve.Problems {
		out[i] = p.String()
	}
	return out
}

// NeedsInfoMarker heads the needs-info comment.
const NeedsInfoMarker = "<!-- whilly:needs-info -->"

func needsInfoBlock(problems []string) string {
	var b strings.Builder
	b.WriteString(NeedsInfoMarker + "\n### 🤔 whilly needs more information\n\n")
	b.WriteString("The ```whilly plan block in this issue is not a valid plan:\n\n")
	for _, p := range limit(problems, 30) {
		b.WriteString("- " + oneLine(p) + "\n")
	}
	b.WriteString("\nFix the block (see the plan file format in whilly's docs/plans.md), then add the `whilly-pending` label again.\n")
	return b.String()
}

func needsInfoGate(missing []string, source string) string {
	var b strings.Builder
	b.WriteString(NeedsInfoMarker + "\n### 🤔 whilly needs more information\n\n")
	b.WriteString("The decision gate rejected every task made from this issue, so nothing would run. What is missing:\n\n")
	for _, m := range limit(missing, 30) {
		b.WriteString("- " + oneLine(m) + "\n")
	}
	b.WriteString("\n**To fix it**, edit the issue and add the `whilly-pending` label again. ")
	if source == app.SourceBlock {
		b.WriteString("Give each task in the plan block a description of at least 20 characters, `acceptance_criteria` and `test_steps`.\n")
	} else {
		b.WriteString("Describe the work in at least 20 characters, and add a `## Acceptance criteria` section and a `## Test steps` section, " +
			"each a bullet list (they apply to every task); a `- [ ]` task list makes one task per item.\n")
	}
	return b.String()
}

func limit(lines []string, n int) []string {
	if len(lines) <= n {
		return lines
	}
	return append(lines[:n:n], fmt.Sprintf("…and %d more", len(lines)-n))
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 300 {
		s = s[:300] + "…"
	}
	return s
}

// needsInfo labels the issue whilly-needs-info and explains why, once its 👀 is there
// (acked); the intake ends without a plan.
func (s *Service) needsInfo(ctx context.Context, acked func() error, c app.Client, ref app.IssueRef, labels []string, claim queue.IntakeClaim, built Built, body string) (string, error) {
	if err := acked(); err != nil {
		return "", err
	}
	if err := s.mirror.SetStateLabel(ctx, c, ref, app.LabelNeedsInfo, labels); err != nil {
		return "", err
	}
	if _, err := c.CreateComment(ctx, ref, body); err != nil {
		return "", err
	}
	return s.finish(ctx, ref.String(), claim, queue.IntakeNeedsInfo, built.Source, built.Notes, "needs info")
}

func (s *Service) installationEvent(ctx context.Context, e *github.InstallationEvent) (string, error) {
	in := e.GetInstallation()
	id, account := in.GetID(), in.GetAccount().GetLogin()
	if id == 0 {
		return "ignored: no installation id", nil
	}
	var err error
	switch a := e.GetAction(); a {
	case "created", "new_permissions_accepted", "unsuspend":
		if a == "unsuspend" {
			err = s.store.SetInstallationState(ctx, id, account, queue.InstallationUnsuspended)
			break
		}
		var repos []string
		for _, r := range e.Repositories {
			repos = append(repos, r.GetFullName())
		}
		if a == "new_permissions_accepted" && len(repos) == 0 {
			err = s.store.ChangeInstallationRepos(ctx, id, account, nil, nil)
			break
		}
		err = s.store.UpsertInstallation(ctx, queue.Installation{ID: id, Account: account, AccountType: in.GetAccount().GetType(), Repos: repos})
	case "deleted":
		err = s.store.SetInstallationState(ctx, id, account, queue.InstallationDeleted)
	case "suspend":
		err = s.store.SetInstallationState(ctx, id, account, queue.InstallationSuspended)
	default:
		return "ignored: installation action " + a, nil
	}
	if err != nil {
		return "", err
	}
	return "installation " + e.GetAction(), nil
}

func (s *Service) installationReposEvent(ctx context.Context, e *github.InstallationRepositoriesEvent) (string, error) {
	in := e.GetInstallation()
	if in.GetID() == 0 {
		return "ignored: no installation id", nil
	}
	var added, removed []string
	for _, r := range e.RepositoriesAdded {
		added = append(added, r.GetFullName())
	}
	for _, r := range e.RepositoriesRemoved {
		removed = append(removed, r.GetFullName())
	}
	if err := s.store.ChangeInstallationRepos(ctx, in.GetID(), in.GetAccount().GetLogin(), added, removed); err != nil {
		return "", err
	}
	return fmt.Sprintf("installation repositories: +%d -%d", len(added), len(removed)), nil
}
