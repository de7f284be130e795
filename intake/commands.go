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
- ` + "`/whilly help`" + ` — this list

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
	pi, err := s.store.IssuePlan(ctx, ref.String())
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
			return reply("nothing to retry", fmt.Sprintf("Plan `%s` has no failed or cancelled task to retry.", pi.ID))
		}
		return ack(fmt.Sprintf("retried %d tasks of %s", res.Retried, pi.ID))
	case CmdBudget:
		amount, err := newBudget(cmd.Args, pi)
		if err != nil {
			return reply("budget: bad amount", fmt.Sprintf("That did not work: %s. Usage: `/whilly budget 10` sets the cap to $10, `/whilly budget +5` raises it by $5.", err))
		}
		if _, err := s.store.SetBudget(ctx, pi.ID, &amount, by); err != nil {
			return "", err
		}
		return ack(fmt.Sprintf("budget of %s set to %s", pi.ID, amount))
	}
	return "ignored", nil
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
