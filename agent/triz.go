package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/whilly-go/whilly/plan"
)

// TrizInput is a failed attempt for the failure analyzer: the task as the agent saw it,
// and how the attempt ended. Plan name, description, criteria, test steps and key files
// may come from a GitHub issue: they are scanned for injection patterns, fenced and
// redacted. Reason and Excerpt come from whilly's own run: fenced and redacted, not
// scanned.
type TrizInput struct {
	PlanID             string
	PlanName           string
	TaskID             string
	Description        string
	AcceptanceCriteria []string
	TestSteps          []string
	KeyFiles           []string
	Attempt            int // the attempt that failed, 1-based
	MaxAttempts        int // 0: not shown
	Reason             string
	Excerpt            string // the end of the failed attempt's output; may be ""

	Model     string    // passed to the agent; "" lets it pick
	WorkDir   string    // where the analyzer runs; "" is an empty scratch directory
	BudgetCap *plan.USD // what is left of the plan's budget; nil is unlimited
}

// Kinds of TRIZ findings.
const (
	TrizContradiction = "contradiction"
	TrizNone          = "none"
)

// Contradiction types.
const (
	ContradictionTechnical = "technical" // improving one parameter worsens another
	ContradictionPhysical  = "physical"  // one element must have opposite properties
)

// TrizResult is the analyzer's finding. Cost is set even when AnalyzeFailure returns an
// error: a failed call still costs money.
type TrizResult struct {
	Kind              string // TrizContradiction or TrizNone
	ContradictionType string // ContradictionTechnical or ContradictionPhysical; "" with TrizNone
	Reason            string // which requirements conflict and why that fails the task
	Principle         string // the inventive principle, e.g. "#1 Segmentation"
	Suggestion        string // what the next attempt should do differently
	Cost              plan.USD
}

// Finding is the text the next attempt's prompt carries (PromptInput.TrizFinding), ""
// when there is no contradiction.
func (r TrizResult) Finding() string {
	if r.Kind != TrizContradiction {
		return ""
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s contradiction: %s\n", r.ContradictionType, r.Reason)
	if r.Principle != "" {
		fmt.Fprintf(&b, "Suggestion (principle %s): %s", r.Principle, r.Suggestion)
	} else {
		fmt.Fprintf(&b, "Suggestion: %s", r.Suggestion)
	}
	return b.String()
}

// Bounds of the analyzer's answer fields.
const (
	minTrizReason  = 20
	maxTrizField   = 2 << 10
	maxTrizExcerpt = MaxExcerptBytes
)

// reasonClass is a failure reason as whilly writes them; anything else is fenced.
var reasonClass = lazyRegexp(`^[a-z][a-z0-9_]{0,63}$`)

// AnalyzeFailure asks the analyzer agent a, with a JSON-only prompt, whether the failed
// task hides a technical or physical contradiction and which inventive principle
// resolves it. The call runs with timeout (0: DefaultTimeout), which kills the agent's
// whole process group.
//
// Errors: an *InjectionError when the task holds an injection pattern (no agent runs);
// ErrNotFound (wrapped) when the agent's executable is missing; an *AnswerError for a
// timeout, a failed run, or an answer that is not the JSON asked for (malformed_output).
func AnalyzeFailure(ctx context.Context, a Agent, in TrizInput, timeout time.Duration) (TrizResult, error) {
	var res TrizResult
	if !validID(in.PlanID) || !validID(in.TaskID) {
		return res, fmt.Errorf("analyze failure: invalid plan or task id %q / %q", bound(in.PlanID, 80), bound(in.TaskID, 80))
	}
	err := checkFields(map[string]string{"plan_name": in.PlanName, "description": in.Description},
		map[string][]string{"acceptance_criteria": in.AcceptanceCriteria, "test_steps": in.TestSteps, "key_files": in.KeyFiles})
	if err != nil {
		return res, fmt.Errorf("analyze failure of task %s: %w", in.TaskID, err)
	}
	dir, cleanup, err := questionDir(in.WorkDir)
	if err != nil {
		return res, fmt.Errorf("analyze failure of task %s: %w", in.TaskID, err)
	}
	defer cleanup()
	run, err := a.Run(ctx, Request{
		Prompt:  trizPrompt(in),
		WorkDir: dir,
		Env: []string{"WHILLY_AGENT_ROLE=analyzer", "WHILLY_PLAN_ID=" + in.PlanID, "WHILLY_TASK_ID=" + in.TaskID,
			"WHILLY_ATTEMPT=" + strconv.Itoa(in.Attempt)},
		Model:     in.Model,
		BudgetCap: in.BudgetCap,
		Timeout:   timeout,
	})
	if err != nil {
		return res, fmt.Errorf("analyze failure of task %s: %w", in.TaskID, err)
	}
	res.Cost = run.Cost
	text, err := answerText(a.Name(), run)
	if err != nil {
		return res, fmt.Errorf("analyze failure of task %s: %w", in.TaskID, err)
	}
	found, err := ParseTrizAnswer(text)
	if err != nil {
		return res, fmt.Errorf("analyze failure of task %s: %w", in.TaskID,
			&AnswerError{Agent: a.Name(), Reason: ReasonMalformedOutput, Detail: bound(err.Error(), maxDetailBytes)})
	}
	found.Cost = res.Cost
	return found, nil
}

func trizPrompt(in TrizInput) string {
	parts := []string{in.PlanID, in.PlanName, in.TaskID, in.Description, in.Reason, in.Excerpt,
		strconv.Itoa(in.Attempt), strconv.Itoa(in.MaxAttempts)}
	for _, l := range [][]string{in.AcceptanceCriteria, in.TestSteps, in.KeyFiles} {
		parts = append(parts, strconv.Itoa(len(l)))
		parts = append(parts, l...)
	}
	p := &fencedPrompt{nonce: contentNonce(parts...)}

	p.line("You are a TRIZ analyst working for whilly, an orchestrator of coding agents. A coding agent has just failed a task.")
	p.line("Decide whether the task hides a contradiction that makes it fail:")
	p.line("- a technical contradiction: improving one parameter the task asks for worsens another it also asks for")
	p.line("  (for example a strict rate limit that must not block users who share one IP address);")
	p.line("- a physical contradiction: one element must have opposite properties at once")
	p.line("  (for example a cache that must always be fresh and never be recomputed).")
	p.line("If there is one, name the inventive principle (of TRIZ's 40) that resolves it and what the next attempt should do differently.")
	p.line("Most failures are plain bugs, missing context, flaky tests or limits of the agent: then there is no contradiction; say so.")
	p.line("Do not change any file and do not run commands.")
	p.line("")
	p.untrustedRules("the task (which may come from a GitHub issue) and from the failed run, not written by the operator")

	p.line("# Task")
	p.printf("- plan: %s\n- task: %s\n", in.PlanID, in.TaskID)
	if in.MaxAttempts > 0 {
		p.printf("- failed attempt: %d of %d\n", max(in.Attempt, 1), in.MaxAttempts)
	} else {
		p.printf("- failed attempt: %d\n", max(in.Attempt, 1))
	}
	if strings.TrimSpace(in.PlanName) != "" {
		p.line("\n## Plan name")
		p.fence("plan_name", in.PlanName, maxPromptShort)
	}
	p.line("\n## Description")
	p.fence("task_description", in.Description, maxPromptDescription)
	if len(in.AcceptanceCriteria) > 0 {
		p.line("\n## Acceptance criteria")
		p.list("acceptance_criteria", in.AcceptanceCriteria, true)
	}
	if len(in.TestSteps) > 0 {
		p.line("\n## Test steps")
		p.list("test_steps", in.TestSteps, true)
	}
	if len(in.KeyFiles) > 0 {
		p.line("\n## Key files")
		p.list("key_files", in.KeyFiles, false)
	}

	p.line("\n# How the attempt failed")
	if reasonClass().MatchString(in.Reason) {
		p.printf("Reason: %s\n", in.Reason)
	} else if strings.TrimSpace(in.Reason) != "" {
		p.line("Reason:")
		p.fence("failure_reason", in.Reason, maxPromptShort)
	}
	if strings.TrimSpace(in.Excerpt) != "" {
		p.line("The end of the agent's output:")
		p.fence("attempt_output", tailString(in.Excerpt, 4*maxTrizExcerpt), maxTrizExcerpt)
	}

	p.line("\n# Answer")
	p.line("Answer with exactly one JSON object and nothing else: no prose, no Markdown fence. With a contradiction:")
	p.line(`{"contradiction": true, "contradiction_type": "technical", "reason": "…", "principle": "#1 Segmentation", "suggestion": "…"}`)
	p.line("Without one:")
	p.line(`{"contradiction": false, "contradiction_type": "", "reason": "…", "principle": "", "suggestion": ""}`)
	p.line("- contradiction_type: \"technical\" or \"physical\" when there is a contradiction, else \"\".")
	p.line("- reason: one or two sentences: which two requirements conflict and why that makes the task fail (at least 20 characters); without a contradiction, what the failure most likely is.")
	p.line("- principle: the inventive principle as \"#N Name\".")
	p.line("- suggestion: one to three sentences for the next attempt: a concrete change of approach that applies the principle.")
	return p.String()
}

// trizAnswer is the analyzer's JSON. Pointers tell a missing key from an empty one.
type trizAnswer struct {
	Contradiction     *bool   `json:"contradiction"`
	ContradictionType *string `json:"contradiction_type"`
	Reason            *string `json:"reason"`
	Principle         *string `json:"principle"`
	Suggestion        *string `json:"suggestion"`
}

// ParseTrizAnswer reads the analyzer's answer: one JSON object (also found inside a
// Markdown fence or amid prose, which the prompt forbids but models do). A contradiction
// needs a type of "technical" or "physical", a reason of at least 20 characters and a
// suggestion; anything else — no object, wrong types, a missing verdict — is an error.
func ParseTrizAnswer(text string) (TrizResult, error) {
	raw, _, err := jsonObjectIn(text, true)
	if err != nil {
		return TrizResult{}, err
	}
	if _, err := decodeObject(raw); err != nil {
		return TrizResult{}, fmt.Errorf("the answer %w", err)
	}
	var ans trizAnswer
	if err := json.Unmarshal(raw, &ans); err != nil {
		return TrizResult{}, fmt.Errorf("the answer has a field of the wrong type: %w", err)
	}
	if ans.Contradiction == nil {
		return TrizResult{}, errors.New(`the answer lacks "contradiction": true or false`)
	}
	str := func(p *string) string {
		if p == nil {
			return ""
		}
		return bound(strings.TrimSpace(Redact(*p)), maxTrizField)
	}
	res := TrizResult{Kind: TrizNone, Reason: str(ans.Reason)}
	if !*ans.Contradiction {
		return res, nil
	}
	res.Kind = TrizContradiction
	res.ContradictionType = strings.ToLower(str(ans.ContradictionType))
	res.Principle, res.Suggestion = str(ans.Principle), str(ans.Suggestion)
	switch {
	case res.ContradictionType != ContradictionTechnical && res.ContradictionType != ContradictionPhysical:
		return TrizResult{}, fmt.Errorf(`contradiction_type is %q, not "technical" or "physical"`, bound(res.ContradictionType, 40))
	case utf8.RuneCountInString(res.Reason) < minTrizReason:
		return TrizResult{}, fmt.Errorf("the reason of a contradiction must have at least %d characters", minTrizReason)
	case res.Suggestion == "":
		return TrizResult{}, errors.New("a contradiction needs a suggestion")
	}
	return res, nil
}
