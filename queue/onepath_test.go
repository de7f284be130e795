package queue_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// TestOneStatementWritesDONE: a task becomes DONE through one SQL text, whatever the
// path — a batch of completions, the batch again under the plan's row lock, or a single
// completion that charges a cost or that a batch left out (a locked batch of one). A
// second text that writes DONE would be a second completion path to keep in step.
func TestOneStatementWritesDONE(t *testing.T) {
	files, err := filepath.Glob("*.go")
	if err != nil {
		t.Fatal(err)
	}
	// An UPDATE of tasks, its SET list up to WHERE, FROM or the end of the text.
	update := regexp.MustCompile("(?is)UPDATE\\s+tasks\\b(?:\\s+\\w+)?\\s+SET\\s.*?(?:\\bWHERE\\b|\\bFROM\\b|`)")
	done := regexp.MustCompile(`(?i)\bstatus\s*=\s*'DONE'`)
	var found []string
	for _, f := range files {
		if strings.HasSuffix(f, "_test.go") {
			continue
		}
		src, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for _, set := range update.FindAll(src, -1) {
			if done.Match(set) {
				found = append(found, f)
			}
		}
	}
	if len(found) != 1 {
		t.Errorf("%d SQL texts write status DONE (in %v); want one, completeTasksSQL", len(found), found)
	}
}
