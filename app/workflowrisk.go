package app

import (
	"fmt"
	"regexp"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// WorkflowFile is one file of a repository's .github/workflows.
type WorkflowFile struct {
	Path    string // .github/workflows/ci.yml
	Content string
}

// WorkflowRisk is a workflow that runs code whilly's agent wrote (it triggers on a push
// to whilly/** or on whilly's pull request, or runs after one that does) and can read the
// repository's secrets.
type WorkflowRisk struct {
	Path string
	// Triggers says why it runs on whilly's work, one phrase each ("push to whilly/**
	// (no branch filter)").
	Triggers []string
	// Secrets names what it reads: secrets.NAME, or "secrets: inherit" and "the whole
	// secrets context" for those forms.
	Secrets []string
	// Fix says what to do about it.
	Fix string
}

// workflowBranches stand for whilly's branches, whilly/issue-N: a branch filter that
// matches any of them matches whilly's work.
var workflowBranches = []string{"whilly/issue-1", "whilly/issue-42", "whilly/issue-1234"}

// parsedWorkflow is what RiskyWorkflows reads of a file.
type parsedWorkflow struct {
	path, name string
	on         map[string]*yaml.Node // event → its configuration (nil: none)
	secrets    []string
}

// RiskyWorkflows returns the workflows among files that run on whilly's branches or pull
// requests (to defaultBranch) with secrets, in files' order. A file that is not valid
// YAML is reported as unreadable in bad.
func RiskyWorkflows(files []WorkflowFile, defaultBranch string) (risks []WorkflowRisk, bad []string) {
	var wfs []parsedWorkflow
	for _, f := range files {
		wf, err := parseWorkflow(f)
		if err != nil {
			bad = append(bad, fmt.Sprintf("%s: %v", f.Path, err))
			continue
		}
		wfs = append(wfs, wf)
	}
	// Direct triggers first, then workflow_run chains until nothing new runs.
	why := make([][]string, len(wfs))
	for i, wf := range wfs {
		why[i] = directTriggers(wf, defaultBranch)
	}
	for changed := true; changed; {
		changed = false
		for i, wf := range wfs {
			if len(why[i]) > 0 {
				continue
			}
			cfg, ok := wf.on["workflow_run"]
			if !ok || !branchFilterMatches(cfg, workflowBranches) {
				continue
			}
			for _, name := range listOf(mapValue(cfg, "workflows")) {
				j := slices.IndexFunc(wfs, func(o parsedWorkflow) bool { return o.name == name })
				if j >= 0 && len(why[j]) > 0 {
					why[i] = append(why[i], fmt.Sprintf("workflow_run after %q, which runs on whilly's work", name))
					changed = true
					break
				}
			}
		}
	}
	for i, wf := range wfs {
		if len(why[i]) == 0 || len(wf.secrets) == 0 {
			continue
		}
		risks = append(risks, WorkflowRisk{Path: wf.path, Triggers: why[i], Secrets: wf.secrets, Fix: workflowFix(wf)})
	}
	return risks, bad
}

func workflowFix(wf parsedWorkflow) string {
	var fix []string
	if _, ok := wf.on["push"]; ok {
		fix = append(fix, "exclude whilly's branches (push: branches-ignore: ['whilly/**'])")
	}
	for _, ev := range []string{"pull_request", "pull_request_target", "pull_request_review", "pull_request_review_comment"} {
		if _, ok := wf.on[ev]; ok {
			fix = append(fix, "skip whilly's pull requests in each job using secrets (if: ${{ !startsWith(github.head_ref, 'whilly/') }})")
			break
		}
	}
	if _, ok := wf.on["workflow_run"]; ok {
		fix = append(fix, "exclude whilly's branches (workflow_run: branches-ignore: ['whilly/**'])")
	}
	fix = append(fix, "or move the secrets into an environment with required reviewers, so a person approves each run")
	return strings.Join(fix, ", ")
}

// directTriggers says which of the workflow's events run on whilly's work itself.
func directTriggers(wf parsedWorkflow, defaultBranch string) []string {
	var why []string
	if cfg, ok := wf.on["push"]; ok {
		if reason := pushReason(cfg); reason != "" {
			why = append(why, reason)
		}
	}
	for _, ev := range []string{"pull_request", "pull_request_target"} {
		cfg, ok := wf.on[ev]
		if !ok {
			continue
		}
		switch {
		case !hasKey(cfg, "branches") && !hasKey(cfg, "branches-ignore"):
			why = append(why, ev+" (whilly's pull requests)")
		case branchFilterMatches(cfg, []string{defaultBranch}):
			why = append(why, fmt.Sprintf("%s to %s (whilly's pull requests)", ev, defaultBranch))
		}
	}
	for _, ev := range []string{"pull_request_review", "pull_request_review_comment"} {
		if _, ok := wf.on[ev]; ok {
			why = append(why, ev+" (reviews of whilly's pull requests)")
		}
	}
	return why
}

// pushReason says why a push trigger runs on whilly's branches, or "" when it does not.
func pushReason(cfg *yaml.Node) string {
	switch {
	case hasKey(cfg, "branches") || hasKey(cfg, "branches-ignore"):
		if branchFilterMatches(cfg, workflowBranches) {
			return "push to whilly/** (its branch filter matches)"
		}
		return ""
	case hasKey(cfg, "tags") || hasKey(cfg, "tags-ignore"):
		return "" // a tag filter alone: branch pushes do not run it
	default:
		return "push to whilly/** (no branch filter)"
	}
}

// branchFilterMatches applies an event's branches or branches-ignore to names: whether
// the event runs for any of them. No filter matches everything.
func branchFilterMatches(cfg *yaml.Node, names []string) bool {
	if ignore := listOf(mapValue(cfg, "branches-ignore")); hasKey(cfg, "branches-ignore") {
		return slices.ContainsFunc(names, func(n string) bool {
			return !slices.ContainsFunc(ignore, func(p string) bool { return globMatch(p, n) })
		})
	}
	if !hasKey(cfg, "branches") {
		return true
	}
	pats := listOf(mapValue(cfg, "branches"))
	return slices.ContainsFunc(names, func(n string) bool {
		in := false // the last pattern that matches decides; "!" ones exclude
		for _, p := range pats {
			if neg, ok := strings.CutPrefix(p, "!"); ok {
				if globMatch(neg, n) {
					in = false
				}
			} else if globMatch(p, n) {
				in = true
			}
		}
		return in
	})
}

// globMatch matches a GitHub Actions filter pattern: * is any run of characters but /,
// ** any run, ? and + make the character before optional or repeated, [] is a class.
func globMatch(pattern, name string) bool {
	var re strings.Builder
	re.WriteString("^")
	for i := 0; i < len(pattern); i++ {
		c := pattern[i]
		switch {
		case c == '*' && i+1 < len(pattern) && pattern[i+1] == '*':
			re.WriteString(".*")
			i++
		case c == '*':
			re.WriteString("[^/]*")
		case c == '?' || c == '+':
			re.WriteByte(c)
		case c == '[':
			end := strings.IndexByte(pattern[i:], ']')
			if end < 0 {
				re.WriteString(regexp.QuoteMeta(pattern[i:]))
				i = len(pattern)
				continue
			}
			re.WriteString(pattern[i : i+end+1])
			i += end
		case c == '\\' && i+1 < len(pattern):
			re.WriteString(regexp.QuoteMeta(pattern[i+1 : i+2]))
			i++
		default:
			re.WriteString(regexp.QuoteMeta(string(c)))
		}
	}
	re.WriteString("$")
	rx, err := regexp.Compile(re.String())
	if err != nil {
		return true // a pattern we cannot read: assume it may match
	}
	return rx.MatchString(name)
}

var (
	secretName    = regexp.MustCompile(`(?i)(?:^|[^.\w-])secrets\s*(?:\.\s*([A-Za-z_][A-Za-z0-9_-]*)|\[\s*'([^']*)'\s*\]|\[\s*"([^"]*)"\s*\])`)
	expression    = regexp.MustCompile(`\$\{\{([^}]|\}[^}])*\}\}`)
	secretsWhole  = regexp.MustCompile(`(?i)(?:^|[^.\w-])secrets\b\s*($|[^.\[\s]|\s+[^.\[\s])`)
	secretsInline = "secrets: inherit"
)

func parseWorkflow(f WorkflowFile) (parsedWorkflow, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal([]byte(f.Content), &doc); err != nil {
		return parsedWorkflow{}, fmt.Errorf("not valid YAML: %w", err)
	}
	wf := parsedWorkflow{path: f.Path, name: f.Path, on: map[string]*yaml.Node{}}
	if len(doc.Content) == 0 {
		return wf, nil
	}
	root := deref(doc.Content[0])
	if n := mapValue(root, "name"); n != nil && n.Kind == yaml.ScalarNode && n.Value != "" {
		wf.name = n.Value
	}
	on := mapValue(root, "on")
	switch {
	case on == nil:
	case on.Kind == yaml.ScalarNode:
		wf.on[on.Value] = nil
	case on.Kind == yaml.SequenceNode:
		for _, ev := range on.Content {
			wf.on[deref(ev).Value] = nil
		}
	case on.Kind == yaml.MappingNode:
		for i := 0; i+1 < len(on.Content); i += 2 {
			wf.on[deref(on.Content[i]).Value] = deref(on.Content[i+1])
		}
	}
	seen := map[string]bool{}
	add := func(s string) {
		if !seen[s] {
			seen[s] = true
			wf.secrets = append(wf.secrets, s)
		}
	}
	walkScalars(root, func(key string, n *yaml.Node) {
		if strings.EqualFold(key, "secrets") && n.Value == "inherit" {
			add(secretsInline)
		}
		for _, m := range secretName.FindAllStringSubmatch(n.Value, -1) {
			name := m[1] + m[2] + m[3]
			if !strings.EqualFold(name, "GITHUB_TOKEN") {
				add("secrets." + name)
			}
		}
		for _, e := range expression.FindAllString(n.Value, -1) {
			if secretsWhole.MatchString(e) {
				add("the whole secrets context")
			}
		}
	})
	return wf, nil
}

// walkScalars calls fn with every scalar value under n and the mapping key it is the
// value of ("" in a sequence). Aliases are followed once.
func walkScalars(n *yaml.Node, fn func(key string, v *yaml.Node)) {
	var walk func(key string, n *yaml.Node, depth int)
	walk = func(key string, n *yaml.Node, depth int) {
		if n == nil || depth > 64 {
			return
		}
		switch n.Kind {
		case yaml.AliasNode:
			walk(key, n.Alias, depth+1)
		case yaml.ScalarNode:
			fn(key, n)
		case yaml.MappingNode:
			for i := 0; i+1 < len(n.Content); i += 2 {
				walk(n.Content[i].Value, n.Content[i+1], depth+1)
			}
		case yaml.SequenceNode, yaml.DocumentNode:
			for _, c := range n.Content {
				walk("", c, depth+1)
			}
		}
	}
	walk("", n, 0)
}

func deref(n *yaml.Node) *yaml.Node {
	for i := 0; n != nil && n.Kind == yaml.AliasNode && i < 8; i++ {
		n = n.Alias
	}
	return n
}

// mapValue returns the value of key in mapping n, or nil.
func mapValue(n *yaml.Node, key string) *yaml.Node {
	n = deref(n)
	if n == nil || n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if deref(n.Content[i]).Value == key {
			return deref(n.Content[i+1])
		}
	}
	return nil
}

func hasKey(n *yaml.Node, key string) bool { return mapValue(n, key) != nil }

// listOf reads a scalar or a sequence of scalars.
func listOf(n *yaml.Node) []string {
	switch {
	case n == nil:
		return nil
	case n.Kind == yaml.ScalarNode:
		return []string{n.Value}
	case n.Kind == yaml.SequenceNode:
		var out []string
		for _, c := range n.Content {
			if c = deref(c); c.Kind == yaml.ScalarNode {
				out = append(out, c.Value)
			}
		}
		return out
	}
	return nil
}
