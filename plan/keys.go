package plan

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"unicode/utf8"
)

// The keys a plan file may hold. Anything else is refused, naming the key (with a "did
// you mean" when it is a near miss of a known one): a misspelt "dependncies" must not
// silently drop a dependency. The Python system's files are read too: its keys that mean
// the same thing are mapped (pythonKeys), and those that whilly has no use for are
// ignored with a note saying why (ignoredKeys).
var (
	planKeys = []string{"plan_id", "project", "budget_usd", "strict", "repo", "verify", "tasks"}
	taskKeys = []string{"id", "status", "priority", "description", "dependencies", "key_files",
		"acceptance_criteria", "test_steps", "prd_requirement", "max_attempts", "labels"}
	verifyKeys = []string{"name", "command", "required"}

	// pythonKeys maps a Python plan key to whilly's (plan level).
	pythonKeys = map[string]string{"verification_commands": "verify"}
	// keptKeys are Python plan keys whilly has no use for but keeps as they are, to write
	// them back in an export (Plan.Origin, Plan.RepoTargets), with the note it gives.
	keptKeys = map[string]string{
		"repo_targets": `kept for the export; whilly runs a plan in one repository: set "repo" to owner/name`,
		"origin":       "kept for the export; whilly records where a plan came from itself (its GitHub issue, or the import)",
	}
	// wizardKeys are what the Python system's PRD wizard writes on a plan or a task, which
	// the Python system read past too.
	wizardKeys = map[string]string{
		"phase":              "whilly orders tasks by their dependencies and priority",
		"category":           `whilly has no task categories: use "labels"`,
		"prd_file":           "whilly does not read the PRD: the tasks carry the work",
		"agent_instructions": "whilly gives the agent its own instructions; put what the task needs in its description",
	}
	// ignoredKeys are Python plan keys whilly reads past, with the reason it says.
	ignoredKeys     = merged(keptKeys, wizardKeys)
	ignoredTaskKeys = merged(map[string]string{
		"repo_target_id": `a task runs in its plan's "repo"`,
		"version":        "whilly keeps each task's version itself",
	}, wizardKeys)
	// ignoredVerifyKeys are keys of the Python system's verification commands.
	ignoredVerifyKeys = map[string]string{
		"source":              "whilly runs every verify command in the workspace after the agent",
		"repair_max_attempts": "a failed verify command fails the attempt; the task's max_attempts bounds the retries",
	}
)

// merged is the union of maps (none sharing a key).
func merged(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
		maps.Copy(out, m)
	}
	return out
}

// unknownKey is the message for a key that is not in known, with a suggestion when one
// known key is within two edits of it.
func unknownKey(key string, known []string) string {
	best, bestD := "", 3
	for _, k := range known {
		if d := editDistance(strings.ToLower(key), k); d < bestD {
			best, bestD = k, d
		}
	}
	if best != "" {
		return fmt.Sprintf("unknown key %q; did you mean %q?", key, best)
	}
	return fmt.Sprintf("unknown key %q; known keys are %s", key, strings.Join(known, ", "))
}

// editDistance is the Levenshtein distance of two short strings.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// checkKeys reports the keys of obj that are neither known nor ignored; ignored ones are
// added to notes. index and field say where obj sits (field "" for a plan or a task).
func (d *decoder) checkKeys(obj map[string]any, index int, field string, known []string, ignored map[string]string) {
	keys := make([]string, 0, len(obj))
	for k := range obj {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		if slices.Contains(known, k) || pythonKeys[k] != "" && field == "" && index < 0 {
			continue
		}
		if why, ok := ignored[k]; ok {
			d.note(index, k, why)
			continue
		}
		d.fail(index, keyField(field, k), "%s", unknownKey(k, known))
	}
}

// keyField names the field a key problem belongs to: the key itself, or the enclosing list.
func keyField(field, key string) string {
	if field != "" {
		return field
	}
	return key
}

func (d *decoder) note(index int, key, why string) {
	where := "the plan"
	if index >= 0 {
		where = fmt.Sprintf("task #%d", index+1)
	}
	d.notes = append(d.notes, fmt.Sprintf("%s: key %q ignored: %s", where, key, why))
}

// scanRaw walks the plan file's tokens for what decoding into maps would hide: a key
// given twice in one object (encoding/json keeps the last silently), and bytes that are
// not UTF-8 (encoding/json replaces them with U+FFFD silently). Each is a problem at the
// field where it sits.
func scanRaw(data []byte) []Problem {
	var problems []Problem
	bad := -1 // offset of the first byte that is not UTF-8
	if !utf8.Valid(data) {
		for i := 0; i < len(data); {
			r, n := utf8.DecodeRune(data[i:])
			if r == utf8.RuneError && n <= 1 {
				bad = i
				break
			}
			i += n
		}
	}
	type frame struct {
		object bool
		key    string // the key whose value is being read (objects)
		index  int    // the element being read (arrays)
		seen   map[string]bool
		expect bool // an object expects a key next
	}
	var stack []*frame
	// where maps the current position to a problem's task index and field.
	where := func(key string) (int, string) {
		index, field := -1, ""
		for depth, f := range stack {
			switch {
			case depth == 0:
				field = f.key
			case depth == 1 && field == "tasks" && !f.object:
				index = f.index
				field = ""
			case depth == 2 && index >= 0 && f.object:
				field = f.key
			}
		}
		if field == "" {
			field = key
		}
		return index, field
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			break // decodeJSON reports syntax errors
		}
		end := dec.InputOffset()
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		k, isString := tok.(string)
		isKey := isString && top != nil && top.object && top.expect
		if isKey {
			top.key = k
		}
		if bad >= 0 && int(start) <= bad && bad < int(end) {
			idx, field := where("")
			msg := "must be valid UTF-8"
			if isKey {
				msg = "has a key that is not valid UTF-8"
			}
			problems = append(problems, Problem{Index: idx, Field: field, Message: msg})
			bad = -1
		}
		if isKey {
			if top.seen[k] {
				idx, field := where(k)
				msg := fmt.Sprintf("key %q appears twice; keep one", k)
				problems = append(problems, Problem{Index: idx, Field: field, Message: msg})
			}
			top.seen[k] = true
			top.expect = false
			continue
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, &frame{object: true, seen: map[string]bool{}, expect: true})
			continue
		case json.Delim('['):
			stack = append(stack, &frame{index: 0})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:len(stack)-1]
		}
		// A value ended: the enclosing object wants a key, the array its next element.
		if len(stack) > 0 {
			if f := stack[len(stack)-1]; f.object {
				f.expect = true
			} else {
				f.index++
			}
		}
	}
	return problems
}

// KeyAliases maps each other name the codec reads for a plan-level key (the Python
// system's) to whilly's key. Whoever restricts what a plan file may set must restrict
// its aliases too.
func KeyAliases() map[string]string { return maps.Clone(pythonKeys) }
