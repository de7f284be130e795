package plan

import (
	"fmt"
	"regexp"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"
)

// Decision is the decision gate's verdict on a task.
type Decision string

// Gate decisions, from best to worst.
const (
	DecisionAllow  Decision = "ALLOW"
	DecisionWarn   Decision = "WARN"
	DecisionReject Decision = "REJECT"
)

// Reason codes. They are persisted in event details and read by clients; never rename one.
const (
	ReasonDescriptionTooShort  = "description_too_short"  // REJECT
	ReasonNoAcceptanceCriteria = "no_acceptance_criteria" // REJECT
	ReasonNoTestSteps          = "no_test_steps"          // REJECT
	ReasonNoKeyFiles           = "no_key_files"           // WARN
	ReasonDestructiveCommand   = "destructive_command"    // WARN
	ReasonDescriptionTooLong   = "description_too_long"   // WARN
)

// Gate thresholds, in characters (runes) of the description.
const (
	MinDescriptionChars = 20
	MaxDescriptionChars = 8000
)

// Reason is one finding of the gate.
type Reason struct {
	Code    string `json:"code"`
	Message string `json:"message"`
}

// Verdict is the gate's decision with every reason behind it, in rule order.
type Verdict struct {
	Decision Decision `json:"decision"`
	Reasons  []Reason `json:"reasons"`
}

// Missing returns the reasons that make the verdict a REJECT (what a task must gain to
// run), in rule order; the intake comment lists them.
func (v Verdict) Missing() []Reason {
	var out []Reason
	for _, r := range v.Reasons {
		if rejects(r.Code) {
			out = append(out, r)
		}
	}
	return out
}

func rejects(code string) bool {
	switch code {
	case ReasonDescriptionTooShort, ReasonNoAcceptanceCriteria, ReasonNoTestSteps:
		return true
	}
	return false
}

// Gate checks a task before an agent spends money on it. Every rule runs, in a fixed
// order, and adds its reason: REJECT when the trimmed description is shorter than 20
// characters or there are no acceptance criteria or no test steps (blank entries do not
// count); WARN when there are no key files, when the description, the criteria or the
// test steps contain a destructive command (rm -rf /, git push --force, curl … | sh,
// mkfs, dd onto a device, DROP DATABASE …), or when the description is longer than
// 8,000 characters; ALLOW otherwise. Reasons is never nil.
func Gate(t Task) Verdict {
	reasons := []Reason{}
	add := func(code, format string, args ...any) {
		reasons = append(reasons, Reason{Code: code, Message: fmt.Sprintf(format, args...)})
	}
	if n := utf8.RuneCountInString(strings.TrimSpace(t.Description)); n < MinDescriptionChars {
		add(ReasonDescriptionTooShort, "description has %d characters; at least %d are needed to say what to do", n, MinDescriptionChars)
	}
	if blank(t.AcceptanceCriteria) {
		add(ReasonNoAcceptanceCriteria, "no acceptance criteria: say how to tell the task is done")
	}
	if blank(t.TestSteps) {
		add(ReasonNoTestSteps, "no test steps: say how to check the work")
	}
	if blank(t.KeyFiles) {
		add(ReasonNoKeyFiles, "no key files: the agent must search the repository for where to work")
	}
	for _, f := range findDestructive(t) {
		add(ReasonDestructiveCommand, "%s contains a destructive command: %q", f.where, f.text)
	}
	if n := utf8.RuneCountInString(t.Description); n > MaxDescriptionChars {
		add(ReasonDescriptionTooLong, "description has %d characters, more than %d; split the task", n, MaxDescriptionChars)
	}
	v := Verdict{Decision: DecisionAllow, Reasons: reasons}
	for _, r := range reasons {
		if rejects(r.Code) {
			v.Decision = DecisionReject
			break
		}
		v.Decision = DecisionWarn
	}
	return v
}

// blank reports whether a list has no entry with any non-space text.
func blank(list []string) bool {
	for _, s := range list {
		if strings.TrimSpace(s) != "" {
			return false
		}
	}
	return true
}

// destructive lists the commands the gate warns about. Each pattern stops at a shell
// separator (newline ; & |) unless the pipe is the point, so "curl x; ls | sh" is not a
// piped download. Patterns are deliberately narrow: rm -rf on a build directory, or dd
// onto /dev/null, is ordinary work.
// Each pattern has hints, words one of which must appear (in lower case) before the
// regexp runs at all: most text holds none, and the gate runs on every imported task.
// They are compiled on first use: every start of the worker's binary (which is also its
// sandbox's init) would pay for them, and only imports use them.
var destructive = sync.OnceValue(func() []destructiveCommand {
	return []destructiveCommand{
		// rm with a recursive flag, on /, /*, ~, ~/, ~/* or *.
		{hints: []string{"rm"}, re: regexp.MustCompile(`\brm(?:\s+-{1,2}[A-Za-z-]+)*\s+(?:-[A-Za-z]*[rR][A-Za-z]*|--recursive)(?:\s+-{1,2}[A-Za-z-]+)*\s+(?:/\*?|~/?\*?|\*)(?:$|[\s;&|)'"` + "`" + `])`)},
		// git push with --force or a short flag cluster holding f; --force-with-lease is the
		// safe form and passes.
		{hints: []string{"push"}, re: regexp.MustCompile(`\bgit\s+push\b[^\n;&|]*?\s(?:--force|-[A-Za-z]*f[A-Za-z]*)(?:$|[\s;&|])`)},
		// a download piped into a shell.
		{hints: []string{"curl", "wget"}, re: regexp.MustCompile(`\b(?:curl|wget)\b[^\n;&|]*\|\s*(?:sudo\s+(?:-\S+\s+)*)?(?:ba|z|k|da|fi)?sh\b`)},
		{hints: []string{"mkfs"}, re: regexp.MustCompile(`\bmkfs(?:\.[A-Za-z0-9]+)?\b`)},
		// dd writing to a device, unless it is a pseudo-device.
		{
			hints: []string{"dd"},
			re:    regexp.MustCompile(`\bdd\b[^\n;&|]*\bof=/dev/(\S+)`),
			harmless: func(m []string) bool {
				for _, p := range []string{"null", "zero", "stdout", "stderr", "fd/", "tty"} {
					if strings.HasPrefix(m[1], p) {
						return true
					}
				}
				return false
			},
		},
		{hints: []string{"drop"}, re: regexp.MustCompile(`(?i)\bdrop\s+database\b`)},
	}
})

type destructiveCommand struct {
	hints    []string
	re       *regexp.Regexp
	harmless func(match []string) bool // nil: every match counts
}

type finding struct{ where, text string }

// maxQuoted bounds how much of a matched command a reason quotes.
const maxQuoted = 120

// findDestructive returns the distinct destructive commands in the task's description,
// acceptance criteria and test steps, in that order, each with where it was first seen.
func findDestructive(t Task) []finding {
	type field struct {
		where string
		text  string
	}
	fields := []field{{"description", t.Description}}
	for i, s := range t.AcceptanceCriteria {
		fields = append(fields, field{fmt.Sprintf("acceptance criterion %d", i+1), s})
	}
	for i, s := range t.TestSteps {
		fields = append(fields, field{fmt.Sprintf("test step %d", i+1), s})
	}
	var out []finding
	seen := make(map[string]bool)
	for _, f := range fields {
		lower := strings.ToLower(f.text)
		for _, d := range destructive() {
			if !slices.ContainsFunc(d.hints, func(h string) bool { return strings.Contains(lower, h) }) {
				continue
			}
			for _, sub := range d.re.FindAllStringSubmatch(f.text, -1) {
				if d.harmless != nil && d.harmless(sub) {
					continue
				}
				m := strings.TrimRight(strings.TrimSpace(sub[0]), ";&|)'\"`")
				if seen[m] {
					continue
				}
				seen[m] = true
				out = append(out, finding{f.where, truncate(m, maxQuoted)})
			}
		}
	}
	return out
}

func truncate(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	r := []rune(s)
	return string(r[:n]) + "…"
}
