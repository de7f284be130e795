// Package docs holds whilly's documentation; its test keeps the documentation's links
// inside the repository and pointing at files and headings that exist.
package docs

import (
	"io/fs"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

var (
	inlineLink = regexp.MustCompile(`!?\[[^\]]*\]\(\s*<?([^)\s>]+)>?(?:\s+"[^"]*")?\s*\)`)
	refLink    = regexp.MustCompile(`(?m)^\s{0,3}\[[^\]]+\]:\s*<?(\S+?)>?(?:\s+.*)?$`)
	htmlLink   = regexp.MustCompile(`(?i)\b(?:href|src)\s*=\s*"([^"]+)"`)
	codeSpan   = regexp.MustCompile("`[^`\n]*`")
	scheme     = regexp.MustCompile(`^[a-zA-Z][a-zA-Z0-9+.-]*:`)
	heading    = regexp.MustCompile(`(?m)^#{1,6}\s+(.+?)\s*#*\s*$`)
)

// TestLinksStayInTheRepository checks every relative link of every Markdown file of the
// repository (README.md, docs/ and the rest): it must resolve to a file inside the
// repository, and its #anchor to a heading of that file. No document may send readers
// outside the repository (../shared …), in a link or in plain text.
func TestLinksStayInTheRepository(t *testing.T) {
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	var files []string
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == "node_modules" || d.Name() == ".data") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, file := range files {
		rel, _ := filepath.Rel(root, file)
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if strings.Contains(text, "../shared") {
			t.Errorf("%s sends readers to ../shared, outside the repository", rel)
		}
		for _, target := range links(text) {
			checked++
			if msg := checkLink(root, file, target); msg != "" {
				t.Errorf("%s: link %q %s", rel, target, msg)
			}
		}
	}
	if len(files) < 5 || checked < 10 {
		t.Fatalf("checked %d links in %d files: is the walk rooted at the repository?", checked, len(files))
	}
}

// links returns the link targets of a Markdown text, outside fenced code and code spans.
func links(text string) []string {
	var prose strings.Builder
	fenced := false
	for line := range strings.SplitSeq(text, "\n") {
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fenced = !fenced
			continue
		}
		if !fenced {
			prose.WriteString(codeSpan.ReplaceAllString(line, "") + "\n")
		}
	}
	var out []string
	for _, re := range []*regexp.Regexp{inlineLink, refLink, htmlLink} {
		for _, m := range re.FindAllStringSubmatch(prose.String(), -1) {
			out = append(out, m[1])
		}
	}
	return out
}

// checkLink says what is wrong with target, a link in file; "" when nothing is.
func checkLink(root, file, target string) string {
	if scheme.MatchString(target) {
		if strings.HasPrefix(strings.ToLower(target), "file:") {
			return "points at a local file outside the repository"
		}
		return "" // a web address
	}
	path, anchor, _ := strings.Cut(target, "#")
	path, err := url.PathUnescape(path)
	if err != nil {
		return "is not a valid path"
	}
	dest := file
	if path != "" {
		if strings.HasPrefix(path, "/") {
			dest = filepath.Join(root, filepath.FromSlash(path))
		} else {
			dest = filepath.Join(filepath.Dir(file), filepath.FromSlash(path))
		}
	}
	if rel, err := filepath.Rel(root, dest); err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "leaves the repository"
	}
	info, err := os.Stat(dest)
	if err != nil {
		return "points at a file that does not exist"
	}
	if anchor == "" || info.IsDir() || !strings.HasSuffix(dest, ".md") {
		return ""
	}
	b, err := os.ReadFile(dest)
	if err != nil {
		return "points at a file that cannot be read"
	}
	if !anchors(string(b))[strings.ToLower(anchor)] {
		return "points at a heading that does not exist"
	}
	return ""
}

// anchors are the ids GitHub gives the headings of a Markdown text.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	fenced := false
	var prose strings.Builder
	for line := range strings.SplitSeq(text, "\n") {
		if t := strings.TrimSpace(line); strings.HasPrefix(t, "```") || strings.HasPrefix(t, "~~~") {
			fenced = !fenced
			continue
		}
		if !fenced {
			prose.WriteString(line + "\n")
		}
	}
	seen := map[string]int{}
	for _, m := range heading.FindAllStringSubmatch(prose.String(), -1) {
		slug := slugify(m[1])
		if n := seen[slug]; n > 0 {
			out[slug+"-"+strconv.Itoa(n)] = true
		} else {
			out[slug] = true
		}
		seen[slug]++
	}
	return out
}

// slugify is GitHub's heading id: lower case, letters, digits, '-' and '_' kept, spaces
// made '-', everything else dropped.
func slugify(h string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(h) {
		switch {
		case unicode.IsLetter(r) || unicode.IsDigit(r) || r == '-' || r == '_':
			b.WriteRune(r)
		case r == ' ':
			b.WriteRune('-')
		}
	}
	return b.String()
}
