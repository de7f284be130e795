package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/whilly-go/whilly/plan"
)

// PlanRequest is what the planner turns into a PRD and a plan: an idea typed by an
// operator (`whilly init`), or a GitHub issue normalised by intake. Every text in it is
// treated as untrusted: scanned for injection patterns, fenced, redacted.
type PlanRequest struct {
	// Idea is what `whilly init "IDEA"` was given. For an issue, IssueTitle, IssueBody
	// and Discussion (its comments, oldest first) are set instead.
	Idea       string
	IssueTitle string
	IssueBody  string
	Discussion []string
	// Slug becomes the plan id; "" makes it plan.Slug of the project name the planner
	// chose.
	Slug string
	// Repo is the repository the plan works on (owner/name), set on the plan; optional.
	Repo string
	// MaxAttempts is the attempt limit of tasks the planner gives none
	// (WHILLY_MAX_ATTEMPTS); 0 means plan.DefaultMaxAttempts.
	MaxAttempts int

	Model string // passed to the agent; "" lets it pick
	// WorkDir is a checkout of the repository the planner may read (`whilly init` passes
	// the current directory). "" runs it in an empty scratch directory: a control plane
	// must not let text from an issue steer an agent through its own files.
	WorkDir string
	// Retrying, when set, is called before the second call with the problems of the first
	// answer (to show progress).
	Retrying func(problems []string)
}

// PlanResult is the planner's work. Cost is the sum over both calls, and is set (with
// Attempts) even when Plan returns an error: a failed call still costs money.
type PlanResult struct {
	Plan     *plan.Plan // normalised and valid; every task PENDING
	PRD      string     // Markdown
	Cost     plan.USD
	Attempts int // calls made: 1, or 2 after an invalid first answer
}

// InvalidPlanError means the planner's answers did not hold a valid plan, even after it
// was asked once more with the problems of its first answer. Problems are those of the
// last answer, one line each.
type InvalidPlanError struct {
	Attempts int
	Problems []string
}

func (e *InvalidPlanError) Error() string {
	return fmt.Sprintf("the planner's plan is invalid after %d attempts:\n  - %s", e.Attempts, strings.Join(e.Problems, "\n  - "))
}

// Size limits of the planner's input.
const (
	maxPlanIdea       = 32 << 10
	maxPlanIssueBody  = 64 << 10
	maxPlanComment    = 8 << 10
	maxPlanComments   = 50
	maxPlanPrevious   = 32 << 10
	maxPlanProblems   = 30
	maxProjectNameLen = 120
)

// repoShape is GitHub's owner/name, printed outside the fences.
var repoShape = lazyRegexp(`^[A-Za-z0-9][A-Za-z0-9-]{0,38}/[A-Za-z0-9._-]{1,100}$`)

// PlanCalls is how many times Plan asks the agent at most: once, and once more with the
// first answer's problems. Each call has Plan's timeout, so a plan may take PlanCalls
// times it.
const PlanCalls = 2

// Plan asks the planner agent for a PRD and a plan and checks the plan with
// the plan file's own rules (plan.Parse, so also plan.Normalize and plan.Validate). An
// answer that is not a valid plan — or whose tasks the decision gate would reject — is
// sent back once with its problems; a second answer that is still invalid is an
// *InvalidPlanError (a second answer whose only problems are gate rejections is
// accepted: the gate reports them when the plan is applied). Each call runs with
// timeout (0: DefaultTimeout).
//
// The plan's id is req.Slug, or the slug of the project name; its tasks are PENDING, with
// the default attempt limit and no labels. The planner cannot set the plan's budget,
// strictness or verify commands: those run or spend on the operator's behalf.
//
// Errors: an *InjectionError (errors.Is ErrPromptInjection) when the request holds an
// injection pattern, before any agent runs; ErrNotFound (wrapped) when the agent's
// executable is missing; an *AnswerError when a call times out or fails (it is not asked
// again: only an invalid plan is); an *InvalidPlanError.
func Plan(ctx context.Context, a Agent, req PlanRequest, timeout time.Duration) (PlanResult, error) {
	var res PlanResult
	if err := checkPlanRequest(req); err != nil {
		return res, err
	}
	dir, cleanup, err := questionDir(req.WorkDir)
	if err != nil {
		return res, fmt.Errorf("plan: %w", err)
	}
	defer cleanup()
	var (
		problems []string
		previous string
	)
	for attempt := 1; attempt <= PlanCalls; attempt++ {
		if attempt > 1 && req.Retrying != nil {
			req.Retrying(problems)
		}
		prompt := planPrompt(req, problems, previous)
		run, err := a.Run(ctx, Request{
			Prompt:  prompt,
			WorkDir: dir,
			Env:     []string{"WHILLY_AGENT_ROLE=planner", "WHILLY_PLANNER_ATTEMPT=" + strconv.Itoa(attempt)},
			Model:   req.Model,
			Timeout: timeout,
		})
		res.Attempts = attempt
		if err != nil {
			return res, fmt.Errorf("ask the %s planner: %w", a.Name(), err)
		}
		res.Cost += run.Cost
		text, err := answerText(a.Name(), run)
		if err != nil {
			return res, fmt.Errorf("ask the %s planner: %w", a.Name(), err)
		}
		ans := readPlanAnswer(text, req)
		if len(ans.problems) == 0 || (attempt == PlanCalls && ans.gateOnly) {
			res.Plan, res.PRD = ans.plan, ans.prd
			if res.PRD == "" {
				res.PRD = fallbackPRD(req, ans.plan)
			}
			return res, nil
		}
		problems, previous = ans.problems, ans.planJSON
	}
	return res, &InvalidPlanError{Attempts: PlanCalls, Problems: problems}
}

// checkPlanRequest refuses a request without content, with an invalid slug or repo, or
// with an injection pattern in any of its texts.
func checkPlanRequest(req PlanRequest) error {
	if strings.TrimSpace(req.Idea) == "" && strings.TrimSpace(req.IssueTitle) == "" && strings.TrimSpace(req.IssueBody) == "" {
		return errors.New("plan: the request has no idea and no issue")
	}
	if req.Slug != "" {
		if err := plan.Validate(&plan.Plan{ID: req.Slug, Name: "x"}); err != nil {
			return fmt.Errorf("plan: invalid slug %q: %w", bound(req.Slug, 80), err)
		}
	}
	if req.Repo != "" && !repoShape().MatchString(req.Repo) {
		return fmt.Errorf("plan: repo %q is not owner/name", bound(req.Repo, 120))
	}
	err := checkFields(map[string]string{
		"idea": req.Idea, "issue_title": req.IssueTitle, "issue_body": req.IssueBody,
	}, map[string][]string{"discussion": req.Discussion})
	if err != nil {
		return fmt.Errorf("plan: %w", err)
	}
	return nil
}

// planPrompt renders the planner's prompt; problems and previous (the last answer's plan
// JSON) are set on the second call.
func planPrompt(req PlanRequest, problems []string, previous string) string {
	parts := []string{req.Idea, req.IssueTitle, req.IssueBody, req.Repo, req.Slug, previous}
	parts = append(parts, req.Discussion...)
	parts = append(parts, problems...)
	p := &fencedPrompt{nonce: contentNonce(parts...)}

	p.line("You are the planning agent of whilly, an orchestrator that hands tasks to coding agents one at a time.")
	p.line("Turn the request below into a product requirements document (PRD) and a plan of small tasks that coding agents can carry out.")
	if req.WorkDir != "" {
		p.line("You may read the repository in your working directory to find where the work goes, but do not change any file and do not run commands: your answer is text only.")
	} else {
		p.line("Do not change any file and do not run commands: your answer is text only.")
	}
	p.line("")
	source := "the request as it was typed"
	if req.IssueTitle != "" || req.IssueBody != "" {
		source = "a GitHub issue and its discussion, not written by the operator"
	}
	p.untrustedRules(source)

	p.line("# Request")
	if req.Repo != "" {
		p.printf("Repository: %s\n", req.Repo)
	}
	if strings.TrimSpace(req.Idea) != "" {
		p.line("\n## Idea")
		p.fence("idea", req.Idea, maxPlanIdea)
	}
	if strings.TrimSpace(req.IssueTitle) != "" {
		p.line("\n## Issue title")
		p.fence("issue_title", req.IssueTitle, maxPromptShort)
	}
	if strings.TrimSpace(req.IssueBody) != "" {
		p.line("\n## Issue body")
		p.fence("issue_body", req.IssueBody, maxPlanIssueBody)
	}
	if len(req.Discussion) > 0 {
		p.line("\n## Discussion (comments on the issue, oldest first)")
		for i, c := range req.Discussion {
			if i == maxPlanComments {
				p.printf("[%d more comments not shown]\n", len(req.Discussion)-i)
				break
			}
			p.printf("### Comment %d\n", i+1)
			p.fence("issue_comment", c, maxPlanComment)
		}
	}

	p.line("\n# What to write")
	p.line("First the PRD, in Markdown: a title; Overview (the problem and who has it); Goals and non-goals;")
	p.line("Functional requirements numbered F1, F2 … each one testable; Non-functional requirements; Open questions.")
	p.line("Then the plan, as one JSON object in a ```json fenced block at the very end of the answer, nothing after it:")
	p.line("")
	p.line("```json")
	p.line(`{"project": "Short name of the work",`)
	p.line(` "tasks": [`)
	p.line(`  {"id": "TASK-001", "priority": "high",`)
	p.line(`   "description": "Add a rate limit of 5 attempts per minute per IP to the /login handler in app/login.go",`)
	p.line(`   "dependencies": [], "key_files": ["app/login.go", "app/login_test.go"],`)
	p.line(`   "acceptance_criteria": ["the 6th attempt within 60 s returns 429", "other IPs are not limited"],`)
	p.line(`   "test_steps": ["go test ./app -run TestLoginRateLimit"],`)
	p.line(`   "prd_requirement": "F1"}`)
	p.line(` ]}`)
	p.line("```")
	p.line("")
	p.line("Rules for the plan:")
	p.line("1. Tasks are atomic: one coding agent finishes each in 5 to 15 minutes, and it sees one task at a time without the PRD.")
	p.line("2. ids are TASK-001, TASK-002 … in the order the work can be done; dependencies list the ids of earlier tasks that must be done first, never a later one (no cycles).")
	p.line("3. description: at least 20 characters, self-contained: what to change, where, and how to tell it is done.")
	p.line("4. priority: one of critical, high, medium, low.")
	p.line("5. key_files: the files the task creates or changes, relative to the repository root.")
	p.line("6. acceptance_criteria: 2 to 5 statements that can be checked.")
	p.line("7. test_steps: at least one command or concrete step that checks the criteria.")
	p.line("8. prd_requirement: the PRD requirement the task implements (F1 …).")
	p.line("9. Start with any setup the other tasks need; end with a task that tests the whole feature end to end.")
	p.line("10. Use only the keys shown: no status, budget, verify commands or labels.")

	if len(problems) > 0 {
		p.line("\n# Your previous answer was refused")
		p.line("Its plan had these problems:")
		shown := problems
		if len(shown) > maxPlanProblems {
			shown = append(shown[:maxPlanProblems:maxPlanProblems], fmt.Sprintf("… and %d more", len(problems)-maxPlanProblems))
		}
		p.list("validation_errors", shown, false)
		if strings.TrimSpace(previous) != "" {
			p.line("Its plan was:")
			p.fence("previous_plan", previous, maxPlanPrevious)
		}
		p.line("Write the whole answer again, the PRD and the complete plan, with every problem fixed.")
	}
	return p.String()
}

// planAnswer is what readPlanAnswer found in an answer.
type planAnswer struct {
	plan     *plan.Plan // nil unless valid, or with gate rejections only
	prd      string     // the Markdown before the plan, trimmed
	planJSON string     // the plan's JSON as given, to show it back
	problems []string
	gateOnly bool // every problem is a decision-gate rejection
}

// readPlanAnswer reads a planner's answer: the PRD (the Markdown before the JSON) and the
// plan, and what is wrong with them.
func readPlanAnswer(text string, req PlanRequest) planAnswer {
	var ans planAnswer
	raw, before, err := jsonObjectIn(text, false)
	if err != nil {
		ans.problems = []string{"the answer has no plan: end it with the plan as one JSON object in a ```json fenced block"}
		return ans
	}
	ans.planJSON = string(raw)
	obj, err := decodeObject(raw)
	if err != nil {
		ans.problems = []string{"the plan " + err.Error()}
		return ans
	}
	ans.prd = strings.TrimSpace(before)
	// {"prd": "…", "plan": {…}} is read too.
	if inner, ok := obj["plan"].(map[string]any); ok && obj["tasks"] == nil {
		if s, ok := obj["prd"].(string); ok && ans.prd == "" {
			ans.prd = strings.TrimSpace(s)
		}
		obj = inner
	}
	// What the planner may not decide is dropped before validation, so it cannot fail it.
	for _, k := range []string{"plan_id", "budget_usd", "strict", "verify", "repo"} {
		delete(obj, k)
	}
	if tasks, ok := obj["tasks"].([]any); ok {
		for _, t := range tasks {
			if m, ok := t.(map[string]any); ok {
				for _, k := range []string{"status", "max_attempts", "labels"} {
					delete(m, k)
				}
			}
		}
	}
	if name, ok := obj["project"].(string); ok && len(name) > maxProjectNameLen {
		ans.problems = append(ans.problems, fmt.Sprintf(`field "project": must be at most %d characters`, maxProjectNameLen))
	}
	clean, err := json.Marshal(obj)
	if err != nil {
		ans.problems = append(ans.problems, "the plan cannot be re-encoded: "+err.Error())
		return ans
	}
	parsed, err := plan.ParseWith(clean, plan.ParseOptions{MaxAttempts: req.MaxAttempts})
	var ve *plan.ValidationError
	switch {
	case errors.As(err, &ve):
		for _, pr := range ve.Problems {
			ans.problems = append(ans.problems, pr.String())
		}
		return ans
	case err != nil:
		ans.problems = append(ans.problems, err.Error())
		return ans
	}
	if len(parsed.Tasks) == 0 {
		ans.problems = append(ans.problems, `field "tasks": the plan has no tasks`)
	}
	if len(ans.problems) > 0 {
		return ans
	}
	if req.Slug != "" {
		parsed.ID = req.Slug
	}
	parsed.Repo = req.Repo
	plan.Normalize(parsed)
	if err := plan.Validate(parsed); err != nil {
		// The id and repo were checked by checkPlanRequest: this is not the planner's fault,
		// but asking again costs less than failing outright.
		ans.problems = []string{err.Error()}
		return ans
	}
	for _, t := range parsed.Tasks {
		for _, r := range plan.Gate(t).Missing() {
			ans.problems = append(ans.problems, fmt.Sprintf("task %q: the decision gate rejects it: %s", t.ID, r.Message))
		}
	}
	ans.plan, ans.gateOnly = parsed, true
	return ans
}

// fallbackPRD is the PRD written when the planner gave none: the request and the task
// list, so that the file still says what the plan is for.
func fallbackPRD(req PlanRequest, p *plan.Plan) string {
	var b strings.Builder
	fmt.Fprintf(&b, "# %s\n\n", strings.TrimSpace(p.Name))
	b.WriteString("_The planner wrote no PRD; this one holds the request and the tasks._\n\n## Request\n\n")
	switch {
	case strings.TrimSpace(req.Idea) != "":
		b.WriteString(strings.TrimSpace(req.Idea))
	default:
		b.WriteString(strings.TrimSpace(req.IssueTitle))
		if body := strings.TrimSpace(req.IssueBody); body != "" {
			b.WriteString("\n\n" + body)
		}
	}
	b.WriteString("\n\n## Tasks\n\n")
	for _, t := range p.Tasks {
		fmt.Fprintf(&b, "- **%s**: %s\n", t.ID, strings.TrimSpace(firstLineOf(t.Description)))
	}
	return b.String()
}

func firstLineOf(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}
