package intake

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/google/go-github/v62/github"

	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// HelpText answers /whilly help.
const HelpText = `**whilly commands** (for collaborators with write access):

- ` + "`/whilly status`" + ` — refresh the status comment
- ` + "`/whilly retry [TASK]`" + ` — run the failed or cancelled tasks (or TASK) again
- ` + "`/whilly cancel`" + ` — cancel the plan (so does closing the issue, by a collaborator with write access)
- ` + "`/whilly budget USD`" + ` — set the plan's budget cap (` + "`+USD`" + ` raises it); a plan paused on its budget resumes
- ` + "`/whilly pause`" + ` — start no new task of the plan (running ones finish)
- ` + "`/whilly resume`" + ` — resume a plan paused with ` + "`/whilly pause`" + `
- ` + "`/whilly approve DIGEST`" + ` — start a plan that awaits approval; DIGEST is the one its status comment shows
- ` + "`/whilly stop`" + ` — end the pull request's review/CI loop: new reviews and failing checks start no round
- ` + "`/whilly help`" + ` — this list

The commands work in the comments of whilly's pull request too. There a review asking for changes, review comments, a comment or a failing check suite adds one follow-up round (at most ` + "`WHILLY_PR_MAX_ROUNDS`" + `); ` + "`/whilly retry`" + ` with nothing failed starts one more round by hand.

To start, add the ` + "`whilly-pending`" + ` label. The plan comes from a ` + "```whilly" + ` JSON block in the issue, else from its ` + "`- [ ]`" + ` task list, else from the whole issue; ` + "`## Acceptance criteria`" + ` and ` + "`## Test steps`" + ` sections apply to every task.`

// commentEvent runs a /whilly command from a new comment. Edited and deleted comments
// are never executed: an edit must not re-run a command or turn an old comment into one.
// A comment's command runs once, whatever delivers it again (ClaimCommand). Commands of
// users without write access are refused without a reply: answering every stranger's
// comment would let anyone make whilly write on any issue.
func (s *Service) commentEvent(ctx context.Context, deliveryID string, e *github.IssueCommentEvent) (string, error) {
	if e.GetAction() != "created" {
		return "ignored: comment " + e.GetAction() + " (only new comments run commands)", nil
	}
	if e.GetSender().GetType() == "Bot" || e.GetComment().GetUser().GetType() == "Bot" {
		return "ignored: comment by a bot", nil
	}
	cmd, ok := ParseCommand(e.GetComment().GetBody())
	if !ok {
		return "ignored: no command", nil
	}
	ref, ok := issueRef(e.GetRepo(), e.GetIssue().GetNumber())
	commentID := e.GetComment().GetID()
	if !ok || commentID == 0 {
		return "ignored: no repository, issue or comment id in the payload", nil
	}
	c, err := s.clients.Installation(ctx, e.GetInstallation().GetID())
	if err != nil {
		return "", err
	}
	sender := e.GetSender().GetLogin()
	perm, err := c.Permission(ctx, ref.Repo, sender)
	if err != nil {
		return "", err
	}
	if !app.CanWrite(perm) {
		s.log.InfoContext(ctx, "command refused: no write access", "delivery_id", deliveryID, "issue", ref.String(), "sender", sender, "permission", perm)
		return fmt.Sprintf("refused %s: @%s has %s permission (no reply)", cmd.Name, sender, perm), nil
	}
	first, err := s.store.ClaimCommand(ctx, commentID, deliveryID)
	if err != nil {
		return "", err
	}
	if !first {
		return fmt.Sprintf("duplicate: comment %d already ran its command", commentID), nil
	}
	return s.Run(ctx, c, ref, commentID, sender, cmd)
}

// Run executes a command from an authorised user: 👍 on the comment when done, or one
// reply saying why not.
func (s *Service) Run(ctx context.Context, c app.Client, ref app.IssueRef, commentID int64, sender string, cmd Command) (string, error) {
	return s.run(ctx, c, ref, ref.String(), commentID, sender, cmd)
}

// run is Run on the plan of issue (owner/repo#N), replying on ref: the issue itself, or
// the plan's pull request.
func (s *Service) run(ctx context.Context, c app.Client, ref app.IssueRef, issue string, commentID int64, sender string, cmd Command) (string, error) {
	reply := func(outcome, text string) (string, error) {
		if _, err := c.CreateComment(ctx, ref, text); err != nil {
			return "", err
		}
		return outcome, nil
	}
	ack := func(outcome string) (string, error) {
		if commentID != 0 {
			if err := c.ReactToComment(ctx, ref.Repo, commentID, app.ReactionThumbsUp); err != nil {
				return "", err
			}
		}
		return outcome, nil
	}
	switch cmd.Name {
	case CmdHelp:
		return reply("help", HelpText)
	case CmdUnknown:
		return reply("unknown command", fmt.Sprintf("`/whilly %s` is not a whilly command.\n\n%s", sanitizeArg(cmd.Args[0]), HelpText))
	}
	pi, err := s.store.IssuePlan(ctx, issue)
	if errors.Is(err, queue.ErrNotFound) {
		return reply("no plan", "There is no whilly plan for this issue yet. Add the `whilly-pending` label to start one.")
	}
	if err != nil {
		return "", err
	}
	by := "@" + sender
	switch cmd.Name {
	case CmdStatus:
		if err := s.verify(ctx, pi.ID); err != nil {
			return "", err
		}
		return ack("status of " + pi.ID)
	case CmdCancel:
		if pi.Status != plan.PlanActive && pi.Status != plan.PlanPaused {
			return reply("nothing to cancel", fmt.Sprintf("Plan `%s` is already %s.", pi.ID, strings.ToLower(string(pi.Status))))
		}
		if _, err := s.store.CancelPlan(ctx, pi.ID, "cancelled by "+by, by); err != nil {
			return "", err
		}
		return ack("cancelled " + pi.ID)
	case CmdRetry:
		res, err := s.store.RetryTasks(ctx, pi.ID, cmd.Args[:min(len(cmd.Args), 1)], "retry by "+by, by)
		switch {
		case errors.Is(err, queue.ErrNotFound):
			return reply("retry: unknown task", fmt.Sprintf("Plan `%s` has no task `%s`.", pi.ID, sanitizeArg(cmd.Args[0])))
		case errors.Is(err, queue.ErrConflict):
			return reply("retry refused", "Cannot retry: "+sanitizeArg(err.Error())+".")
		case err != nil:
			return "", err
		case res.Retried == 0:
			rr, ok, err := s.retryRound(ctx, pi, commentID, sender)
			switch {
			case err != nil:
				return "", err
			case !ok:
				return reply("nothing to retry", fmt.Sprintf("Plan `%s` has no failed or cancelled task to retry.", pi.ID))
			case rr.Outcome != queue.RoundStarted:
				return reply("retry round: "+rr.Outcome, fmt.Sprintf("No new round for plan `%s`: %s.", pi.ID, sanitizeArg(rr.Reason)))
			}
			return ack(fmt.Sprintf("round %d of %s by hand: task %s", rr.Round, pi.ID, rr.TaskID))
		}
		return ack(fmt.Sprintf("retried %d tasks of %s", res.Retried, pi.ID))
	case CmdStop:
		stopped, err := s.store.StopRounds(ctx, pi.ID, by)
		if err != nil {
			return "", err
		}
		if !stopped {
			return reply("nothing to stop", fmt.Sprintf("Plan `%s` has no pull request whose loop runs.", pi.ID))
		}
		return ack("rounds of " + pi.ID + " stopped")
	case CmdBudget:
		amount, err := newBudget(cmd.Args, pi)
		if err != nil {
			return reply("budget: bad amount", fmt.Sprintf("That did not work: %s. Usage: `/whilly budget 10` sets the cap to $10, `/whilly budget +5` raises it by $5.", err))
		}
		if _, err := s.store.SetBudget(ctx, pi.ID, &amount, by); err != nil {
			return "", err
		}
		return ack(fmt.Sprintf("budget of %s set to %s", pi.ID, amount))
	case CmdPause, CmdResume, CmdApprove:
		return s.pauseCommand(ctx, pi, by, cmd, reply, ack)
	}
	return "ignored", nil
}

// pauseCommand runs /whilly pause, /whilly resume and /whilly approve DIGEST on the
// issue's plan through the store's pause functions (the same as the API's), as the
// commenter.
func (s *Service) pauseCommand(ctx context.Context, pi queue.PlanInfo, by string, cmd Command,
	reply func(outcome, text string) (string, error), ack func(outcome string) (string, error)) (string, error) {
	a := queue.Actor{By: by}
	var (
		ch  queue.PlanChange
		err error
	)
	switch cmd.Name {
	case CmdPause:
		ch, err = s.store.PausePlan(ctx, pi.ID, a)
	case CmdResume:
		ch, err = s.store.ResumePlan(ctx, pi.ID, a)
	case CmdApprove:
		if len(cmd.Args) == 0 {
			return reply("approve: no digest", "`/whilly approve` needs the plan's digest: copy the `/whilly approve …` line from the status comment after reviewing the plan.")
		}
		ch, err = s.store.ApprovePlan(ctx, pi.ID, cmd.Args[0], a)
	}
	switch {
	case errors.Is(err, queue.ErrStaleDigest):
		return reply("approve: stale digest", fmt.Sprintf("Nothing was approved: plan `%s` changed since that digest was shown. Review the plan again; its status comment shows the digest it has now.", pi.ID))
	case errors.Is(err, queue.ErrInvalid):
		return reply("approve: bad digest", fmt.Sprintf("`%s` is not a plan digest: copy the `/whilly approve …` line from the status comment.", sanitizeArg(cmd.Args[0])))
	case errors.Is(err, queue.ErrConflict):
		return reply(cmd.Name+" refused", pauseRefusal(cmd.Name, pi))
	case err != nil:
		return "", err
	case !ch.Changed && cmd.Name == CmdPause:
		return reply("already paused", fmt.Sprintf("Plan `%s` is already paused.", pi.ID))
	case !ch.Changed:
		return reply("not paused", fmt.Sprintf("Plan `%s` is not paused.", pi.ID))
	}
	if cmd.Name == CmdApprove {
		return ack(fmt.Sprintf("approved %s (digest %s)", pi.ID, ch.Digest))
	}
	return ack(cmd.Name + "d " + pi.ID)
}

// pauseRefusal says why the plan's state refuses a pause command, and what to do instead.
func pauseRefusal(name string, pi queue.PlanInfo) string {
	switch {
	case pi.Status != plan.PlanActive && pi.Status != plan.PlanPaused:
		return fmt.Sprintf("Plan `%s` is %s: there is nothing to %s.", pi.ID, strings.ToLower(string(pi.Status)), name)
	case pi.PauseReason == queue.PauseBudget:
		return fmt.Sprintf("Plan `%s` is paused on its budget: raise it with `/whilly budget USD` to resume it.", pi.ID)
	case pi.PauseReason == queue.PauseApproval:
		return fmt.Sprintf("Plan `%s` awaits approval: review it, then comment the `/whilly approve …` line its status comment shows.", pi.ID)
	case name == CmdApprove:
		return fmt.Sprintf("Plan `%s` does not await approval.", pi.ID)
	}
	return fmt.Sprintf("Plan `%s` cannot be %sd now.", pi.ID, name)
}

// newBudget reads "10", "$10" or "+5" (raise the cap, or the spend when uncapped).
func newBudget(args []string, pi queue.PlanInfo) (plan.USD, error) {
	if len(args) == 0 {
		return 0, errors.New("the budget needs an amount in USD")
	}
	s := strings.TrimPrefix(strings.TrimSpace(args[0]), "$")
	raise := strings.HasPrefix(s, "+")
	s = strings.TrimPrefix(strings.TrimPrefix(s, "+"), "$")
	u, err := plan.ParseUSD(s)
	if err != nil || u < 0 {
		return 0, fmt.Errorf("`%s` is not an amount in USD", sanitizeArg(args[0]))
	}
	if !raise {
		return u, nil
	}
	base := pi.Spent
	if pi.Budget != nil {
		base = *pi.Budget
	}
	return base + u, nil
}

// sanitizeArg keeps user text quoted in a reply harmless: no backticks, mentions or
// markup, bounded length.
func sanitizeArg(s string) string {
	s = strings.Map(func(r rune) rune {
		switch r {
		case '`', '@', '<', '>', '[', ']', '\n', '\r':
			return -1
		}
		return r
	}, s)
	if len(s) > 100 {
		s = s[:100]
	}
	return s
}
