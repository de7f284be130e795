package intake

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/whilly-go/whilly/app"
	"github.com/whilly-go/whilly/plan"
)

// PlanID is the deterministic id of the seq-th intake of an issue: gh/owner/repo/N, then
// gh/owner/repo/N-2, -3 … for later intakes (a reopened issue labelled again). It uses
// only characters that are also safe in git branch names.
func PlanID(ref app.IssueRef, seq int) string {
	id := fmt.Sprintf("gh/%s/%s/%d", ref.Owner, ref.Name, ref.Number)
	if seq > 1 {
		id += "-" + strconv.Itoa(seq)
	}
	for strings.Contains(id, "..") {
		id = strings.ReplaceAll(id, "..", ".-")
	}
	return id
}

// Built is a plan made from an issue, or why none could be.
type Built struct {
	Plan   *plan.Plan // nil when Invalid is set
	Source string     // app.Source…
	Notes  []string   // shown in the status comment
	// Invalid lists the problems of a ```whilly block that is not a valid plan.
	Invalid []string
}

// sections of an issue body that apply to every task made from it.
type sections struct {
	acceptance []string
	tests      []string
	keyFiles   []string
	tasks      []string // unchecked task-list items outside the sections above
	checked    int      // checked items, left out
}

var (
	headingRe = regexp.MustCompile(`^\s{0,3}#{1,6}\s+(.*?)\s*#*\s*$`)
	boldRe    = regexp.MustCompile(`^\s{0,3}\*\*(.+?):?\*\*:?\s*$`)
	itemRe    = regexp.MustCompile(`^\s*(?:[-*+]|\d{1,3}[.)])\s+(?:\[[ xX]\]\s+)?(.+?)\s*$`)
	taskRe    = regexp.MustCompile(`^\s*[-*+]\s+\[( |x|X)\]\s+(.+?)\s*$`)
	fenceRe   = regexp.MustCompile("^\\s{0,3}(```+|~~~+)\\s*([A-Za-z0-9_-]*)")
)

// sectionKind names a heading whose list applies to the tasks: "acceptance", "tests",
// "files", or "" for any other heading.
func sectionKind(title string) string {
	t := strings.ToLower(strings.Trim(strings.TrimSpace(title), ":*_ "))
	switch t {
	case "acceptance criteria", "acceptance", "done when", "definition of done", "success criteria":
		return "acceptance"
	case "test steps", "tests", "testing", "how to test", "verification", "test plan":
		return "tests"
	case "key files", "files", "relevant files":
		return "files"
	}
	return ""
}

// codeFences follows the fenced code blocks of markdown read line by line.
type codeFences struct{ open string } // the opening fence of the block we are in, or ""

// skip reports whether line is a fence or inside a fenced block.
func (c *codeFences) skip(line string) bool {
	if m := fenceRe.FindStringSubmatch(line); m != nil {
		switch {
		case c.open == "":
			c.open = m[1]
		case strings.HasPrefix(m[1], c.open[:1]) && len(m[1]) >= len(c.open):
			c.open = ""
		}
		return true
	}
	return c.open != ""
}

// parseSections reads the markdown body, ignoring fenced code.
func parseSections(body string) sections {
	var s sections
	kind := ""
	var code codeFences
	for _, line := range strings.Split(strings.ReplaceAll(body, "\r\n", "\n"), "\n") {
		if code.skip(line) {
			continue
		}
		if m := headingRe.FindStringSubmatch(line); m != nil {
			kind = sectionKind(m[1])
			continue
		}
		if m := boldRe.FindStringSubmatch(line); m != nil {
			kind = sectionKind(m[1])
			continue
		}
		if kind != "" {
			if m := itemRe.FindStringSubmatch(line); m != nil {
				item := m[1]
				switch kind {
				case "acceptance":
					s.acceptance = append(s.acceptance, item)
				case "tests":
					s.tests = append(s.tests, item)
				case "files":
					s.keyFiles = append(s.keyFiles, strings.Trim(item, "`"))
				}
			}
			continue
		}
		if m := taskRe.FindStringSubmatch(line); m != nil {
			if m[1] != " " {
				s.checked++
				continue
			}
			s.tasks = append(s.tasks, m[2])
		}
	}
	return s
}

// findBlock returns the first fenced code block whose info string is "whilly".
func findBlock(body string) (string, bool) {
	lines := strings.Split(strings.ReplaceAll(body, "\r\n", "\n"), "\n")
	for i := 0; i < len(lines); i++ {
		m := fenceRe.FindStringSubmatch(lines[i])
		if m == nil || !strings.EqualFold(m[2], "whilly") {
			continue
		}
		var b strings.Builder
		for j := i + 1; j < len(lines); j++ {
			if c := fenceRe.FindStringSubmatch(lines[j]); c != nil && c[2] == "" &&
				strings.HasPrefix(c[1], m[1][:1]) && len(c[1]) >= len(m[1]) {
				return b.String(), true
			}
			b.WriteString(lines[j])
			b.WriteByte('\n')
		}
		return b.String(), true // unclosed: the block runs to the end, as in Markdown
	}
	return "", false
}

// IssueText is the part of an issue a plan is made from. It is untrusted: it goes into
// the plan as data, and the agent package fences it in every prompt.
type IssueText struct {
	Ref   app.IssueRef
	Title string
	Body  string
}

// Policy is what a plan made from an issue may ask for.
type Policy struct {
	// MaxAttempts caps every task's attempt limit and is the limit of tasks that name
	// none (WHILLY_MAX_ATTEMPTS); 0 means plan.DefaultMaxAttempts.
	MaxAttempts int
	// Budget caps the plan's budget and is the budget of a plan that names none
	// (WHILLY_GITHUB_BUDGET_USD); 0 means DefaultBudget.
	Budget plan.USD
}

// DefaultBudget is the budget cap of plans from issues when WHILLY_GITHUB_BUDGET_USD is unset.
const DefaultBudget plan.USD = 10 * plan.MicrosPerUSD

func (pol Policy) maxAttempts() int { return cmp.Or(pol.MaxAttempts, plan.DefaultMaxAttempts) }
func (pol Policy) budget() plan.USD { return cmp.Or(pol.Budget, DefaultBudget) }

// apply is the one sanitizer of a plan made from an issue, whatever made it (a block, the
// planner agent, the text), run after parsing so that no key or alias of the codec can
// carry past it what an issue may not set: the plan's id, repository and gate mode are
// whilly's, verify commands (shell run on the workers) and each task's status and worker
// labels are dropped. It then caps the plan's budget and attempt limits, and gives a plan
// without a budget the cap; the notes say what was capped.
func (pol Policy) apply(b *Built, it IssueText, id string) {
	p := b.Plan
	if p == nil {
		return
	}
	p.ID, p.Repo, p.Strict, p.Verify = id, it.Ref.Repo.String(), true, nil
	for i := range p.Tasks {
		p.Tasks[i].Status, p.Tasks[i].Labels = plan.StatusPending, nil
	}
	limit := pol.budget()
	switch {
	case p.Budget == nil:
		p.Budget = &limit
	case *p.Budget > limit:
		b.Notes = append(b.Notes, fmt.Sprintf("The budget of $%s asked for was capped at $%s (WHILLY_GITHUB_BUDGET_USD); `/whilly budget USD` changes it.", p.Budget, limit))
		p.Budget = &limit
	}
	capped := 0
	for i := range p.Tasks {
		if p.Tasks[i].MaxAttempts > pol.maxAttempts() {
			p.Tasks[i].MaxAttempts = pol.maxAttempts()
			capped++
		}
	}
	if capped > 0 {
		b.Notes = append(b.Notes, fmt.Sprintf("The attempt limit of %d task(s) was capped at %d (WHILLY_MAX_ATTEMPTS).", capped, pol.maxAttempts()))
	}
}

// blockIgnored are the fields of a ```whilly block an issue may not set: the plan's id,
// repository, gate mode and verify commands (shell run on the workers), and each task's
// status and worker labels.
var blockIgnored = struct{ plan, task []string }{
	plan: []string{"plan_id", "repo", "strict", "verify"},
	task: []string{"status", "labels"},
}

// restrictBlock removes the fields an issue may not set from a block's JSON and caps
// max_attempts and budget_usd, before the block is validated (max_attempts: 1000 would
// otherwise be an error, not a cap). It returns the block unchanged when it is not a JSON
// object: the parser says what is wrong with it.
func restrictBlock(block string, pol Policy) (string, []string) {
	dec := json.NewDecoder(strings.NewReader(block))
	dec.UseNumber()
	var root map[string]any
	if err := dec.Decode(&root); err != nil || root == nil {
		return block, nil
	}
	var notes []string
	drop := func(obj map[string]any, keys []string) []string {
		var gone []string
		for _, k := range keys {
			if _, ok := obj[k]; ok {
				delete(obj, k)
				gone = append(gone, k)
			}
		}
		return gone
	}
	restricted := slices.Clone(blockIgnored.plan)
	for alias, key := range plan.KeyAliases() {
		if slices.Contains(blockIgnored.plan, key) {
			restricted = append(restricted, alias)
		}
	}
	slices.Sort(restricted[len(blockIgnored.plan):])
	gone := drop(root, restricted)
	if v, ok := root["budget_usd"].(json.Number); ok {
		if f, err := v.Float64(); err == nil && f > pol.budget().Float64() {
			root["budget_usd"] = json.Number(pol.budget().String())
			notes = append(notes, fmt.Sprintf("The plan block's budget_usd of %s was capped at $%s (WHILLY_GITHUB_BUDGET_USD); `/whilly budget USD` changes it.", v, pol.budget()))
		}
	}
	capped := 0
	if tasks, ok := root["tasks"].([]any); ok {
		for _, t := range tasks {
			obj, ok := t.(map[string]any)
			if !ok {
				continue
			}
			for _, k := range drop(obj, blockIgnored.task) {
				if !slices.Contains(gone, k) {
					gone = append(gone, k)
				}
			}
			if v, ok := obj["max_attempts"].(json.Number); ok {
				if f, err := v.Float64(); err == nil && f > float64(pol.maxAttempts()) {
					obj["max_attempts"] = pol.maxAttempts()
					capped++
				}
			}
		}
	}
	if capped > 0 {
		notes = append(notes, fmt.Sprintf("The attempt limit of %d task(s) was capped at %d (WHILLY_MAX_ATTEMPTS).", capped, pol.maxAttempts()))
	}
	if len(gone) > 0 {
		notes = append([]string{fmt.Sprintf("The plan block's %s were ignored: an issue cannot set them (verify commands would run on workers).",
			"`"+strings.Join(gone, "`, `")+"`")}, notes...)
	}
	out, err := json.Marshal(root)
	if err != nil {
		return block, nil
	}
	return string(out), notes
}

// FromBlock builds the plan from a ```whilly JSON block in the body, if there is one.
// The block describes tasks; the issue cannot choose the plan's id, repository or gate
// mode, nor verify commands (shell run on the workers: whoever can edit the issue could
// run anything), nor a task's status or worker labels — those fields are dropped and a
// note says so. Attempt limits and the budget are capped by pol, and a plan without a
// budget gets pol's.
func FromBlock(it IssueText, id string, pol Policy) (Built, bool) {
	block, ok := findBlock(it.Body)
	if !ok {
		return Built{}, false
	}
	b := Built{Source: app.SourceBlock}
	block, b.Notes = restrictBlock(block, pol)
	p, err := plan.ParseWith([]byte(block), plan.ParseOptions{MaxAttempts: pol.maxAttempts()})
	if err != nil {
		var ve *plan.ValidationError
		if errors.As(err, &ve) {
			for _, pr := range ve.Problems {
				b.Invalid = append(b.Invalid, pr.String())
			}
		} else {
			b.Invalid = []string{err.Error()}
		}
		return b, true
	}
	if strings.TrimSpace(p.Name) == "" {
		p.Name = title(it)
	}
	b.Plan = p
	pol.apply(&b, it, id)
	return b, true
}

// FromText builds the plan from the body without a block: its unchecked task-list items
// (each depending on the one before), else the whole issue as one task. Lists under an
// "Acceptance criteria", "Test steps" or "Key files" heading apply to every task.
func FromText(it IssueText, id string) Built {
	s := parseSections(it.Body)
	p := &plan.Plan{ID: id, Name: title(it), Repo: it.Ref.Repo.String(), Strict: true}
	b := Built{Plan: p}
	mk := func(n int, desc string) plan.Task {
		return plan.Task{
			ID: "T" + strconv.Itoa(n), Priority: plan.PriorityMedium, Description: desc,
			AcceptanceCriteria: s.acceptance, TestSteps: s.tests, KeyFiles: s.keyFiles,
			PRDRequirement: it.Ref.String(),
		}
	}
	if len(s.tasks) > 0 {
		b.Source = app.SourceTaskList
		for i, item := range s.tasks {
			t := mk(i+1, item)
			if i > 0 {
				t.Dependencies = []string{"T" + strconv.Itoa(i)}
			}
			p.Tasks = append(p.Tasks, t)
		}
		if s.checked > 0 {
			b.Notes = append(b.Notes, fmt.Sprintf("%d checked task-list item(s) were taken as done and left out.", s.checked))
		}
		return b
	}
	b.Source = app.SourceIssue
	desc := strings.TrimSpace(it.Title)
	if body := strings.TrimSpace(it.Body); body != "" {
		desc += "\n\n" + body
	}
	p.Tasks = []plan.Task{mk(1, desc)}
	return b
}

func title(it IssueText) string {
	if t := strings.TrimSpace(it.Title); t != "" {
		return t
	}
	return it.Ref.String()
}

// Rejected returns, when the gate rejects every task of p, what each task misses, one
// line per task; nil when some task may run.
func Rejected(p *plan.Plan) []string {
	var out []string
	for _, t := range p.Tasks {
		v := plan.Gate(t)
		if v.Decision != plan.DecisionReject {
			return nil
		}
		var why []string
		for _, r := range v.Missing() {
			why = append(why, r.Message)
		}
		out = append(out, fmt.Sprintf("`%s`: %s", t.ID, strings.Join(why, "; ")))
	}
	if len(p.Tasks) == 0 {
		return []string{"the plan has no tasks"}
	}
	return out
}
