package intake

// The pull request answers back (issue 16): on the pull requests whilly opened (branch
// whilly/issue-N of a plan, never a fork's), a review with changes requested or review
// comments, a comment, or a check suite that fails on the branch head becomes one
// follow-up task of the plan, a round (queue.StartRound); commands work in the pull
// request's comments as in the issue's.

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/go-github/v62/github"

	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// Bounds of what a round's task carries of its feedback.
const (
	maxRoundDescription = 7000 // the gate refuses descriptions over plan.MaxDescriptionChars
	maxHunkLines        = 12
	maxFailedRuns       = 5
	maxAnnotations      = 20
	maxLogTail          = 3000
	maxRunSummary       = 600
)

// pullTarget is whilly's pull request a piece of feedback is about, with its plan.
type pullTarget struct {
	pr    queue.PullRequest
	plan  queue.PlanInfo
	repo  app.Repo
	issue app.IssueRef // the plan's issue
}

// findPull resolves a pull request of repo to whilly's own: one whilly recorded for a
// plan, from the plan's branch whilly/issue-N of the same repository. ok false comes with
// the outcome saying why not.
func (s *Service) findPull(ctx context.Context, repo *github.Repository, number int) (pullTarget, string, bool, error) {
	full := repo.GetFullName()
	if full == "" || number <= 0 {
		return pullTarget{}, "ignored: no repository or pull request in the payload", false, nil
	}
	pr, err := s.store.PullOf(ctx, full, number)
	if errors.Is(err, queue.ErrNotFound) {
		return pullTarget{}, fmt.Sprintf("ignored: %s#%d is not a pull request whilly opened", full, number), false, nil
	}
	if err != nil {
		return pullTarget{}, "", false, err
	}
	return s.pullTarget(ctx, pr)
}

func (s *Service) pullTarget(ctx context.Context, pr queue.PullRequest) (pullTarget, string, bool, error) {
	pi, err := s.store.GetPlan(ctx, pr.PlanID)
	if err != nil {
		return pullTarget{}, "", false, err
	}
	ref, err := app.ParseIssueRef(pi.GitHubIssueRef)
	if err != nil || app.Branch(ref) != pr.Branch {
		return pullTarget{}, fmt.Sprintf("ignored: %s#%d is not from the branch of plan %s", pr.Repo, pr.Number, pi.ID), false, nil //nolint:nilerr // not whilly's: nothing to do
	}
	repo, err := app.ParseRepo(pr.Repo)
	if err != nil {
		return pullTarget{}, "ignored: " + err.Error(), false, nil //nolint:nilerr // not whilly's: nothing to do
	}
	return pullTarget{pr: pr, plan: pi, repo: repo, issue: ref}, "", true, nil
}

// fromFork reports whether a pull request payload's head lives in another repository.
func fromFork(repo *github.Repository, pr *github.PullRequest) bool {
	head := pr.GetHead().GetRepo()
	return head == nil || !strings.EqualFold(head.GetFullName(), repo.GetFullName())
}

// writer checks through the API that the sender may steer whilly; outcome says why not.
func (s *Service) writer(ctx context.Context, c app.Client, deliveryID string, repo app.Repo, sender string) (string, bool, error) {
	perm, err := c.Permission(ctx, repo, sender)
	if err != nil {
		return "", false, err
	}
	if !app.CanWrite(perm) {
		s.log.InfoContext(ctx, "pull request feedback ignored: no write access", "delivery_id", deliveryID, "repo", repo.String(), "sender", sender, "permission", perm)
		return fmt.Sprintf("ignored: @%s has %s permission, not write", sender, perm), false, nil
	}
	return "", true, nil
}

// reviewEvent: a submitted review asking for changes, or commenting with a body or with
// comments on the diff, is one round (keyed by the review id).
func (s *Service) reviewEvent(ctx context.Context, deliveryID string, e *github.PullRequestReviewEvent) (string, error) {
	if e.GetAction() != "submitted" {
		return "ignored: review " + e.GetAction(), nil
	}
	state := strings.ToLower(e.GetReview().GetState())
	if state != "changes_requested" && state != "commented" {
		return "ignored: review " + state, nil
	}
	if e.GetSender().GetType() == "Bot" || e.GetReview().GetUser().GetType() == "Bot" {
		return "ignored: review by a bot", nil
	}
	if fromFork(e.GetRepo(), e.GetPullRequest()) {
		return "ignored: pull request from a fork", nil
	}
	return s.reviewRound(ctx, deliveryID, e.GetRepo(), e.GetPullRequest().GetNumber(), e.GetInstallation().GetID(),
		e.GetReview().GetID(), e.GetSender().GetLogin())
}

// reviewCommentEvent: a new comment on the diff belongs to a review (a lone comment is
// a review of its own); the round is the review's, whichever of its events comes first.
func (s *Service) reviewCommentEvent(ctx context.Context, deliveryID string, e *github.PullRequestReviewCommentEvent) (string, error) {
	if e.GetAction() != "created" {
		return "ignored: review comment " + e.GetAction(), nil
	}
	if e.GetSender().GetType() == "Bot" || e.GetComment().GetUser().GetType() == "Bot" {
		return "ignored: review comment by a bot", nil
	}
	if fromFork(e.GetRepo(), e.GetPullRequest()) {
		return "ignored: pull request from a fork", nil
	}
	id := e.GetComment().GetPullRequestReviewID()
	if id == 0 {
		return "ignored: review comment without its review", nil
	}
	return s.reviewRound(ctx, deliveryID, e.GetRepo(), e.GetPullRequest().GetNumber(), e.GetInstallation().GetID(), id, e.GetSender().GetLogin())
}

// reviewRound reads the review and its comments back from GitHub (the payloads of a
// review's events each carry a part of it) and starts its round.
func (s *Service) reviewRound(ctx context.Context, deliveryID string, repo *github.Repository, number int, inst, reviewID int64, sender string) (string, error) {
	if out, ok := s.refuseOwner(ctx, deliveryID, repo); !ok {
		return out, nil
	}
	t, out, ok, err := s.findPull(ctx, repo, number)
	if err != nil || !ok {
		return out, err
	}
	c, err := s.clients.Installation(ctx, inst)
	if err != nil {
		return "", err
	}
	if out, ok, err := s.writer(ctx, c, deliveryID, t.repo, sender); err != nil || !ok {
		return out, err
	}
	if dup, err := s.store.RoundExists(ctx, t.pr.Repo, t.pr.Number, queue.RoundReview, strconv.FormatInt(reviewID, 10)); err != nil || dup {
		return fmt.Sprintf("duplicate: review %d already made its round", reviewID), err
	}
	rv, err := c.Review(ctx, t.repo, t.pr.Number, reviewID)
	if err != nil {
		return "", err
	}
	comments, err := c.ReviewComments(ctx, t.repo, t.pr.Number, reviewID)
	if err != nil {
		return "", err
	}
	desc, files, hidden := reviewText(t.pr.Number, rv, comments)
	if desc == "" {
		return fmt.Sprintf("ignored: review %d says nothing to act on", reviewID), nil
	}
	what := "review comments"
	if strings.EqualFold(rv.State, "CHANGES_REQUESTED") {
		what = "changes requested"
	}
	summary := fmt.Sprintf("%s by @%s in review %d", what, sender, reviewID)
	if len(hidden) > 0 {
		summary += " (hidden content removed: " + strings.Join(hidden, ", ") + ")"
	}
	return s.startRound(ctx, t, queue.RoundRequest{Trigger: queue.RoundReview, TriggerID: strconv.FormatInt(reviewID, 10),
		Summary: summary, Description: desc, KeyFiles: files})
}

// reviewText is a review as a task description: its body and each comment with file,
// line and diff hunk, hidden content stripped; the files it names; the kinds of hidden
// content removed. "" when nothing in it asks for anything.
func reviewText(number int, rv app.Review, comments []app.ReviewComment) (string, []string, []string) {
	var (
		b      strings.Builder
		files  []string
		hidden []string
	)
	visible := func(s string) string {
		out, kinds := StripHidden(s)
		for _, k := range kinds {
			if !slices.Contains(hidden, k) {
				hidden = append(hidden, k)
			}
		}
		return strings.TrimSpace(out)
	}
	fmt.Fprintf(&b, "Address the review of pull request #%d.\n", number)
	body := visible(rv.Body)
	if body != "" {
		b.WriteString("\nThe review says:\n\n" + body + "\n")
	}
	n := 0
	for _, cm := range comments {
		text := visible(cm.Body)
		if text == "" {
			continue
		}
		n++
		if n == 1 {
			b.WriteString("\nComments on the diff:\n")
		}
		where := visibleRunes(cm.Path)
		if cm.Line > 0 {
			where += ", line " + strconv.Itoa(cm.Line)
		}
		fmt.Fprintf(&b, "\n### %s\n", where)
		if hunk := lastLines(visibleRunes(cm.DiffHunk), maxHunkLines); hunk != "" {
			b.WriteString("```diff\n" + hunk + "\n```\n")
		}
		b.WriteString(text + "\n")
		if p := visibleRunes(cm.Path); p != "" && !slices.Contains(files, p) && len(files) < 20 {
			files = append(files, p)
		}
	}
	if body == "" && n == 0 {
		return "", nil, hidden
	}
	return clipText(b.String(), maxRoundDescription), files, hidden
}

// pullCommentEvent handles a comment on whilly's pull request: a /whilly command runs as
// on the issue (same code, same permission rule); any other comment of a writer is
// feedback, one round keyed by the comment id.
func (s *Service) pullCommentEvent(ctx context.Context, deliveryID string, e *github.IssueCommentEvent) (string, error) {
	if e.GetAction() != "created" {
		return "ignored: comment " + e.GetAction() + " (only new comments run commands)", nil
	}
	if e.GetSender().GetType() == "Bot" || e.GetComment().GetUser().GetType() == "Bot" {
		return "ignored: comment by a bot", nil
	}
	t, out, ok, err := s.findPull(ctx, e.GetRepo(), e.GetIssue().GetNumber())
	if err != nil || !ok {
		return out, err
	}
	commentID := e.GetComment().GetID()
	if commentID == 0 {
		return "ignored: no comment id in the payload", nil
	}
	cmd, isCmd := ParseCommand(e.GetComment().GetBody())
	c, err := s.clients.Installation(ctx, e.GetInstallation().GetID())
	if err != nil {
		return "", err
	}
	sender := e.GetSender().GetLogin()
	if out, ok, err := s.writer(ctx, c, deliveryID, t.repo, sender); err != nil || !ok {
		if isCmd && err == nil {
			out = fmt.Sprintf("refused %s: %s (no reply)", cmd.Name, strings.TrimPrefix(out, "ignored: "))
		}
		return out, err
	}
	if isCmd {
		first, err := s.store.ClaimCommand(ctx, commentID, deliveryID)
		if err != nil {
			return "", err
		}
		if !first {
			return fmt.Sprintf("duplicate: comment %d already ran its command", commentID), nil
		}
		return s.run(ctx, c, app.IssueRef{Repo: t.repo, Number: t.pr.Number}, t.issue.String(), commentID, sender, cmd)
	}
	body, hidden := StripHidden(e.GetComment().GetBody())
	body = strings.TrimSpace(body)
	if body == "" {
		return "ignored: the comment shows nothing", nil
	}
	summary := fmt.Sprintf("comment %d by @%s", commentID, sender)
	if len(hidden) > 0 {
		summary += " (hidden content removed: " + strings.Join(hidden, ", ") + ")"
	}
	desc := fmt.Sprintf("Address this comment on pull request #%d:\n\n%s\n", t.pr.Number, body)
	return s.startRound(ctx, t, queue.RoundRequest{Trigger: queue.RoundComment, TriggerID: strconv.FormatInt(commentID, 10),
		Summary: summary, Description: clipText(desc, maxRoundDescription)})
}

// retryRound is /whilly retry on a plan with nothing failed to retry: one more round, by
// hand, asking again what the last round asked (past WHILLY_PR_MAX_ROUNDS and /whilly
// stop, within the budget).
func (s *Service) retryRound(ctx context.Context, pi queue.PlanInfo, commentID int64, sender string) (queue.RoundResult, bool, error) {
	pr, err := s.store.GetMirrorState(ctx, pi.ID)
	if errors.Is(err, queue.ErrNotFound) || (err == nil && pr.Pull == nil) {
		return queue.RoundResult{}, false, nil
	}
	if err != nil {
		return queue.RoundResult{}, false, err
	}
	rs, err := s.store.Rounds(ctx, pi.ID)
	if err != nil {
		return queue.RoundResult{}, false, err
	}
	var last *queue.Round
	for i := range rs.Rounds {
		if rs.Rounds[i].TaskID != "" {
			last = &rs.Rounds[i]
		}
	}
	if last == nil {
		return queue.RoundResult{}, false, nil
	}
	prev, err := s.store.GetTask(ctx, pi.ID, last.TaskID)
	if err != nil {
		return queue.RoundResult{}, false, err
	}
	t, _, ok, err := s.pullTarget(ctx, *pr.Pull)
	if err != nil || !ok {
		return queue.RoundResult{}, false, err
	}
	req := queue.RoundRequest{Trigger: queue.RoundRetry, TriggerID: strconv.FormatInt(commentID, 10),
		Summary: fmt.Sprintf("/whilly retry by @%s, again: %s", sender, last.Summary), Description: prev.Description,
		KeyFiles: prev.KeyFiles, ByHand: true}
	res, err := s.round(ctx, t, req)
	return res, true, err
}

// checkSuiteEvent: a check suite completed on the head of whilly's branch. Failed or
// timed out, on a finished plan: a fix round with the failed runs' names, summaries,
// annotations and the failed jobs' log tails, analysed by TRIZ. Passed (a re-run): the
// check round of that head ends without work if its fix has not started.
func (s *Service) checkSuiteEvent(ctx context.Context, deliveryID string, e *github.CheckSuiteEvent) (string, error) {
	if e.GetAction() != "completed" {
		return "ignored: check suite " + e.GetAction(), nil
	}
	if out, ok := s.refuseOwner(ctx, deliveryID, e.GetRepo()); !ok {
		return out, nil
	}
	cs := e.GetCheckSuite()
	branch, sha, repoFull := cs.GetHeadBranch(), cs.GetHeadSHA(), e.GetRepo().GetFullName()
	if !strings.HasPrefix(branch, "whilly/issue-") {
		return "ignored: check suite on branch " + branch, nil
	}
	pr, err := s.store.PullOfBranch(ctx, repoFull, branch)
	if errors.Is(err, queue.ErrNotFound) {
		return fmt.Sprintf("ignored: no pull request of whilly's from %s in %s", branch, repoFull), nil
	}
	if err != nil {
		return "", err
	}
	// A fork's branch may carry the same name: its suite lists no pull request of this
	// repository (GitHub lists only same-repository ones), and its head is not whilly's.
	same := slices.ContainsFunc(cs.PullRequests, func(p *github.PullRequest) bool {
		return p.GetNumber() == pr.Number && p.GetHead().GetRepo().GetID() != 0 && p.GetHead().GetRepo().GetID() == p.GetBase().GetRepo().GetID()
	})
	if !same {
		return fmt.Sprintf("ignored: check suite %d is not about #%d from this repository (a fork?)", cs.GetID(), pr.Number), nil
	}
	t, out, ok, err := s.pullTarget(ctx, pr)
	if err != nil || !ok {
		return out, err
	}
	head, err := s.store.PlanHead(ctx, pr.PlanID)
	if err != nil {
		return "", err
	}
	if head == "" || !strings.EqualFold(head, sha) {
		return fmt.Sprintf("ignored: check suite %d is on %.12s, not the branch head %.12s", cs.GetID(), sha, head), nil
	}
	switch cs.GetConclusion() {
	case "success", "neutral", "skipped":
		n, err := s.store.ResolveCheckRound(ctx, pr.Repo, pr.Number, sha)
		if err != nil || n == 0 {
			return fmt.Sprintf("check suite %d %s: nothing to do", cs.GetID(), cs.GetConclusion()), err
		}
		return fmt.Sprintf("check suite %d passed on re-run: round %d of plan %s ends without work", cs.GetID(), n, pr.PlanID), nil
	case "failure", "timed_out":
	default:
		return "ignored: check suite " + cs.GetConclusion(), nil
	}
	if t.plan.Status != plan.PlanDone {
		return fmt.Sprintf("ignored: plan %s is %s; the suite of its last push decides", t.plan.ID, t.plan.Status), nil
	}
	trigger := fmt.Sprintf("%d@%s", cs.GetID(), sha)
	if dup, err := s.store.RoundExists(ctx, pr.Repo, pr.Number, queue.RoundCheck, trigger); err != nil || dup {
		return fmt.Sprintf("duplicate: check suite %d already made its round", cs.GetID()), err
	}
	c, err := s.clients.Installation(ctx, e.GetInstallation().GetID())
	if err != nil {
		return "", err
	}
	f, err := s.checkFailure(ctx, c, t, cs.GetID(), sha)
	if err != nil {
		return "", err
	}
	if len(f.names) == 0 {
		return fmt.Sprintf("ignored: check suite %d %s, but none of its runs did", cs.GetID(), cs.GetConclusion()), nil
	}
	return s.startRound(ctx, t, queue.RoundRequest{Trigger: queue.RoundCheck, TriggerID: trigger, HeadSHA: sha,
		Summary:     fmt.Sprintf("check suite %d %s on %.7s: %s", cs.GetID(), cs.GetConclusion(), sha, strings.Join(f.names, ", ")),
		Description: f.description, KeyFiles: f.files,
		Analysis: &queue.RoundAnalysis{Reason: "checks failed on the pull request: " + strings.Join(f.names, ", "), Excerpt: f.excerpt}})
}

// checkFailure is what a failed suite's runs say, as a fix task's description.
type checkFailure struct {
	names       []string
	files       []string
	description string
	excerpt     string // for the analyzer: annotations and log tails
}

// checkFailure reads the failed runs of a suite, their annotations and, for Actions
// jobs, their log tails (capped, redacted).
func (s *Service) checkFailure(ctx context.Context, c app.Client, t pullTarget, suiteID int64, sha string) (checkFailure, error) {
	var f checkFailure
	runs, err := c.CheckRuns(ctx, t.repo, suiteID)
	if err != nil {
		return f, err
	}
	var b, ex strings.Builder
	fmt.Fprintf(&b, "Make the failing checks of pull request #%d pass (check suite %d on commit %.12s).\n", t.pr.Number, suiteID, sha)
	for _, r := range runs {
		if r.Conclusion != "failure" && r.Conclusion != "timed_out" {
			continue
		}
		if len(f.names) == maxFailedRuns {
			fmt.Fprintf(&b, "\n…and more failed runs.\n")
			break
		}
		name := oneLineText(visibleRunes(r.Name), 100)
		f.names = append(f.names, name)
		fmt.Fprintf(&b, "\n### Check %q: %s\n", name, r.Conclusion)
		if title := oneLineText(visibleRunes(r.Title), 200); title != "" {
			b.WriteString(title + "\n")
		}
		if sum, _ := StripHidden(r.Summary); strings.TrimSpace(sum) != "" {
			b.WriteString(clipText(strings.TrimSpace(sum), maxRunSummary) + "\n")
		}
		as, err := c.Annotations(ctx, t.repo, r.ID)
		if err != nil {
			return f, err
		}
		for i, a := range as {
			if i == maxAnnotations {
				fmt.Fprintf(&b, "- …and %d more annotations\n", len(as)-i)
				break
			}
			line := fmt.Sprintf("- %s:%d: %s: %s", visibleRunes(a.Path), a.StartLine, a.Level,
				oneLineText(visibleRunes(strings.TrimSpace(a.Title+" "+a.Message)), 300))
			b.WriteString(line + "\n")
			ex.WriteString(line + "\n")
			if p := visibleRunes(a.Path); p != "" && !slices.Contains(f.files, p) && len(f.files) < 20 {
				f.files = append(f.files, p)
			}
		}
		if r.App != "github-actions" {
			continue
		}
		tail, err := c.JobLogTail(ctx, t.repo, r.ID, maxLogTail)
		if err != nil {
			// The log may be gone or not readable (no actions: read yet): the
			// annotations stand alone.
			s.log.WarnContext(ctx, "job log not read", "repo", t.repo.String(), "job_id", r.ID, "error", err)
			continue
		}
		tail = s.cfg.redact(visibleRunes(tail))
		fmt.Fprintf(&b, "\nThe end of its log:\n```text\n%s\n```\n", strings.TrimSpace(tail))
		ex.WriteString(tail + "\n")
	}
	f.description = clipText(b.String(), maxRoundDescription)
	f.excerpt = clipText(ex.String(), maxLogTail*2)
	return f, nil
}

// startRound starts a round and says what became of it.
func (s *Service) startRound(ctx context.Context, t pullTarget, req queue.RoundRequest) (string, error) {
	res, err := s.round(ctx, t, req)
	if err != nil {
		return "", err
	}
	return roundOutcome(t.plan.ID, res), nil
}

func (s *Service) round(ctx context.Context, t pullTarget, req queue.RoundRequest) (queue.RoundResult, error) {
	req.PlanID, req.Repo, req.Number = t.plan.ID, t.pr.Repo, t.pr.Number
	req.MaxRounds, req.AnalysisWait = s.cfg.maxRounds(), s.cfg.AnalysisWait
	req.RequireApproval = s.cfg.RequireApproval
	return s.store.StartRound(ctx, req)
}

func roundOutcome(planID string, res queue.RoundResult) string {
	switch res.Outcome {
	case queue.RoundStarted:
		return fmt.Sprintf("round %d of plan %s: task %s", res.Round, planID, res.TaskID)
	case queue.RoundRefused:
		return fmt.Sprintf("round %d of plan %s refused: %s; plan FAILED", res.Round, planID, res.Reason)
	case queue.RoundDuplicate:
		return "duplicate: the round was already started"
	}
	return "ignored: " + res.Reason
}

// lastLines keeps the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// clipText cuts s to at most n bytes on a rune boundary, saying so.
func clipText(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = strings.ToValidUTF8(s[:n], "")
	return s + "\n[truncated]"
}

func oneLineText(s string, n int) string { return clipText(strings.Join(strings.Fields(s), " "), n) }
