package app

import (
	"fmt"
	"net/url"
	"strings"
	"unicode/utf8"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// Marker is the hidden first line of a plan's status comment, by which whilly finds it.
// Plan ids hold only letters, digits and . _ : / -, so the marker cannot be closed early.
func Marker(planID string) string { return "<!-- whilly:status plan=" + planID + " -->" }

// StatusView is everything the status comment shows.
type StatusView struct {
	Plan      queue.PlanInfo
	Tasks     []queue.TaskInfo
	PublicURL string   // WHILLY_PUBLIC_URL; no links when empty
	Source    string   // where the plan came from (intake source)
	Notes     []string // the intake's notes, e.g. ignored verify commands
	Pull      *queue.PullRequest
	// FleetPaused: an operator paused the whole fleet (no new task starts anywhere).
	FleetPaused bool
	// Digest is the plan's content digest (queue.DigestOf) while it awaits approval; the
	// comment shows the /whilly approve line that starts it.
	Digest string
	// Rounds are the review/CI rounds of the pull request (none before its first feedback).
	Rounds queue.PullRounds
}

// maxRows bounds the task table; GitHub caps a comment at 65,536 characters.
const maxRows = 100

// maxLinkBytes bounds an attempt link of the task table.
const maxLinkBytes = 256

// Intake sources, as github_intakes.source records them.
const (
	SourceBlock    = "block"
	SourcePlanner  = "planner"
	SourceTaskList = "task_list"
	SourceIssue    = "issue"
)

var sourceText = map[string]string{
	SourceBlock:    "the `whilly` plan block in the issue",
	SourcePlanner:  "the planner agent, from the issue",
	SourceTaskList: "the issue's task list (each task after the one before)",
	SourceIssue:    "the whole issue, as one task",
}

// RenderStatus renders the status comment: state, progress, budget, a task table with
// attempts, cost and worker, the last error and TRIZ finding, links, and the commands.
// The output depends only on the view (golden-file tested).
func RenderStatus(v StatusView) string {
	var b strings.Builder
	p := v.Plan
	w := func(format string, args ...any) { fmt.Fprintf(&b, format, args...) }
	w("%s\n", Marker(p.ID))
	w("### %s\n\n", headline(p))
	pauseNotes(w, v)

	counts := map[plan.Status]int{}
	for _, t := range v.Tasks {
		counts[t.Status]++
	}
	total := len(v.Tasks)
	finished := counts[plan.StatusDone] + counts[plan.StatusSkipped]
	pct := 0
	if total > 0 {
		pct = finished * 100 / total
	}
	w("**Plan** `%s` · **%d/%d** tasks finished (%d%%)", p.ID, finished, total, pct)
	for _, c := range []struct {
		st   plan.Status
		text string
	}{
		{plan.StatusInProgress, "running"}, {plan.StatusClaimed, "claimed"}, {plan.StatusPending, "pending"},
		{plan.StatusFailed, "failed"}, {plan.StatusSkipped, "skipped"}, {plan.StatusCancelled, "cancelled"},
	} {
		if n := counts[c.st]; n > 0 {
			w(" · %d %s", n, c.text)
		}
	}
	w("\n\n")
	if p.Budget != nil {
		w("**Budget** %s spent of %s", money(p.Spent), money(*p.Budget))
		if *p.Budget > 0 {
			w(" (%d%%)", int64(p.Spent)*100/int64(*p.Budget))
		}
		w("\n\n")
	} else {
		w("**Budget** %s spent, no cap\n\n", money(p.Spent))
	}
	if pr := v.Pull; pr != nil {
		w("**Pull request** [#%d](%s) from `%s` — %s\n\n", pr.Number, pr.URL, pr.Branch, pullState(pr))
	}
	renderRounds(&b, v.Rounds)
	if s, ok := sourceText[v.Source]; ok {
		w("**Source** %s\n\n", s)
	}
	for _, n := range v.Notes {
		w("> [!NOTE]\n> %s\n\n", oneLine(n, 300))
	}

	if total > 0 {
		w("| Task | State | Attempts | Cost | Worker |\n|:--|:--|--:|--:|:--|\n")
		for i, t := range v.Tasks {
			if i == maxRows {
				w("\n…and %d more tasks", total-maxRows)
				if v.PublicURL != "" {
					w(" ([dashboard](%s))", dashboardURL(v.PublicURL, p.ID))
				}
				w(".\n")
				break
			}
			worker := ""
			if t.ClaimedBy != "" {
				worker = "`" + t.ClaimedBy + "`"
			}
			attempts := fmt.Sprintf("%d/%d", t.Attempts, t.MaxAttempts)
			// The latest attempt's page: its agent log, live while it runs. (Not for ids so
			// long that 100 links would overflow GitHub's limit on a comment.)
			if u := attemptURL(v.PublicURL, p.ID, t.ID, t.Attempts); v.PublicURL != "" && t.Attempts > 0 && len(u) <= maxLinkBytes {
				attempts = fmt.Sprintf("[%s](%s)", attempts, u)
			}
			w("| `%s` | %s | %s | %s | %s |\n", t.ID, taskState(t.Status), attempts, money(t.Cost), worker)
		}
		w("\n")
	}

	var skipped []string
	for _, t := range v.Tasks {
		if t.Status == plan.StatusSkipped && t.Gate.Decision == plan.DecisionReject {
			var why []string
			for _, r := range t.Gate.Missing() {
				why = append(why, r.Message)
			}
			skipped = append(skipped, fmt.Sprintf("- `%s`: %s", t.ID, strings.Join(why, "; ")))
		}
	}
	if len(skipped) > 0 {
		w("**Skipped by the decision gate**\n%s\n\n", strings.Join(skipped, "\n"))
	}

	if t, ok := lastError(v.Tasks); ok {
		w("<details><summary>Last error: <code>%s</code>, attempt %d/%d</summary>\n\n%s\n</details>\n\n",
			t.ID, t.Attempts, t.MaxAttempts, fenced(tail(t.LastError, 1500)))
	}
	for _, t := range v.Tasks {
		if t.TrizFinding != "" && t.Status != plan.StatusDone {
			w("<details><summary>TRIZ finding on <code>%s</code></summary>\n\n%s\n</details>\n\n", t.ID, fenced(tail(t.TrizFinding, 1500)))
			break
		}
	}
	if v.PublicURL != "" {
		// The plan's page on the dashboard (after sign-in), not the API, which a browser cannot read.
		w("[Dashboard](%s)\n\n", dashboardURL(v.PublicURL, p.ID))
	}
	w("<sub>Edited in place by whilly. Commands (write access): `/whilly status` · `/whilly retry [TASK]` · `/whilly cancel` · `/whilly budget USD` · `/whilly help`</sub>\n")
	return b.String()
}

func pullState(pr *queue.PullRequest) string {
	switch {
	case pr.State == queue.PullMerged:
		return "merged"
	case pr.State == queue.PullClosed:
		return "closed without merging"
	case pr.Draft:
		return "draft until every task is done"
	}
	return "ready for review"
}

func headline(p queue.PlanInfo) string {
	switch p.Status {
	case plan.PlanActive:
		return "🔄 whilly: in progress"
	case plan.PlanPaused:
		if p.PauseReason == "budget" {
			return "💸 whilly: paused, budget exhausted — raise it with `/whilly budget USD`"
		}
		if p.PauseReason == queue.PauseApproval {
			return "⏸️ whilly: awaiting approval"
		}
		return "⏸️ whilly: paused"
	case plan.PlanDone:
		return "✅ whilly: done"
	case plan.PlanFailed:
		return "❌ whilly: failed — `/whilly retry` to try the failed tasks again"
	case plan.PlanCancelled:
		return "🚫 whilly: cancelled"
	}
	return "whilly: " + strings.ToLower(string(p.Status))
}

func taskState(s plan.Status) string {
	switch s {
	case plan.StatusPending:
		return "⏳ pending"
	case plan.StatusClaimed:
		return "🔒 claimed"
	case plan.StatusInProgress:
		return "🏃 running"
	case plan.StatusDone:
		return "✅ done"
	case plan.StatusFailed:
		return "❌ failed"
	case plan.StatusSkipped:
		return "⏭️ skipped"
	case plan.StatusCancelled:
		return "🚫 cancelled"
	}
	return strings.ToLower(string(s))
}

// lastError is the most recently updated unfinished task that has an error.
func lastError(tasks []queue.TaskInfo) (queue.TaskInfo, bool) {
	var best queue.TaskInfo
	found := false
	for _, t := range tasks {
		if t.LastError == "" || t.Status == plan.StatusDone {
			continue
		}
		if !found || t.UpdatedAt.After(best.UpdatedAt) {
			best, found = t, true
		}
	}
	return best, found
}

// money formats an amount with at least two decimals: $5.00, $0.42, $0.004.
func money(u plan.USD) string {
	s := u.String()
	dot := strings.IndexByte(s, '.')
	switch {
	case dot < 0:
		s += ".00"
	case len(s)-dot == 2:
		s += "0"
	}
	return "$" + s
}

// fenced puts untrusted text in a code block no line of it can close.
func fenced(s string) string {
	longest, run := 0, 0
	for _, r := range s {
		if r == '`' {
			run++
			longest = max(longest, run)
		} else {
			run = 0
		}
	}
	fence := strings.Repeat("`", max(3, longest+1))
	return fence + "text\n" + strings.TrimRight(s, "\n") + "\n" + fence
}

// tail keeps the last n bytes of s (on a rune boundary), marking the cut.
func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	s = s[len(s)-n:]
	for len(s) > 0 && !utf8.RuneStart(s[0]) {
		s = s[1:]
	}
	return "[…]" + s
}

// oneLine flattens text to one line of at most n bytes.
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > n {
		s = s[:n]
		for len(s) > 0 && !utf8.ValidString(s) {
			s = s[:len(s)-1]
		}
		s += "…"
	}
	return s
}

// dashboardURL is the plan's page on the web dashboard (web.PlanPath).
func dashboardURL(public, planID string) string {
	return strings.TrimRight(public, "/") + "/plans/" + url.PathEscape(planID)
}

// pauseNotes says that the fleet is paused (never by whom: an operator's name is not the
// issue's business) and, for a plan awaiting approval, how to approve it: the digest binds
// the approval to the plan shown below it.
func pauseNotes(w func(format string, args ...any), v StatusView) {
	live := v.Plan.Status == plan.PlanActive || v.Plan.Status == plan.PlanPaused
	if v.FleetPaused && live {
		w("> [!WARNING]\n> whilly is paused by its operator: no new task starts until it resumes; running tasks finish.\n\n")
	}
	if v.Digest != "" && v.Plan.Status == plan.PlanPaused && v.Plan.PauseReason == queue.PauseApproval {
		w("> [!IMPORTANT]\n> This plan waits for approval. A collaborator with write access reviews the tasks below, then comments:\n>\n> ```\n> /whilly approve %s\n> ```\n>\n> The digest covers the plan's name and every task as the agent will get them; if the plan changes, the digest changes and an older one is refused.\n\n", v.Digest)
		w("<details><summary>The plan to approve: %d tasks as the agent will get them</summary>\n\n%s\n</details>\n\n", len(v.Tasks), fenced(reviewText(v.Plan, v.Tasks)))
	}
}

// maxReview bounds the plan shown for review in the status comment.
const maxReview = 30_000

// reviewText is the plan as a reviewer reads it before approving: every field the digest
// covers, task by task in file order. Past maxReview bytes it is cut, and says where the
// whole plan is.
func reviewText(p queue.PlanInfo, tasks []queue.TaskInfo) string {
	var b strings.Builder
	if name := strings.TrimRight(p.Name, "\n"); name != "" {
		// Every task's prompt shows the plan's name.
		b.WriteString("plan name:\n")
		for _, line := range strings.Split(name, "\n") {
			fmt.Fprintf(&b, "  | %s\n", line)
		}
	}
	if p.Repo != "" {
		fmt.Fprintf(&b, "repository: %s\n", p.Repo)
	}
	for _, v := range p.Verify {
		fmt.Fprintf(&b, "verify %s (required %t): %s\n", v.Name, v.Required, v.Command)
	}
	list := func(name string, items []string) {
		for _, it := range items {
			fmt.Fprintf(&b, "  %s: %s\n", name, it)
		}
	}
	for _, t := range tasks {
		if b.Len() > maxReview {
			fmt.Fprintf(&b, "\n[… cut: the whole plan is too long for a comment; read it with `whilly plan export %s`]\n", p.ID)
			break
		}
		fmt.Fprintf(&b, "\n%s (%s, at most %d attempts)", t.ID, t.Priority, t.MaxAttempts)
		if len(t.Dependencies) > 0 {
			fmt.Fprintf(&b, " after %s", strings.Join(t.Dependencies, ", "))
		}
		b.WriteString("\n")
		for _, line := range strings.Split(strings.TrimRight(t.Description, "\n"), "\n") {
			fmt.Fprintf(&b, "  | %s\n", line)
		}
		list("criterion", t.AcceptanceCriteria)
		list("test", t.TestSteps)
		list("key file", t.KeyFiles)
		list("needs label", t.Labels)
		if t.PRDRequirement != "" {
			fmt.Fprintf(&b, "  requirement: %s\n", t.PRDRequirement)
		}
	}
	return strings.TrimLeft(b.String(), "\n")
}

// attemptURL is the page of attempt n of a task on the web dashboard (web.AttemptPath):
// its agent log.
func attemptURL(public, planID, taskID string, n int) string {
	return fmt.Sprintf("%s/plans/%s/tasks/%s/attempts/%d", strings.TrimRight(public, "/"), url.PathEscape(planID), url.PathEscape(taskID), n)
}

// renderRounds shows the pull request's rounds: the current one (its number and what
// started it), the earlier ones, a refused round's reason and a stopped loop.
func renderRounds(b *strings.Builder, r queue.PullRounds) {
	w := func(format string, args ...any) { fmt.Fprintf(b, format, args...) }
	var cur *queue.Round
	for i := range r.Rounds {
		if r.Rounds[i].Outcome != queue.RoundRefused {
			cur = &r.Rounds[i]
		}
	}
	if cur != nil {
		w("**Round %d** of the pull request: %s", cur.Round, inline(cur.Summary, 200))
		if cur.TaskID != "" {
			w(" (task `%s`)", cur.TaskID)
		}
		if cur.Outcome == queue.RoundResolved {
			w(" — the check passed on re-run, nothing to fix")
		}
		w("\n\n")
		if len(r.Rounds) > 1 {
			w("<details><summary>Rounds</summary>\n\n")
			for _, x := range r.Rounds {
				w("- round %d: %s — %s\n", x.Round, inline(x.Summary, 150), x.Outcome)
			}
			w("\n</details>\n\n")
		}
	}
	for _, x := range r.Rounds {
		if x.Outcome == queue.RoundRefused {
			w("> [!CAUTION]\n> Round %d refused: %s. The plan ended FAILED; `/whilly retry` on the pull request starts one more round by hand.\n\n",
				x.Round, inline(x.Reason, 300))
		}
	}
	if r.StoppedBy != "" {
		w("**Review/CI loop** stopped by %s: new feedback starts no round.\n\n", inline(r.StoppedBy, 60))
	}
}
