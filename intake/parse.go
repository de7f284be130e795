package intake

import (
	"errors"
	"fmt"
	"regexp"
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

// FromBlock builds the plan from a ```whilly JSON block in the body, if there is one.
// The issue cannot choose the plan's id, repository or gate mode, and its verify
// commands are dropped: a verify command is shell run on the workers, and the text of an
// issue must never become that (whoever can edit the issue could run anything). Verify
// commands belong in plans an operator imports. Tasks that name no max_attempts get
// maxAttempts (WHILLY_MAX_ATTEMPTS; 0: plan.DefaultMaxAttempts).
func FromBlock(it IssueText, id string, maxAttempts int) (Built, bool) {
	block, ok := findBlock(it.Body)
	if !ok {
		return Built{}, false
	}
	b := Built{Source: app.SourceBlock}
	p, err := plan.ParseWith([]byte(block), plan.ParseOptions{MaxAttempts: maxAttempts})
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
	if n := len(p.Verify); n > 0 {
		b.Notes = append(b.Notes, fmt.Sprintf("The plan block's %d verify command(s) were ignored: commands from an issue never run on workers.", n))
		p.Verify = nil
	}
	p.ID, p.Repo, p.Strict = id, it.Ref.Repo.String(), true
	if strings.TrimSpace(p.Name) == "" {
		p.Name = title(it)
	}
	b.Plan = p
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
