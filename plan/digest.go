package plan

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
)

// DigestLen is the length of a plan digest: SHA-256 in lowercase hex.
const DigestLen = 64

// Digest is the plan's content digest: what an approver agrees to (SPEC §11, approval).
// It is the SHA-256, in lowercase hex, of a canonical JSON document holding what the
// agents will be asked to do and what runs around them:
//
//   - the plan's repository and its verify commands (name, command, required), in order;
//   - every task in file order with its id, priority, description, dependencies, key
//     files, acceptance criteria, test steps, PRD requirement, required worker labels and
//     attempt limit.
//
// The document is {"repo", "verify": [{"name", "command", "required"}], "tasks": [{"id",
// "priority", "description", "dependencies", "key_files", "acceptance_criteria",
// "test_steps", "prd_requirement", "labels", "max_attempts"}]}, keys in that order,
// compact (no spaces), strings escaped as JSON requires and nothing more (no HTML
// escaping; U+2028 and U+2029 are written \u2028 and \u2029), so it can be rebuilt and
// checked with any JSON tool.
//
// Runtime state (statuses, attempts, spend) and the budget are left out: running the plan
// or raising its budget does not change what was approved, while any change of a task's
// definition, a task added or removed, or a reordering does. nil and empty lists digest
// alike. The encoding is fixed by the digest* types below: never change it, or every
// digest shown in a status comment goes stale.
func Digest(p *Plan) string {
	d := digestPlan{Repo: p.Repo, Verify: make([]digestVerify, 0, len(p.Verify)), Tasks: make([]digestTask, 0, len(p.Tasks))}
	for _, v := range p.Verify {
		// A conversion: a field added to Verify stops the build here, to be decided on.
		d.Verify = append(d.Verify, digestVerify(v))
	}
	for _, t := range p.Tasks {
		d.Tasks = append(d.Tasks, digestTask{
			ID: t.ID, Priority: string(t.Priority), Description: t.Description,
			Dependencies: digestList(t.Dependencies), KeyFiles: digestList(t.KeyFiles),
			AcceptanceCriteria: digestList(t.AcceptanceCriteria), TestSteps: digestList(t.TestSteps),
			PRDRequirement: t.PRDRequirement, Labels: digestList(t.Labels), MaxAttempts: t.MaxAttempts,
		})
	}
	// Compact JSON without HTML escaping, so that any JSON tool can reproduce it; encoding
	// structs of strings, bools, ints and string slices cannot fail.
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(d)
	sum := sha256.Sum256(bytes.TrimSuffix(b.Bytes(), []byte("\n")))
	return hex.EncodeToString(sum[:])
}

// NormalizeDigest reads a digest as a user typed it: surrounding space and backticks, an
// optional "sha256:" prefix and upper case are accepted. ok is false unless what is left is
// DigestLen hex digits.
func NormalizeDigest(s string) (string, bool) {
	s = strings.Trim(strings.TrimSpace(s), "`")
	s = asciiLower(s)
	s = strings.TrimPrefix(s, "sha256:")
	if len(s) != DigestLen {
		return "", false
	}
	for _, r := range s {
		if (r < '0' || r > '9') && (r < 'a' || r > 'f') {
			return "", false
		}
	}
	return s, true
}

func digestList(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}

type digestPlan struct {
	Repo   string         `json:"repo"`
	Verify []digestVerify `json:"verify"`
	Tasks  []digestTask   `json:"tasks"`
}

type digestVerify struct {
	Name     string `json:"name"`
	Command  string `json:"command"`
	Required bool   `json:"required"`
}

type digestTask struct {
	ID                 string   `json:"id"`
	Priority           string   `json:"priority"`
	Description        string   `json:"description"`
	Dependencies       []string `json:"dependencies"`
	KeyFiles           []string `json:"key_files"`
	AcceptanceCriteria []string `json:"acceptance_criteria"`
	TestSteps          []string `json:"test_steps"`
	PRDRequirement     string   `json:"prd_requirement"`
	Labels             []string `json:"labels"`
	MaxAttempts        int      `json:"max_attempts"`
}
