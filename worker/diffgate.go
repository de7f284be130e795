package worker

import (
	"bytes"
	"fmt"
	"path"
	"strconv"
	"strings"

	"github.com/whilly-go/whilly/agent"
)

// The diff gate: before a task's commits leave the machine, every commit between the
// task's start and what is pushed is checked against the policy: protected
// paths (WHILLY_PROTECTED_PATHS, matched case-insensitively, on both sides of a rename
// and through symlinks), secrets in every added line read as text whatever
// .gitattributes says, and limits on files, lines and bytes (WHILLY_DIFF_MAX_BYTES). A
// refused diff fails the task (ReasonDiffRejected, not retryable) with the reasons — rule
// and path — in the FAIL event's detail, and nothing is pushed.

// ReasonDiffRejected is the FAIL reason of a task whose diff the gate refused.
const ReasonDiffRejected = "diff_rejected"

// Defaults of the diff gate's limits, used when the workspace leaves them at zero.
const (
	DefaultMaxFiles = 200
	DefaultMaxLines = 20000
	// DefaultMaxBytes is what an attempt may add or change, all files together, and so
	// also one file (WHILLY_DIFF_MAX_BYTES).
	DefaultMaxBytes int64 = 5 << 20
	// maxSecretReasons bounds the secret findings listed in a FAIL event.
	maxSecretReasons = 20
)

// DefaultProtectedPaths are the globs the gate refuses unless WHILLY_PROTECTED_PATHS
// says otherwise: workflows and the rest of .github (CODEOWNERS, actions, dependabot),
// and submodule definitions.
var DefaultProtectedPaths = []string{".github/**", ".gitmodules"}

// Rules of the diff gate, as they appear in DiffReason.Rule. Persisted in events: never
// rename one.
const (
	RuleWorkflow  = "workflow_file"  // a file under .github/workflows/ without allow_workflows
	RuleMaxFiles  = "too_many_files" // more files changed than max_files
	RuleMaxLines  = "too_many_lines" // more lines added and deleted than max_lines
	RuleSecret    = "secret"         // an added line holds a secret (the patterns of agent.Redact)
	RuleProtected = "protected_path" // a path (or a symlink's target) matches WHILLY_PROTECTED_PATHS
	RuleFileBytes = "file_too_large" // one file is larger than max_bytes
	RuleMaxBytes  = "too_many_bytes" // the files added or changed are larger than max_bytes together
	RuleSymlink   = "symlink"        // a symlink pointing out of the repository or into .git
	RuleSubmodule = "submodule"      // a gitlink: another repository's commit inside this one
	RuleRef       = "ref"            // a commit range that cannot be read (replaced objects, a merge of foreign history)
	RuleSpecial   = "special_file"   // a FIFO, socket or device in the work tree
	workflowsPath = ".github/workflows"
)

// DiffLimits is the policy a diff must satisfy.
type DiffLimits struct {
	AllowWorkflows bool
	MaxFiles       int      // <= 0: DefaultMaxFiles
	MaxLines       int      // <= 0: DefaultMaxLines
	MaxBytes       int64    // <= 0: DefaultMaxBytes
	Protected      []string // globs (** any depth, * within a name); nil: DefaultProtectedPaths
}

// Git file modes of a diff's new side.
const (
	modeSymlink = "120000"
	modeGitlink = "160000"
)

// FileChange is one file of a diff: `git diff --numstat` (lines) and `git diff-tree
// --raw` (modes and the new blob's size).
type FileChange struct {
	Path    string
	Added   int
	Deleted int
	Binary  bool
	Mode    string // the new side's mode (100644, 120000 …); "" when deleted or unknown
	Bytes   int64  // the new blob's size; 0 when deleted
	Target  string // a symlink's target, as stored in its blob
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
	if l.MaxBytes <= 0 {
		l.MaxBytes = DefaultMaxBytes
	}
	if l.Protected == nil {
		l.Protected = DefaultProtectedPaths
	}
	return l
}

// Bytes is the size of the blobs the diff adds or changes.
func (d Diff) Bytes() int64 {
	var n int64
	for _, f := range d.Files {
		n += f.Bytes
	}
	return n
}

// CheckDiff returns every reason the policy refuses d, none when it passes: paths first
// (workflows, protected paths, symlinks, submodules), then the limits, then secrets in
// added lines (at most maxSecretReasons).
func CheckDiff(d Diff, lim DiffLimits) []DiffReason {
	lim = lim.withDefaults()
	var out []DiffReason
	for _, f := range d.Files {
		out = append(out, checkPath(f, lim)...)
		if f.Bytes > lim.MaxBytes {
			out = append(out, DiffReason{Rule: RuleFileBytes, Path: f.Path,
				Detail: fmt.Sprintf("%d bytes, the limit is %d", f.Bytes, lim.MaxBytes)})
		}
	}
	if n := d.Bytes(); n > lim.MaxBytes {
		out = append(out, DiffReason{Rule: RuleMaxBytes, Detail: fmt.Sprintf("%d bytes added or changed, the limit is %d", n, lim.MaxBytes)})
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

// checkPath is the path rules for one changed file: a workflow or protected path (the
// file itself, or where a symlink points), a symlink leaving the repository or entering
// .git, a submodule.
func checkPath(f FileChange, lim DiffLimits) []DiffReason {
	var out []DiffReason
	refuse := func(p, via string) {
		switch {
		case isWorkflowPath(p):
			if !lim.AllowWorkflows {
				out = append(out, DiffReason{Rule: RuleWorkflow, Path: f.Path, Detail: "changes to " + workflowsPath + "/ are not allowed in this plan" + via})
			}
		case protected(p, lim.Protected):
			out = append(out, DiffReason{Rule: RuleProtected, Path: f.Path, Detail: "the path is protected (" + strings.Join(lim.Protected, ", ") + ")" + via})
		}
	}
	refuse(f.Path, "")
	switch f.Mode {
	case modeSymlink:
		target, ok := linkTarget(f.Path, f.Target)
		switch {
		case !ok:
			out = append(out, DiffReason{Rule: RuleSymlink, Path: f.Path, Detail: "the symlink points out of the repository or into .git"})
		default:
			refuse(target, " (through a symlink to "+target+")")
		}
	case modeGitlink:
		out = append(out, DiffReason{Rule: RuleSubmodule, Path: f.Path, Detail: "a submodule (another repository's commit) may not be added"})
	}
	return out
}

// linkTarget resolves a symlink's target against the link's directory: the path it names
// in the repository, or false when it leaves the repository, is absolute, or enters .git.
func linkTarget(link, target string) (string, bool) {
	if target == "" || strings.HasPrefix(target, "/") || strings.ContainsRune(target, 0) {
		return "", false
	}
	p := path.Clean(path.Join(path.Dir(link), target))
	if p == ".." || strings.HasPrefix(p, "../") {
		return "", false
	}
	for _, seg := range strings.Split(p, "/") {
		if strings.EqualFold(seg, ".git") {
			return "", false
		}
	}
	return p, true
}

// isWorkflowPath reports whether path is, or is under, .github/workflows, in any case:
// a checkout on a case-insensitive file system (macOS, Windows) merges .GitHub into
// .github. Paths are as git prints them, relative to the repository root.
func isWorkflowPath(p string) bool {
	p = strings.ToLower(p)
	return p == workflowsPath || strings.HasPrefix(p, workflowsPath+"/")
}

// protected reports whether p matches one of the globs, case-insensitively. A glob is
// matched segment by segment: ** matches any number of segments (also none, so
// .github/** covers .github itself, which a symlink may replace), * and ? match within
// one segment.
func protected(p string, globs []string) bool {
	segs := strings.Split(strings.ToLower(strings.Trim(p, "/")), "/")
	for _, g := range globs {
		if matchSegments(strings.Split(strings.ToLower(strings.Trim(strings.TrimSpace(g), "/")), "/"), segs) {
			return true
		}
	}
	return false
}

func matchSegments(pat, segs []string) bool {
	for len(pat) > 0 {
		if pat[0] == "**" {
			for i := 0; i <= len(segs); i++ {
				if matchSegments(pat[1:], segs[i:]) {
					return true
				}
			}
			return false
		}
		if len(segs) == 0 {
			return false
		}
		if ok, err := path.Match(pat[0], segs[0]); err != nil || !ok {
			return false
		}
		pat, segs = pat[1:], segs[1:]
	}
	return len(segs) == 0
}

// ParseProtectedPaths reads WHILLY_PROTECTED_PATHS: comma-separated globs. An empty
// value keeps the defaults; a bad glob is an error.
func ParseProtectedPaths(s string) ([]string, error) {
	var out []string
	for _, g := range strings.Split(s, ",") {
		if g = strings.TrimSpace(g); g == "" {
			continue
		}
		for _, seg := range strings.Split(g, "/") {
			if _, err := path.Match(seg, ""); err != nil {
				return nil, fmt.Errorf("protected path %q is not a valid glob", g)
			}
		}
		out = append(out, g)
	}
	if len(out) == 0 {
		return DefaultProtectedPaths, nil
	}
	return out, nil
}

// rawChange is one record of `git diff-tree -r -z --raw`: the new side's mode and blob.
type rawChange struct {
	Path    string
	NewMode string
	NewBlob string // "" when the file is deleted
}

// parseRaw reads `git diff-tree -r -z --raw --no-renames A B`: ":oldmode newmode oldsha
// newsha status\0path\0" per file.
func parseRaw(out []byte) ([]rawChange, error) {
	var res []rawChange
	recs := bytes.Split(out, []byte{0})
	for i := 0; i < len(recs); i++ {
		head := string(recs[i])
		if strings.TrimSpace(head) == "" {
			continue
		}
		fields := strings.Fields(strings.TrimPrefix(head, ":"))
		if !strings.HasPrefix(head, ":") || len(fields) != 5 || i+1 >= len(recs) {
			return nil, fmt.Errorf("parse diff-tree record %q", head)
		}
		i++
		c := rawChange{Path: string(recs[i]), NewMode: fields[1], NewBlob: fields[3]}
		if strings.Trim(c.NewBlob, "0") == "" || fields[1] == "000000" {
			c.NewMode, c.NewBlob = "", ""
		}
		res = append(res, c)
	}
	return res, nil
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
