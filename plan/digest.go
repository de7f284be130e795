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

// DigestVersion is the version of the encoding Digest uses; a plan.approved event records
// it next to the digest approved, so an approval stays checkable against its own encoding.
const DigestVersion = 2

// Digest is the plan's content digest: what an approver agrees to. It is the SHA-256, in
// lowercase hex, of a canonical JSON document holding what the agents will be asked to do
// and what runs around them:
//
//   - the encoding's version, 2;
//   - the plan's name (every task's prompt shows it);
//   - the plan's repository and its verify commands (name, command, required), in order;
//   - every task in file order with its id, priority, description, dependencies, key
//     files, acceptance criteria, test steps, PRD requirement, required worker labels and
//     attempt limit.
//
// The document is {"v": 2, "name", "repo", "verify": [{"name", "command", "required"}],
// "tasks": [{"id", "priority", "description", "dependencies", "key_files",
// "acceptance_criteria", "test_steps", "prd_requirement", "labels", "max_attempts"}]},
// keys in that order, compact (no spaces), strings escaped as JSON requires and nothing
// more (no HTML escaping; U+2028 and U+2029 are written \u2028 and \u2029), so it can be
// rebuilt and checked with any JSON tool.
//
// Runtime state (statuses, attempts, spend) and the budget are left out: running the plan
// or raising its budget does not change what was approved, while any change of the name or
// of a task's definition, a task added or removed, or a reordering does. nil and empty
// lists digest alike.
//
// The encoding is versioned. Version 1 (DigestV1) left the name out. A new version never
// edits an old one: it adds a function, starts its document with its own "v" (so no
// document of one version is a document of another, and no digest of one can stand for
// the other) and bumps DigestVersion. Never change the encoding of a version, or every
// digest shown in a status comment goes stale and recorded approvals cannot be checked.
func Digest(p *Plan) string {
	d := digestPlanV2{V: 2, Name: p.Name, Repo: p.Repo, Verify: digestVerifies(p), Tasks: digestTasks(p)}
	return digestJSON(d)
}

// DigestV1 is the plan's digest in version 1 of the encoding, which did not cover the
// plan's name: the document {"repo", "verify", "tasks"} of Digest without "v" and "name".
// Digests shown or approved before version 2 are version 1; ApprovePlan recognises one to
// refuse it with the reason, and an approval recorded without a version is checked with it.
func DigestV1(p *Plan) string {
	return digestJSON(digestPlanV1{Repo: p.Repo, Verify: digestVerifies(p), Tasks: digestTasks(p)})
}

func digestVerifies(p *Plan) []digestVerify {
	out := make([]digestVerify, 0, len(p.Verify))
	for _, v := range p.Verify {
		// A conversion: a field added to Verify stops the build here, to be decided on.
		out = append(out, digestVerify(v))
	}
	return out
}

func digestTasks(p *Plan) []digestTask {
	out := make([]digestTask, 0, len(p.Tasks))
	for _, t := range p.Tasks {
		out = append(out, digestTask{
			ID: t.ID, Priority: string(t.Priority), Description: t.Description,
			Dependencies: digestList(t.Dependencies), KeyFiles: digestList(t.KeyFiles),
			AcceptanceCriteria: digestList(t.AcceptanceCriteria), TestSteps: digestList(t.TestSteps),
			PRDRequirement: t.PRDRequirement, Labels: digestList(t.Labels), MaxAttempts: t.MaxAttempts,
		})
	}
	return out
}

// digestJSON hashes d as compact JSON without HTML escaping, so that any JSON tool can
// reproduce it; encoding structs of strings, bools, ints and string slices cannot fail.
func digestJSON(d any) string {
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

type digestPlanV1 struct {
	Repo   string         `json:"repo"`
	Verify []digestVerify `json:"verify"`
	Tasks  []digestTask   `json:"tasks"`
}

type digestPlanV2 struct {
	V      int            `json:"v"`
	Name   string         `json:"name"`
	Repo   string         `json:"repo"`
	Verify []digestVerify `json:"verify"`
	Tasks  []digestTask   `json:"tasks"`
}

type digestVerify struct {
	Name     string `json:"name"`
	Command  string `json:"command"`
	Required bool   `json:"required"`
}

// digestTask is a task in versions 1 and 2: a field added here changes both, so a new
// field needs a type of its own, in a new version.
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
