package worker

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"

	"github.com/whilly-go/whilly/agent"
)

// The diff gate: before a task's commit leaves the machine, its diff is checked against
// the workspace's policy. A refused diff fails the task (ReasonDiffRejected, not
// retryable) with the reasons in the FAIL event's detail, and nothing is pushed.

// ReasonDiffRejected is the FAIL reason of a task whose diff the gate refused.
const ReasonDiffRejected = "diff_rejected"

// Defaults of the diff gate's limits, used when the workspace leaves them at zero.
const (
	DefaultMaxFiles = 200
	DefaultMaxLines = 20000
	// maxSecretReasons bounds the secret findings listed in a FAIL event.
	maxSecretReasons = 20
)

// Rules of the diff gate, as they appear in DiffReason.Rule. Persisted in events: never
// rename one.
const (
	RuleWorkflow  = "workflow_file"  // a file under .github/workflows/ without allow_workflows
	RuleMaxFiles  = "too_many_files" // more files changed than max_files
	RuleMaxLines  = "too_many_lines" // more lines added and deleted than max_lines
	RuleSecret    = "secret"         // an added line holds a secret (the patterns of agent.Redact)
	workflowsPath = ".github/workflows"
)

// DiffLimits is the policy a diff must satisfy.
type DiffLimits struct {
	AllowWorkflows bool
	MaxFiles       int // <= 0: DefaultMaxFiles
	MaxLines       int // <= 0: DefaultMaxLines
}

// FileChange is one file of a diff, from `git diff --numstat`.
type FileChange struct {
	Path    string
	Added   int
	Deleted int
	Binary  bool
}

// AddedLine is a line a diff adds, with its number in the new file.
type AddedLine struct {
	Path string
	Line int
	Text string
}

// Diff is what the gate looks at.
type Diff struct {
	Files []FileChange
	Added []AddedLine // nil when the diff was too large to read
}

// Lines is the number of lines the diff adds and deletes.
func (d Diff) Lines() int {
	n := 0
	for _, f := range d.Files {
		n += f.Added + f.Deleted
	}
	return n
}

// DiffReason is one reason the gate refused a diff. It never holds the secret it found.
type DiffReason struct {
	Rule   string `json:"rule"`
	Path   string `json:"path,omitempty"`
	Line   int    `json:"line,omitempty"`
	Kind   string `json:"kind,omitempty"` // of a secret: github_token, private_key, assignment …
	Detail string `json:"detail"`
}

// DiffRejectedError is returned when the gate refuses a diff.
type DiffRejectedError struct {
	Reasons []DiffReason
	Files   int
	Lines   int
}

func (e *DiffRejectedError) Error() string {
	rules := make([]string, 0, len(e.Reasons))
	for _, r := range e.Reasons {
		if len(rules) == 0 || rules[len(rules)-1] != r.Rule {
			rules = append(rules, r.Rule)
		}
	}
	return fmt.Sprintf("diff rejected (%d files, %d lines): %s", e.Files, e.Lines, strings.Join(rules, ", "))
}

func (l DiffLimits) withDefaults() DiffLimits {
	if l.MaxFiles <= 0 {
		l.MaxFiles = DefaultMaxFiles
	}
	if l.MaxLines <= 0 {
		l.MaxLines = DefaultMaxLines
	}
	return l
}

// CheckDiff returns every reason the policy refuses d, none when it passes: workflow
// files first, then the limits, then secrets in added lines (at most maxSecretReasons).
func CheckDiff(d Diff, lim DiffLimits) []DiffReason {
	lim = lim.withDefaults()
	var out []DiffReason
	if !lim.AllowWorkflows {
		for _, f := range d.Files {
			if isWorkflowPath(f.Path) {
				out = append(out, DiffReason{Rule: RuleWorkflow, Path: f.Path,
					Detail: "changes to " + workflowsPath + "/ are not allowed in this plan"})
			}
		}
	}
	if n := len(d.Files); n > lim.MaxFiles {
		out = append(out, DiffReason{Rule: RuleMaxFiles, Detail: fmt.Sprintf("%d files changed, the limit is %d", n, lim.MaxFiles)})
	}
	if n := d.Lines(); n > lim.MaxLines {
		out = append(out, DiffReason{Rule: RuleMaxLines, Detail: fmt.Sprintf("%d lines changed, the limit is %d", n, lim.MaxLines)})
	}
	secrets := 0
	for _, l := range d.Added {
		for _, f := range agent.FindSecrets(l.Text) {
			if f.Named && !looksLiteral(f.Value) {
				continue
			}
			if secrets++; secrets > maxSecretReasons {
				return out
			}
			out = append(out, DiffReason{Rule: RuleSecret, Path: l.Path, Line: l.Line, Kind: f.Kind,
				Detail: "the added line holds what looks like a secret (" + f.Kind + ")"})
		}
	}
	return out
}

// isWorkflowPath reports whether path is, or is under, .github/workflows. Paths are as
// git prints them, relative to the repository root, with forward slashes; GitHub reads
// workflows from exactly that directory, case included.
func isWorkflowPath(path string) bool {
	return path == workflowsPath || strings.HasPrefix(path, workflowsPath+"/")
}

// looksLiteral reports whether a value found by a name-based pattern (password=…,
// Authorization: …, user:password@) is a literal secret rather than code that handles
// one. The patterns were made to mask logs, where erring on the side of masking is free;
// in a diff, `token := r.Header.Get("Authorization")` or `if password == ""` must not
// fail a task. A literal is at least 8 characters, holds no code or template syntax,
// is no placeholder, and is not a bare identifier or member access (cfg.Token, secret).
func looksLiteral(v string) bool {
	v = strings.Trim(v, "\"'`")
	if len(v) < 8 || strings.ContainsAny(v, "()[]{}<>$%=*") {
		return false
	}
	lower := strings.ToLower(v)
	for _, p := range []string{"example", "changeme", "redacted", "xxxx", "dummy", "placeholder", "your_", "your-", "<", "..."} {
		if strings.Contains(lower, p) {
			return false
		}
	}
	ident, digit, dot := true, false, false
	for _, r := range v {
		switch {
		case r >= '0' && r <= '9':
			digit = true
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r == '_':
		case r == '.':
			dot = true
		default:
			ident = false
		}
	}
	// secretValue, cfg.Token and os.Getenv are code; hunter22 and s3cr3t!x are literals.
	return !ident || (digit && !dot)
}

// parseNumstat reads `git diff --numstat -z --no-renames`: "added\tdeleted\tpath\0" per
// file, "-\t-\tpath" for a binary file.
func parseNumstat(out []byte) ([]FileChange, error) {
	var files []FileChange
	for _, rec := range bytes.Split(out, []byte{0}) {
		if len(bytes.TrimSpace(rec)) == 0 {
			continue
		}
		parts := strings.SplitN(string(rec), "\t", 3)
		if len(parts) != 3 {
			return nil, fmt.Errorf("parse numstat record %q", rec)
		}
		f := FileChange{Path: strings.TrimLeft(parts[2], "\n")}
		if parts[0] == "-" && parts[1] == "-" {
			f.Binary = true
		} else {
			var err1, err2 error
			f.Added, err1 = strconv.Atoi(parts[0])
			f.Deleted, err2 = strconv.Atoi(parts[1])
			if err1 != nil || err2 != nil {
				return nil, fmt.Errorf("parse numstat record %q", rec)
			}
		}
		files = append(files, f)
	}
	return files, nil
}

// parseAddedLines reads the added lines of a unified diff (`git diff -U0 --no-color`)
// with their line numbers in the new file.
func parseAddedLines(patch []byte) []AddedLine {
	var (
		out    []AddedLine
		path   string
		next   int
		header bool // between "diff --git" and the file's first hunk
	)
	for line := range strings.Lines(string(patch)) {
		line = strings.TrimSuffix(strings.TrimSuffix(line, "\n"), "\r")
		switch {
		case strings.HasPrefix(line, "diff --git "):
			path, next, header = "", 0, true
		case strings.HasPrefix(line, "@@ "):
			next, header = hunkStart(line), false
		case header:
			// "+++ b/path" names the file; an added line reading "++ x" shows as "+++ x"
			// too, but only inside a hunk.
			if name, ok := strings.CutPrefix(line, "+++ "); ok {
				path = diffPath(name)
			}
		case strings.HasPrefix(line, "+") && path != "":
			out = append(out, AddedLine{Path: path, Line: next, Text: line[1:]})
			next++
		case strings.HasPrefix(line, " "):
			next++
		}
	}
	return out
}

// diffPath turns the "+++ b/path" name of a diff into the path, unquoting git's C-style
// quoting of unusual names; /dev/null (a deleted file) is "".
func diffPath(name string) string {
	if strings.HasPrefix(name, `"`) {
		if u, err := strconv.Unquote(name); err == nil {
			name = u
		}
	}
	if name == "/dev/null" {
		return ""
	}
	return strings.TrimPrefix(name, "b/")
}

// hunkStart reads the new file's first line number from "@@ -a,b +c,d @@".
func hunkStart(line string) int {
	_, rest, ok := strings.Cut(line, " +")
	if !ok {
		return 0
	}
	num, _, _ := strings.Cut(rest, " ")
	num, _, _ = strings.Cut(num, ",")
	n, _ := strconv.Atoi(num)
	return n
}
