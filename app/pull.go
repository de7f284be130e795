package app

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// PullView is everything a plan's pull request body shows.
type PullView struct {
	Plan      queue.PlanInfo
	Tasks     []queue.TaskInfo
	Issue     int    // the issue the pull request closes
	PublicURL string // WHILLY_PUBLIC_URL; no link when empty
}

// maxPullRows bounds the checklist; GitHub caps a body at 65,536 characters.
const maxPullRows = 200

// RenderPull renders a plan's pull request body: `Closes #N` (GitHub closes the issue
// when it merges), then the plan's tasks as a checklist, checked when DONE. Only
// finished tasks change it, so running tasks cost no edit. The output depends only on
// the view (golden-file tested).
func RenderPull(v PullView) string {
	var b strings.Builder
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	p := v.Plan
	done := 0
	for _, t := range v.Tasks {
		if t.Status == plan.StatusDone {
			done++
		}
	}
	w("Closes #%d\n\n", v.Issue)
	w("The work of whilly plan `%s`: **%d/%d** tasks done.\n\n", p.ID, done, len(v.Tasks))
	for i, t := range v.Tasks {
		if i == maxPullRows {
			w("- …and %d more tasks\n", len(v.Tasks)-maxPullRows)
			break
		}
		box := " "
		if t.Status == plan.StatusDone {
			box = "x"
		}
		w("- [%s] `%s` %s%s\n", box, t.ID, inline(firstLine(t.Description), 120), pullSuffix(t.Status))
	}
	w("\n")
	if v.PublicURL != "" {
		w("[Dashboard](%s)\n\n", dashboardURL(v.PublicURL, p.ID))
	}
	w("<sub>Opened by whilly from #%d, one commit per task. The checklist follows the plan; whilly marks this pull request ready for review when every task is done.</sub>\n", v.Issue)
	return b.String()
}

func pullSuffix(s plan.Status) string {
	switch s {
	case plan.StatusSkipped:
		return " — skipped"
	case plan.StatusFailed:
		return " — failed"
	case plan.StatusCancelled:
		return " — cancelled"
	default:
		return ""
	}
}

func firstLine(s string) string {
	for line := range strings.Lines(s) {
		if l := strings.TrimSpace(line); l != "" {
			return l
		}
	}
	return ""
}

// inline makes untrusted text safe on one markdown line: no HTML (comments could hide
// text) and no mentions that would notify people.
func inline(s string, n int) string {
	s = oneLine(s, n)
	return strings.NewReplacer("<", "&lt;", ">", "&gt;", "@", "@\u200b").Replace(s)
}

// pullTitle is the issue's title, else the plan's name.
func pullTitle(issue Issue, pi queue.PlanInfo) string {
	t := strings.TrimSpace(issue.Title)
	if t == "" {
		t = pi.Name
	}
	return oneLine(t, 250)
}

// syncPull delivers the plan's work as a pull request, once the plan has pushed: it
// finds the open pull request of the issue's branch (a second intake of the issue) or
// opens a draft one, keeps its checklist current and marks it ready for review when the
// plan is DONE. It returns the pull request, for the status comment. A pull request that
// was closed or merged is left alone: whilly never reopens it or opens another one for
// the plan. With verify it reads the pull request back from GitHub first.
func (m *Mirror) syncPull(ctx context.Context, c Client, ref IssueRef, pi queue.PlanInfo, tasks []queue.TaskInfo,
	st queue.MirrorState, rounds queue.PullRounds, verify bool,
) (*queue.PullRequest, error) {
	pr := st.Pull
	if pi.Repo == "" || !st.Pushed {
		return pr, nil
	}
	repo, err := ParseRepo(pi.Repo)
	if err != nil {
		return nil, fmt.Errorf("plan %s: %w", pi.ID, err)
	}
	body := RenderPull(PullView{Plan: pi, Tasks: tasks, Issue: ref.Number, PublicURL: m.cfg.PublicURL})
	sum := sha256.Sum256([]byte(body))
	switch {
	case pr == nil && pi.Status == plan.PlanCancelled:
		return nil, nil // cancelled before its first mirror after the push: nothing to deliver
	case pr == nil:
		if pr, err = m.openPull(ctx, c, ref, repo, pi, body, sum[:]); err != nil {
			return nil, err
		}
	case pr.State == queue.PullOpen && verify:
		got, err := c.GetPull(ctx, repo, pr.Number)
		if err != nil {
			return nil, err
		}
		if got.State != "open" {
			state := queue.PullClosed
			if got.Merged {
				state = queue.PullMerged
			}
			if _, err := m.store.PullChanged(ctx, repo.String(), pr.Number, state, map[string]any{"source": "reconciler"}); err != nil {
				return nil, err
			}
			cp := *pr
			cp.State = state
			return &cp, nil
		}
		if got.Body != body {
			pr.BodySHA256 = nil // edited by hand: write it again
		}
	}
	if pr.State != queue.PullOpen {
		return pr, nil
	}
	if !bytes.Equal(pr.BodySHA256, sum[:]) {
		if err := c.EditPullBody(ctx, repo, pr.Number, body); err != nil {
			return nil, err
		}
		if err := m.store.SetPullBody(ctx, pi.ID, sum[:]); err != nil {
			return nil, err
		}
		pr.BodySHA256 = sum[:]
	}
	// A round reopens the plan ACTIVE, or PAUSED awaiting approval of its new digest:
	// either way whilly works on the pull request again, so it is a draft again.
	if (pi.Status == plan.PlanActive || pi.Status == plan.PlanPaused) && !pr.Draft && len(rounds.Rounds) > 0 {
		if err := m.backToDraft(ctx, c, pi.ID, pr); err != nil {
			return nil, err
		}
	}
	if pi.Status == plan.PlanDone && pr.Draft {
		if err := c.MarkPullReady(ctx, pr.NodeID); err != nil {
			return nil, err
		}
		if err := m.store.SetPullReady(ctx, pi.ID); err != nil {
			return nil, err
		}
		pr.Draft = false
	}
	return pr, nil
}

// backToDraft turns the ready pull request of a plan that reopened for a round back into
// a draft. Where GitHub has no drafts it stays ready; it is recorded as a draft all the
// same, so the mirror does not ask again at every change (marking ready is harmless).
func (m *Mirror) backToDraft(ctx context.Context, c Client, planID string, pr *queue.PullRequest) error {
	var rl *RateLimitError
	switch err := c.ConvertPullToDraft(ctx, pr.NodeID); {
	case errors.As(err, &rl):
		return err
	case err != nil:
		m.log.WarnContext(ctx, "could not turn the pull request back into a draft for a round", "plan_id", planID, "number", pr.Number, "error", err)
	}
	if err := m.store.SetPullDraft(ctx, planID); err != nil {
		return err
	}
	pr.Draft = true
	return nil
}

// openPull finds the open pull request of the issue's branch (turned back into a draft
// if a finished plan left it ready), or opens a draft one to the repository's default
// branch, and records it for the plan.
func (m *Mirror) openPull(ctx context.Context, c Client, ref IssueRef, repo Repo, pi queue.PlanInfo, body string, sum []byte) (*queue.PullRequest, error) {
	branch := Branch(ref)
	found, err := c.FindPull(ctx, repo, branch)
	reused := err == nil
	if errors.Is(err, ErrNotFound) {
		found, reused, err = m.createPull(ctx, c, ref, repo, pi, branch, body)
	}
	if err != nil {
		return nil, err
	}
	if reused && !found.Draft {
		// A plan before this one finished and left it ready for review; this one is not
		// done. Where GitHub has no drafts the pull request stays as it is.
		var rl *RateLimitError
		switch err := c.ConvertPullToDraft(ctx, found.NodeID); {
		case err == nil:
			found.Draft = true
		case errors.As(err, &rl):
			return nil, err
		default:
			m.log.WarnContext(ctx, "could not turn the reused pull request back into a draft", "plan_id", pi.ID, "number", found.Number, "error", err)
		}
	}
	pr := &queue.PullRequest{PlanID: pi.ID, Repo: repo.String(), Number: found.Number, NodeID: found.NodeID,
		URL: found.URL, Branch: branch, State: queue.PullOpen, Draft: found.Draft}
	if !reused {
		pr.BodySHA256 = sum // opened with this body
	}
	if err := m.store.RecordPull(ctx, *pr, reused); err != nil {
		return nil, err
	}
	m.log.InfoContext(ctx, "pull request linked to plan", "plan_id", pi.ID, "number", found.Number, "reused", reused)
	return pr, nil
}

// createPull opens the draft pull request. Where GitHub has no drafts (a private
// repository on GitHub Free) it opens a ready one; when another one was opened from the
// branch meanwhile, that one is used.
func (m *Mirror) createPull(ctx context.Context, c Client, ref IssueRef, repo Repo, pi queue.PlanInfo, branch, body string) (Pull, bool, error) {
	issue, err := c.Issue(ctx, ref)
	if err != nil {
		return Pull{}, false, err
	}
	info, err := c.RepoInfo(ctx, repo)
	if err != nil {
		return Pull{}, false, err
	}
	np := NewPull{Title: pullTitle(issue, pi), Body: body, Head: branch, Base: info.DefaultBranch, Draft: true}
	created, err := c.CreatePull(ctx, repo, np)
	var se *StatusError
	if errors.As(err, &se) && se.Status == http.StatusUnprocessableEntity {
		if strings.Contains(strings.ToLower(se.Message), "draft") {
			np.Draft = false
			created, err = c.CreatePull(ctx, repo, np)
		} else if again, ferr := c.FindPull(ctx, repo, branch); ferr == nil {
			return again, true, nil
		}
	}
	return created, false, err
}
