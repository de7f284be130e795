package plan

import (
	"fmt"
	"math"
	"path"
	"slices"
	"strings"
	"unicode"
)

// Severity grades a preflight finding.
type Severity string

// Severities, from mildest to worst. The values appear in JSON output.
const (
	SeverityInfo    Severity = "info"    // worth a look; the plan can run as it is
	SeverityWarning Severity = "warning" // the plan should be revised before it runs
	SeverityError   Severity = "error"   // some task can never run, or the plan cannot finish
)

// Finding kinds, in the order a Report lists them. They appear in JSON output and may be
// matched by scripts; never rename one.
const (
	FindingWeakTask        = "weak_task"          // a decision-gate reason
	FindingDependencyCycle = "dependency_cycle"   // tasks waiting on each other
	FindingMissingDep      = "missing_dependency" // a dependency on an id the plan lacks
	FindingDuplicateWork   = "duplicate_work"     // descriptions that say the same thing
	FindingSharedKeyFiles  = "shared_key_files"   // parallel tasks editing the same file
	FindingOverEngineering = "over_engineering"   // open-ended ambition, nothing to bound it
)

// Preflight verdicts.
const (
	VerdictApprove = "approve" // no warning or error
	VerdictRevise  = "revise"  // some warning, no error
	VerdictReject  = "reject"  // some error
)

// Finding is one problem Preflight sees in a plan.
type Finding struct {
	Kind     string   `json:"kind"`
	Severity Severity `json:"severity"`
	Tasks    []string `json:"tasks"`           // the tasks concerned, in file order (cycles: in cycle order)
	Code     string   `json:"code,omitempty"`  // weak_task: the gate's reason code
	Files    []string `json:"files,omitempty"` // shared_key_files: the files both tasks list
	Message  string   `json:"message"`
}

// Report is Preflight's answer.
type Report struct {
	PlanID   string    `json:"plan_id"`
	Verdict  string    `json:"verdict"`
	Ideality float64   `json:"ideality"`
	Findings []Finding `json:"findings"` // never nil
}

// Ideality weights: an error costs as much as four warnings, a warning four infos.
const (
	weightError   = 4.0
	weightWarning = 1.0
	weightInfo    = 0.25
)

// duplicatePercent is the share of distinct words two descriptions must have in common
// (Jaccard similarity of their word sets) to count as the same work.
const duplicatePercent = 80

// Preflight is the deterministic plan-level check behind `whilly plan triz`: it looks
// for what makes a plan fail or waste money before any agent runs, without asking one.
//
// Findings, in this order of kinds and, within a kind, in file order:
//
//   - weak_task: every reason the decision gate gives, one finding each. REJECT reasons
//     (short description, no acceptance criteria, no test steps) and destructive commands
//     are warnings; the other WARN reasons (no key files, a very long description) are
//     infos.
//   - dependency_cycle (error): each cycle FindCycles reports.
//   - missing_dependency (error): a dependency on an id that is not in the plan. A plan
//     read from the database has not necessarily been validated, and the claim never
//     hands out such a task.
//   - duplicate_work (warning): a task whose description is the same work as an earlier
//     one's. Descriptions are compared as sets of lower-case words (runs of letters and
//     digits); a Jaccard similarity |A∩B|/|A∪B| of at least 80% makes a duplicate. The
//     first task of a group gathers every later task that matches it and is in no group
//     yet, so a task appears in at most one finding.
//   - shared_key_files (warning): two tasks listing the same key file (compared after
//     path.Clean) with no dependency path between them in either direction, so they may
//     run at the same time and conflict. One finding per pair.
//   - over_engineering (info): a description using open-ended words ("framework",
//     "generic", "future-proof", "scalable", "microservice", "plugin system",
//     "abstraction", a few Russian stems…) on a task without acceptance criteria to bound
//     the work.
//
// Tasks that are DONE, SKIPPED or CANCELLED will not run again, so the task-level
// checks (weak_task, shared_key_files, over_engineering) pass over them, and
// duplicate_work ignores SKIPPED and CANCELLED tasks and pairs of DONE ones. Cycles and
// missing dependencies are structural and checked on every task.
//
// Verdict: reject with any error, revise with any warning, approve otherwise.
//
// Ideality is 1 − (4·errors + 1·warnings + 0.25·infos) / (3·tasks), clamped to [0, 1]
// and rounded to three decimals (an empty plan counts as one task): the Python system's
// formula, its four severities folded into three.
func Preflight(p *Plan) Report {
	if p == nil {
		p = &Plan{}
	}
	var findings []Finding
	findings = append(findings, weakTasks(p.Tasks)...)
	findings = append(findings, cycles(p.Tasks)...)
	findings = append(findings, missingDeps(p.Tasks)...)
	findings = append(findings, duplicates(p.Tasks)...)
	findings = append(findings, sharedKeyFiles(p.Tasks)...)
	findings = append(findings, overEngineering(p.Tasks)...)
	if findings == nil {
		findings = []Finding{}
	}
	return Report{
		PlanID:   p.ID,
		Verdict:  verdict(findings),
		Ideality: ideality(findings, len(p.Tasks)),
		Findings: findings,
	}
}

func verdict(findings []Finding) string {
	v := VerdictApprove
	for _, f := range findings {
		switch f.Severity {
		case SeverityError:
			return VerdictReject
		case SeverityWarning:
			v = VerdictRevise
		case SeverityInfo:
		}
	}
	return v
}

func ideality(findings []Finding, tasks int) float64 {
	var weight float64
	for _, f := range findings {
		switch f.Severity {
		case SeverityError:
			weight += weightError
		case SeverityWarning:
			weight += weightWarning
		case SeverityInfo:
			weight += weightInfo
		}
	}
	x := 1 - weight/(3*float64(max(tasks, 1)))
	x = min(max(x, 0), 1)
	return math.Round(x*1000) / 1000
}

// settled reports whether a task will not run again short of a reset.
func settled(s Status) bool {
	return s == StatusDone || s == StatusSkipped || s == StatusCancelled
}

func weakTasks(tasks []Task) []Finding {
	var out []Finding
	for _, t := range tasks {
		if settled(t.Status) {
			continue
		}
		for _, r := range Gate(t).Reasons {
			sev := SeverityInfo
			if rejects(r.Code) || r.Code == ReasonDestructiveCommand {
				sev = SeverityWarning
			}
			out = append(out, Finding{Kind: FindingWeakTask, Severity: sev, Tasks: []string{t.ID}, Code: r.Code, Message: r.Message})
		}
	}
	return out
}

func cycles(tasks []Task) []Finding {
	var out []Finding
	for _, c := range FindCycles(tasks) {
		out = append(out, Finding{
			Kind:     FindingDependencyCycle,
			Severity: SeverityError,
			Tasks:    slices.Clone(c[:len(c)-1]),
			Message:  fmt.Sprintf("dependency cycle %s: none of these tasks can ever start; remove one of the dependencies", FormatCycle(c)),
		})
	}
	return out
}

func missingDeps(tasks []Task) []Finding {
	ids := make(map[string]bool, len(tasks))
	for _, t := range tasks {
		ids[t.ID] = true
	}
	var out []Finding
	for _, t := range tasks {
		reported := map[string]bool{}
		for _, d := range t.Dependencies {
			if ids[d] || reported[d] {
				continue
			}
			reported[d] = true
			out = append(out, Finding{
				Kind:     FindingMissingDep,
				Severity: SeverityError,
				Tasks:    []string{t.ID},
				Message:  fmt.Sprintf("depends on %q, which is not a task of this plan: it can never start", d),
			})
		}
	}
	return out
}

// wordsOf splits s into lower-case words (runs of letters and digits), in text order.
func wordsOf(s string) []string {
	return strings.FieldsFunc(strings.ToLower(s), func(r rune) bool {
		return !unicode.IsLetter(r) && !unicode.IsDigit(r)
	})
}

// wordSet returns the distinct words of s as sorted numbers from dict, which it extends,
// so that comparing two sets compares integers.
func wordSet(s string, dict map[string]int) []int {
	var set []int
	for _, w := range wordsOf(s) {
		n, ok := dict[w]
		if !ok {
			n = len(dict)
			dict[w] = n
		}
		set = append(set, n)
	}
	slices.Sort(set)
	return slices.Compact(set)
}

// similar reports whether two sorted word sets overlap by at least duplicatePercent, and
// how much, in whole percent rounded down. Integer arithmetic keeps it exact: 4 shared
// words of 5 is 80% and matches.
func similar(a, b []int) (bool, int) {
	if len(a) == 0 || len(b) == 0 {
		return false, 0 // blank descriptions are the gate's business
	}
	// |A∩B| ≤ min and |A∪B| ≥ max, so sets of very different sizes cannot match.
	if min(len(a), len(b))*100 < max(len(a), len(b))*duplicatePercent {
		return false, 0
	}
	inter := 0
	for i, j := 0, 0; i < len(a) && j < len(b); {
		switch {
		case a[i] == b[j]:
			inter++
			i++
			j++
		case a[i] < b[j]:
			i++
		default:
			j++
		}
	}
	union := len(a) + len(b) - inter
	return inter*100 >= union*duplicatePercent, inter * 100 / union
}

func duplicates(tasks []Task) []Finding {
	dict := map[string]int{}
	sets := make([][]int, len(tasks))
	for i, t := range tasks {
		if t.Status != StatusSkipped && t.Status != StatusCancelled {
			sets[i] = wordSet(t.Description, dict)
		}
	}
	grouped := make([]bool, len(tasks))
	var out []Finding
	for i, t := range tasks {
		if grouped[i] || len(sets[i]) == 0 {
			continue
		}
		ids := []string{t.ID}
		var parts []string
		for j := i + 1; j < len(tasks); j++ {
			if grouped[j] || (t.Status == StatusDone && tasks[j].Status == StatusDone) {
				continue
			}
			ok, pct := similar(sets[i], sets[j])
			if !ok {
				continue
			}
			grouped[j] = true
			ids = append(ids, tasks[j].ID)
			how := "same words"
			if pct < 100 {
				how = fmt.Sprintf("%d%% of words shared", pct)
			}
			parts = append(parts, fmt.Sprintf("%s (%s)", tasks[j].ID, how))
		}
		if len(parts) == 0 {
			continue
		}
		n := len(parts)
		advice := fmt.Sprintf("merge %s into %s or remove %[1]s", plural(n, "it", "them"), t.ID)
		if t.Status == StatusDone {
			advice = fmt.Sprintf("%s is already done: remove %s", t.ID, plural(n, "it", "them"))
		}
		out = append(out, Finding{
			Kind:     FindingDuplicateWork,
			Severity: SeverityWarning,
			Tasks:    ids,
			Message: fmt.Sprintf("%s describe%s the same work as %s; %s",
				strings.Join(parts, ", "), plural(n, "s", ""), t.ID, advice),
		})
	}
	return out
}

func plural(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}

func sharedKeyFiles(tasks []Task) []Finding {
	files := make([][]string, len(tasks)) // cleaned, distinct, in listed order
	byFile := map[string][]int{}          // file → indices of the live tasks listing it, ascending
	for i, t := range tasks {
		if settled(t.Status) {
			continue
		}
		for _, f := range t.KeyFiles {
			f = strings.TrimSpace(f)
			if f == "" {
				continue
			}
			f = path.Clean(f)
			if slices.Contains(files[i], f) {
				continue
			}
			files[i] = append(files[i], f)
			byFile[f] = append(byFile[f], i)
		}
	}
	reach := newReacher(tasks)
	var out []Finding
	for i := range tasks {
		var partners []int
		for _, f := range files[i] {
			for _, j := range byFile[f] {
				if j > i {
					partners = append(partners, j)
				}
			}
		}
		slices.Sort(partners)
		for _, j := range slices.Compact(partners) {
			if reach.reaches(i, j) || reach.reaches(j, i) {
				continue
			}
			var shared []string
			for _, f := range files[i] {
				if slices.Contains(files[j], f) {
					shared = append(shared, f)
				}
			}
			out = append(out, Finding{
				Kind:     FindingSharedKeyFiles,
				Severity: SeverityWarning,
				Tasks:    []string{tasks[i].ID, tasks[j].ID},
				Files:    shared,
				Message: fmt.Sprintf("%s and %s both list %s and neither depends on the other, so they may run at the same time and conflict: add a dependency or merge them",
					tasks[i].ID, tasks[j].ID, strings.Join(shared, ", ")),
			})
		}
	}
	return out
}

// reacher answers "does task i depend on task j, directly or not", computing each
// task's transitive dependencies once, on first use, as a bit set.
type reacher struct {
	g    graph
	sets [][]uint64
}

func newReacher(tasks []Task) *reacher {
	return &reacher{g: newGraph(tasks), sets: make([][]uint64, len(tasks))}
}

func (r *reacher) reaches(i, j int) bool {
	if r.sets[i] == nil {
		set := make([]uint64, (len(r.g.deps)+63)/64)
		stack := slices.Clone(r.g.deps[i])
		for len(stack) > 0 {
			v := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if set[v/64]&(1<<(v%64)) != 0 {
				continue
			}
			set[v/64] |= 1 << (v % 64)
			stack = append(stack, r.g.deps[v]...)
		}
		r.sets[i] = set
	}
	return r.sets[i][j/64]&(1<<(j%64)) != 0
}

// overEngineeringTerms are matched at the start of a word of the lower-cased description,
// so "framework" also finds "frameworks". The Python system matched Russian stems too;
// these are ours.
var overEngineeringTerms = []string{
	"framework", "generic", "future proof", "futureproof", "scalable", "microservice",
	"plugin system", "plugin architecture", "pluggable", "abstraction", "extensible",
	"фреймворк", "универсальн", "масштабируем", "абстракц",
}

func overEngineering(tasks []Task) []Finding {
	var out []Finding
	for _, t := range tasks {
		if settled(t.Status) || !blank(t.AcceptanceCriteria) {
			continue
		}
		// Words in text order, separated and surrounded by one space, so a term can be
		// matched at a word start.
		text := " " + strings.Join(wordsOf(t.Description), " ") + " "
		var hits []string
		for _, term := range overEngineeringTerms {
			if strings.Contains(text, " "+term) {
				hits = append(hits, fmt.Sprintf("%q", term))
			}
		}
		if len(hits) == 0 {
			continue
		}
		out = append(out, Finding{
			Kind:     FindingOverEngineering,
			Severity: SeverityInfo,
			Tasks:    []string{t.ID},
			Message: fmt.Sprintf("the description says %s but no acceptance criteria bound the work: say what done looks like, or the agent may build more than needed",
				strings.Join(hits, ", ")),
		})
	}
	return out
}
