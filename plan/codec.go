package plan

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"unicode/utf8"
)

// MaxIDLength is the longest plan or task id, in bytes (ids are ASCII).
const MaxIDLength = 200

// maxSlugLength is the longest id Slug makes.
const maxSlugLength = 64

// Problem is one thing wrong with a plan.
type Problem struct {
	Task    string `json:"task,omitempty"`  // the task's id; "" at plan level or when the id itself is bad
	Index   int    `json:"index"`           // the task's position in the list, from 0; -1 at plan level
	Field   string `json:"field,omitempty"` // the plan-file key, e.g. "priority"; "" for the whole entry
	Message string `json:"message"`
}

// String renders the problem as one line: `task "AUTH-1": field "priority": must be one of
// critical, high, medium, low`. A task without a usable id is named by its position
// counted from 1 (`task #3: ...`); plan-level problems have no task part.
func (p Problem) String() string {
	var b strings.Builder
	switch {
	case p.Task != "":
		fmt.Fprintf(&b, "task %q: ", p.Task)
	case p.Index >= 0:
		fmt.Fprintf(&b, "task #%d: ", p.Index+1)
	}
	if p.Field != "" {
		fmt.Fprintf(&b, "field %q: ", p.Field)
	}
	b.WriteString(p.Message)
	return b.String()
}

// ValidationError lists every problem found in a plan, plan-level ones first, then by
// task and field in file order. Parse and Validate never return one without problems.
type ValidationError struct {
	Problems []Problem `json:"problems"`
}

// Error gives one line per problem.
func (e *ValidationError) Error() string {
	lines := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		lines[i] = p.String()
	}
	return strings.Join(lines, "\n")
}

// Slug turns a project name into a plan id: lower case, every run of characters other
// than a-z and 0-9 replaced by one "-", no leading or trailing "-", at most 64
// characters, and "plan" when nothing is left.
func Slug(s string) string {
	var b strings.Builder
	gap := false
	for _, r := range strings.ToLower(s) {
		if ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') {
			if gap && b.Len() > 0 {
				if b.Len()+2 > maxSlugLength {
					break
				}
				b.WriteByte('-')
			}
			if b.Len() >= maxSlugLength {
				break
			}
			gap = false
			b.WriteRune(r)
			continue
		}
		gap = true
	}
	if b.Len() == 0 {
		return "plan"
	}
	return b.String()
}

// checkID returns why id is not a valid plan or task id, or "" when it is one. Ids end
// up in URLs, branch names and file paths, hence the narrow alphabet and no "..".
func checkID(id string) string {
	switch {
	case id == "":
		return "is required"
	case len(id) > MaxIDLength:
		return fmt.Sprintf("must be at most %d characters", MaxIDLength)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z') || ('0' <= c && c <= '9') || strings.IndexByte("._:/-", c) >= 0 {
			continue
		}
		r := []rune(id[i:])[0]
		return fmt.Sprintf("contains %q; use only letters, digits and . _ : / -", r)
	}
	if strings.Contains(id, "..") {
		return `must not contain ".."`
	}
	return ""
}

// quoteID puts the offending id in front of checkID's reason, so the message shows what
// to fix: "a..b" must not contain "..".
func quoteID(id, msg string) string {
	if id == "" || len(id) > MaxIDLength {
		return msg
	}
	return fmt.Sprintf("%q %s", id, msg)
}

// textProblem says why s cannot be stored as text, or "": a NUL byte (Postgres text
// refuses it) or bytes that are not UTF-8 (they would be silently rewritten).
func textProblem(s string) string {
	switch {
	case strings.IndexByte(s, 0) >= 0:
		return `must not contain a NUL byte (\u0000)`
	case !utf8.ValidString(s):
		return "must be valid UTF-8"
	}
	return ""
}

// repoPattern is GitHub's owner/name shape.
var repoPattern = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`^[A-Za-z0-9](?:[A-Za-z0-9-]{0,38})/[A-Za-z0-9._-]{1,100}$`)
})

func validRepo(s string) bool {
	_, name, _ := strings.Cut(s, "/")
	return repoPattern().MatchString(s) && name != "." && name != ".."
}

// Normalize fills in what a plan file may leave out and canonicalises case, as Parse
// does: the plan id defaults to Slug(Name); a task's status defaults to PENDING and is
// upper-cased, its priority lower-cased, a zero MaxAttempts becomes DefaultMaxAttempts,
// and nil lists become empty ones (so a store writes '{}', never NULL). Call it on plans
// built in code, then Validate.
func Normalize(p *Plan) {
	if p.ID == "" {
		p.ID = Slug(p.Name)
	}
	for i := range p.Tasks {
		t := &p.Tasks[i]
		t.Status = Status(asciiUpper(string(t.Status)))
		if t.Status == "" {
			t.Status = StatusPending
		}
		t.Priority = Priority(asciiLower(string(t.Priority)))
		if t.MaxAttempts == 0 {
			t.MaxAttempts = DefaultMaxAttempts
		}
		for _, l := range []*[]string{&t.Dependencies, &t.KeyFiles, &t.AcceptanceCriteria, &t.TestSteps, &t.Labels} {
			if *l == nil {
				*l = []string{}
			}
		}
	}
}

// Validate checks a plan the way Parse checks a plan file, so a plan built in code (by
// the planner agent, by GitHub intake) obeys the same rules: a project name, valid and
// unique ids, known statuses and priorities, max_attempts in 1..100, a non-negative
// budget, an owner/name repo, complete verify commands, dependencies that exist and no
// cycles. It expects canonical case (see Normalize). It returns nil or a
// *ValidationError listing every problem.
func Validate(p *Plan) error {
	return newValidationError(p, nil)
}

// fieldKey names one field of one entry; index -1 is the plan itself.
type fieldKey struct {
	index int
	field string
}

func newValidationError(p *Plan, decoded *decoder) error {
	var problems []Problem
	skip := map[fieldKey]bool{}
	if decoded != nil {
		problems, skip = decoded.problems, decoded.bad
	}
	problems = append(problems, validate(p, skip)...)
	if len(problems) == 0 {
		return nil
	}
	names := taskNames(p.Tasks, skip)
	for i := range problems {
		if problems[i].Index >= 0 && problems[i].Index < len(names) {
			problems[i].Task = names[problems[i].Index]
		}
	}
	slices.SortStableFunc(problems, func(a, b Problem) int {
		if a.Index != b.Index {
			return a.Index - b.Index
		}
		return fieldRank(a.Field) - fieldRank(b.Field)
	})
	return &ValidationError{Problems: problems}
}

// taskNames returns the id that names each task in problems: its own when valid and
// first in the file, "" otherwise (such tasks are named by position).
func taskNames(tasks []Task, skip map[fieldKey]bool) []string {
	names := make([]string, len(tasks))
	seen := make(map[string]bool, len(tasks))
	for i, t := range tasks {
		if skip[fieldKey{i, ""}] || skip[fieldKey{i, "id"}] || checkID(t.ID) != "" || seen[t.ID] {
			continue
		}
		seen[t.ID] = true
		names[i] = t.ID
	}
	return names
}

// fieldRank orders problems by where their key sits in a plan file.
func fieldRank(f string) int {
	order := [...]string{
		"", "plan_id", "project", "budget_usd", "strict", "repo", "verify", "tasks",
		"id", "status", "priority", "description", "dependencies", "key_files",
		"acceptance_criteria", "test_steps", "prd_requirement", "max_attempts", "labels",
	}
	if i := slices.Index(order[:], f); i >= 0 {
		return i
	}
	return len(order)
}

func validate(p *Plan, skip map[fieldKey]bool) []Problem {
	var out []Problem
	add := func(index int, field, format string, args ...any) {
		if !skip[fieldKey{index, field}] {
			out = append(out, Problem{Index: index, Field: field, Message: fmt.Sprintf(format, args...)})
		}
	}
	if strings.TrimSpace(p.Name) == "" {
		add(-1, "project", "is required")
	}
	if msg := checkID(p.ID); msg != "" {
		add(-1, "plan_id", "%s", quoteID(p.ID, msg))
	}
	if msg := textProblem(p.Name); msg != "" {
		add(-1, "project", "%s", msg)
	}
	if msg := textProblem(p.Repo); msg != "" {
		add(-1, "repo", "%s", msg)
	}
	if p.Budget != nil && *p.Budget < 0 {
		add(-1, "budget_usd", "must not be negative")
	}
	if p.Repo != "" && !validRepo(p.Repo) {
		add(-1, "repo", `must be "owner/name", got %q`, p.Repo)
	}
	for i, v := range p.Verify {
		if msg := cmp.Or(textProblem(v.Name), textProblem(v.Command)); msg != "" {
			add(-1, "verify", "entry %d: %s", i+1, msg)
		}
		if strings.TrimSpace(v.Name) == "" {
			add(-1, "verify", "entry %d: name is required", i+1)
		}
		if strings.TrimSpace(v.Command) == "" {
			add(-1, "verify", "entry %d: command is required", i+1)
		}
	}

	first := make(map[string]int, len(p.Tasks))
	for i, t := range p.Tasks {
		if _, ok := first[t.ID]; !ok && !skip[fieldKey{i, ""}] && !skip[fieldKey{i, "id"}] {
			first[t.ID] = i
		}
	}
	for i, t := range p.Tasks {
		if skip[fieldKey{i, ""}] {
			continue
		}
		if msg := checkID(t.ID); msg != "" {
			add(i, "id", "%s", quoteID(t.ID, msg))
		} else if j := first[t.ID]; j != i {
			add(i, "id", "duplicate id %q, first used by task #%d", t.ID, j+1)
		}
		switch {
		case t.Status == "":
			add(i, "status", "is required")
		case !t.Status.Valid():
			add(i, "status", "must be one of %s", statusList)
		}
		switch {
		case t.Priority == "":
			add(i, "priority", "is required")
		case !t.Priority.Valid():
			add(i, "priority", "must be one of %s", priorityList)
		}
		if t.MaxAttempts < 1 || t.MaxAttempts > MaxMaxAttempts {
			add(i, "max_attempts", "must be between 1 and %d", MaxMaxAttempts)
		}
		for _, f := range []struct {
			field string
			vals  []string
		}{{"description", []string{t.Description}}, {"dependencies", t.Dependencies}, {"key_files", t.KeyFiles},
			{"acceptance_criteria", t.AcceptanceCriteria}, {"test_steps", t.TestSteps},
			{"prd_requirement", []string{t.PRDRequirement}}, {"labels", t.Labels}} {
			for _, v := range f.vals {
				if msg := textProblem(v); msg != "" {
					add(i, f.field, "%s", msg)
					break
				}
			}
		}
		reported := map[string]bool{}
		for _, d := range t.Dependencies {
			if _, ok := first[d]; !ok && !reported[d] {
				reported[d] = true
				add(i, "dependencies", "unknown task %q", d)
			}
		}
	}
	for _, c := range findCycles(p.Tasks) {
		add(c.start, "dependencies", "cycle %s", FormatCycle(c.ids))
	}
	return out
}

// Parse reads a plan file (the Python system's tasks.json). Unknown keys are
// ignored; wrong JSON types, missing or invalid fields, unknown dependencies and cycles
// are all collected into one *ValidationError. Amounts are read exactly, never through a
// float. The result is normalised (see Normalize) and valid (see Validate).
func Parse(data []byte) (*Plan, error) { return ParseWith(data, ParseOptions{}) }

// ParseOptions are what a reader of plan files may set.
type ParseOptions struct {
	// MaxAttempts is the attempt limit of tasks that name none (WHILLY_MAX_ATTEMPTS);
	// 0 means DefaultMaxAttempts.
	MaxAttempts int
}

// ParseWith is Parse with options.
func ParseWith(data []byte, o ParseOptions) (*Plan, error) {
	root, problem := decodeJSON(data)
	if problem != "" {
		return nil, &ValidationError{Problems: []Problem{{Index: -1, Message: problem}}}
	}
	d := &decoder{bad: map[fieldKey]bool{}, maxAttempts: cmp.Or(o.MaxAttempts, DefaultMaxAttempts)}
	for _, pr := range scanRaw(data) {
		d.fail(pr.Index, pr.Field, "%s", pr.Message)
	}
	p := d.plan(root)
	p.Notes = d.notes
	if err := newValidationError(p, d); err != nil {
		return nil, err
	}
	return p, nil
}

// decodeJSON decodes data as one JSON object with numbers kept as text, or says
// what is wrong with it.
func decodeJSON(data []byte) (map[string]any, string) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	var root any
	if err := dec.Decode(&root); err != nil {
		return nil, jsonProblem(data, err)
	}
	obj, ok := root.(map[string]any)
	if !ok {
		return nil, fmt.Sprintf("a plan file must be a JSON object, not %s", jsonType(root))
	}
	end := dec.InputOffset()
	var extra any
	switch err := dec.Decode(&extra); {
	case errors.Is(err, io.EOF):
		return obj, ""
	case err != nil:
		return nil, jsonProblem(data, err)
	default:
		for end < int64(len(data)) && strings.IndexByte(" \t\r\n", data[end]) >= 0 {
			end++
		}
		line, col := position(data, end)
		return nil, fmt.Sprintf("invalid JSON at line %d, column %d: unexpected data after the plan object", line, col)
	}
}

func jsonProblem(data []byte, err error) string {
	var syntax *json.SyntaxError
	switch {
	case errors.Is(err, io.EOF) && len(bytes.TrimSpace(data)) == 0:
		return "the plan file is empty"
	case errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		line, col := position(data, int64(len(data)))
		return fmt.Sprintf("invalid JSON at line %d, column %d: unexpected end of input", line, col)
	case errors.As(err, &syntax):
		// Offset counts the bytes read, the offending one included.
		line, col := position(data, max(syntax.Offset-1, 0))
		return fmt.Sprintf("invalid JSON at line %d, column %d: %s", line, col, syntax.Error())
	default:
		return fmt.Sprintf("invalid JSON: %v", err)
	}
}

// position turns a byte offset into a 1-based line and column (in characters).
func position(data []byte, offset int64) (line, col int) {
	offset = min(offset, int64(len(data)))
	before := data[:offset]
	line = bytes.Count(before, []byte("\n")) + 1
	lineStart := bytes.LastIndexByte(before, '\n') + 1
	return line, len([]rune(string(before[lineStart:]))) + 1
}

func jsonType(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case string:
		return "a string"
	case json.Number:
		return "a number"
	case bool:
		return "a boolean"
	case []any:
		return "an array"
	case map[string]any:
		return "an object"
	}
	return fmt.Sprintf("%T", v)
}

// decoder turns a decoded plan file into a Plan, noting type problems; bad marks the
// fields it already reported so validation does not report them twice.
type decoder struct {
	problems    []Problem
	bad         map[fieldKey]bool
	maxAttempts int      // of tasks that name none
	notes       []string // what was read past, and why
}

func (d *decoder) fail(index int, field, format string, args ...any) {
	d.problems = append(d.problems, Problem{Index: index, Field: field, Message: fmt.Sprintf(format, args...)})
	d.bad[fieldKey{index, field}] = true
}

// str reads an optional string; a missing key or null gives "" and false.
func (d *decoder) str(obj map[string]any, index int, field string) (string, bool) {
	v, ok := obj[field]
	if !ok || v == nil {
		return "", false
	}
	s, ok := v.(string)
	if !ok {
		d.fail(index, field, "must be a string, not %s", jsonType(v))
		return "", false
	}
	return s, true
}

// stringList reads an optional list of strings; a missing key or null gives an empty list.
func (d *decoder) stringList(obj map[string]any, index int, field string) []string {
	out := []string{}
	v, ok := obj[field]
	if !ok || v == nil {
		return out
	}
	list, ok := v.([]any)
	if !ok {
		d.fail(index, field, "must be an array of strings, not %s", jsonType(v))
		return out
	}
	for k, e := range list {
		s, ok := e.(string)
		if !ok {
			d.fail(index, field, "element %d must be a string, not %s", k+1, jsonType(e))
			return []string{}
		}
		out = append(out, s)
	}
	return out
}

func (d *decoder) plan(obj map[string]any) *Plan {
	p := &Plan{}
	if v, ok := obj["project"]; !ok || v == nil {
		d.fail(-1, "project", "is required")
	} else {
		p.Name, _ = d.str(obj, -1, "project")
	}
	if id, ok := d.str(obj, -1, "plan_id"); ok {
		p.ID = id
	} else if !d.bad[fieldKey{-1, "plan_id"}] {
		p.ID = Slug(p.Name)
	}
	switch v := obj["budget_usd"].(type) {
	case nil:
	case json.Number:
		if u, err := parseDecimal(v.String()); err != nil {
			d.fail(-1, "budget_usd", "%s %v", v, err)
		} else {
			p.Budget = &u
		}
	default:
		d.fail(-1, "budget_usd", "must be a number, not %s", jsonType(v))
	}
	switch v := obj["strict"].(type) {
	case nil:
	case bool:
		p.Strict = v
	default:
		d.fail(-1, "strict", "must be true or false, not %s", jsonType(v))
	}
	p.Repo, _ = d.str(obj, -1, "repo")
	d.checkKeys(obj, -1, "", planKeys, ignoredKeys)
	p.Verify = d.verify(d.aliased(obj, "verify"))
	p.Origin = d.kept(obj, "origin", "an object", func(v any) bool { _, ok := v.(map[string]any); return ok })
	p.RepoTargets = d.kept(obj, "repo_targets", "a list of objects", func(v any) bool {
		list, ok := v.([]any)
		for _, e := range list {
			if _, obj := e.(map[string]any); !obj {
				return false
			}
		}
		return ok
	})

	switch v := obj["tasks"].(type) {
	case nil:
		d.fail(-1, "tasks", "is required")
	case []any:
		p.Tasks = make([]Task, len(v))
		for i, e := range v {
			p.Tasks[i] = d.task(i, e)
		}
	default:
		d.fail(-1, "tasks", "must be an array, not %s", jsonType(v))
	}
	return p
}

// kept is the plan-level key of the Python system's that whilly keeps for the export
// (keptKeys), as JSON, when its value is what, else a problem. Nil when it is absent or null.
func (d *decoder) kept(obj map[string]any, key, what string, is func(any) bool) json.RawMessage {
	v := obj[key]
	if v == nil {
		return nil
	}
	if !is(v) {
		d.fail(-1, key, "must be %s, not %s", what, jsonType(v))
		return nil
	}
	raw, err := json.Marshal(v)
	if err != nil {
		d.fail(-1, key, "%v", err)
		return nil
	}
	return raw
}

// aliased is obj[key], or the value of the Python system's name for key (pythonKeys),
// with a note; both at once is an error.
func (d *decoder) aliased(obj map[string]any, key string) any {
	v := obj[key]
	for _, alias := range slices.Sorted(maps.Keys(pythonKeys)) {
		py, ok := obj[alias]
		if !ok || pythonKeys[alias] != key {
			continue
		}
		if v != nil {
			d.fail(-1, key, `give %q or the Python system's %q, not both`, key, alias)
			continue
		}
		v = py
		d.notes = append(d.notes, fmt.Sprintf("the plan: key %q read as %q", alias, key))
	}
	return v
}

// verify reads the verify list and checks it whole, entry by entry, so its problems
// come out in entry order; validation then leaves it alone.
func (d *decoder) verify(v any) []Verify {
	if v == nil {
		return nil
	}
	list, ok := v.([]any)
	if !ok {
		d.fail(-1, "verify", "must be an array, not %s", jsonType(v))
		return nil
	}
	fail := func(i int, format string, args ...any) {
		d.fail(-1, "verify", "entry %d%s", i+1, fmt.Sprintf(format, args...))
	}
	out := make([]Verify, 0, len(list))
	for i, e := range list {
		obj, ok := e.(map[string]any)
		if !ok {
			fail(i, " must be an object, not %s", jsonType(e))
			continue
		}
		for k := range obj {
			if !slices.Contains(verifyKeys, k) && ignoredVerifyKeys[k] == "" {
				fail(i, ": %s", unknownKey(k, verifyKeys))
			}
		}
		entry := Verify{Required: true}
		for _, f := range []struct {
			key string
			dst *string
		}{{"name", &entry.Name}, {"command", &entry.Command}} {
			switch s := obj[f.key].(type) {
			case string:
				*f.dst = s
				if strings.TrimSpace(s) == "" {
					fail(i, ": %s is required", f.key)
				}
			case nil:
				fail(i, ": %s is required", f.key)
			default:
				fail(i, ": %s must be a string, not %s", f.key, jsonType(s))
			}
		}
		switch r := obj["required"].(type) {
		case nil:
		case bool:
			entry.Required = r
		default:
			fail(i, ": required must be true or false, not %s", jsonType(r))
		}
		out = append(out, entry)
	}
	d.bad[fieldKey{-1, "verify"}] = true
	return out
}

func (d *decoder) task(i int, v any) Task {
	t := Task{
		Status:             StatusPending,
		MaxAttempts:        d.maxAttempts,
		Dependencies:       []string{},
		KeyFiles:           []string{},
		AcceptanceCriteria: []string{},
		TestSteps:          []string{},
		Labels:             []string{},
	}
	obj, ok := v.(map[string]any)
	if !ok {
		d.fail(i, "", "must be an object, not %s", jsonType(v))
		return t
	}
	d.checkKeys(obj, i, "", taskKeys, ignoredTaskKeys)
	t.ID, _ = d.str(obj, i, "id")
	if s, ok := d.str(obj, i, "status"); ok {
		t.Status = Status(asciiUpper(s))
	} else if d.bad[fieldKey{i, "status"}] {
		t.Status = ""
	}
	if s, ok := d.str(obj, i, "priority"); ok {
		t.Priority = Priority(asciiLower(s))
	}
	if v, ok := obj["description"]; !ok || v == nil {
		d.fail(i, "description", "is required")
	} else {
		t.Description, _ = d.str(obj, i, "description")
	}
	t.Dependencies = d.stringList(obj, i, "dependencies")
	t.KeyFiles = d.stringList(obj, i, "key_files")
	t.AcceptanceCriteria = d.stringList(obj, i, "acceptance_criteria")
	t.TestSteps = d.stringList(obj, i, "test_steps")
	t.PRDRequirement, _ = d.str(obj, i, "prd_requirement")
	switch n := obj["max_attempts"].(type) {
	case nil:
	case json.Number:
		s := n.String()
		if strings.ContainsAny(s, ".eE") {
			d.fail(i, "max_attempts", "must be an integer, not %s", s)
			break
		}
		if v, err := strconv.Atoi(s); err == nil {
			t.MaxAttempts = v
		} else {
			d.fail(i, "max_attempts", "must be between 1 and %d", MaxMaxAttempts)
		}
	default:
		d.fail(i, "max_attempts", "must be an integer, not %s", jsonType(n))
	}
	t.Labels = d.stringList(obj, i, "labels")
	return t
}

// planFile, taskFile and verifyFile fix the key order of an encoded plan file.
type planFile struct {
	PlanID  string          `json:"plan_id"`
	Project string          `json:"project"`
	Budget  json.Number     `json:"budget_usd,omitempty"`
	Strict  bool            `json:"strict,omitempty"`
	Repo    string          `json:"repo,omitempty"`
	Verify  []verifyFile    `json:"verify,omitempty"`
	Origin  json.RawMessage `json:"origin,omitempty"`
	Targets json.RawMessage `json:"repo_targets,omitempty"`
	Tasks   []taskFile      `json:"tasks"`
}

type verifyFile struct {
	Name     string `json:"name"`
	Command  string `json:"command"`
	Required bool   `json:"required"`
}

type taskFile struct {
	ID                 string   `json:"id"`
	Status             Status   `json:"status"`
	Priority           Priority `json:"priority"`
	Description        string   `json:"description"`
	Dependencies       []string `json:"dependencies"`
	KeyFiles           []string `json:"key_files"`
	AcceptanceCriteria []string `json:"acceptance_criteria"`
	TestSteps          []string `json:"test_steps"`
	PRDRequirement     string   `json:"prd_requirement"`
	MaxAttempts        int      `json:"max_attempts"`
	Labels             []string `json:"labels"`
}

// Encode writes p as a canonical plan file: fixed key order, two-space indent, a
// trailing newline, every task field present (empty lists as []), status upper-case,
// priority lower-case, budget_usd as an exact decimal and only when set, strict, repo,
// verify and the Python system's origin and repo_targets only when set. It encodes p as
// Normalize would leave it, without changing p. It does not validate: an export must get out whatever the store holds, even a plan
// that needs fixing before it can be imported again.
func Encode(p *Plan) ([]byte, error) {
	c := *p
	c.Tasks = slices.Clone(p.Tasks)
	Normalize(&c)
	f := planFile{PlanID: c.ID, Project: c.Name, Strict: c.Strict, Repo: c.Repo, Origin: c.Origin, Targets: c.RepoTargets, Tasks: []taskFile{}}
	if c.Budget != nil {
		f.Budget = json.Number(c.Budget.String())
	}
	for _, v := range c.Verify {
		f.Verify = append(f.Verify, verifyFile(v))
	}
	for _, t := range c.Tasks {
		// A conversion: a field added to Task stops this compiling until the file has it.
		f.Tasks = append(f.Tasks, taskFile(t))
	}
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false) // keep "<", ">" and "&" readable in descriptions
	enc.SetIndent("", "  ")
	if err := enc.Encode(f); err != nil {
		return nil, fmt.Errorf("encode plan %s: %w", c.ID, err)
	}
	return buf.Bytes(), nil
}
