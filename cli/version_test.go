package cli_test

import (
	"encoding/json"
	"runtime"
	"strings"
	"testing"
)

func TestVersion(t *testing.T) {
	t.Parallel()
	code, text, stderr := run(t, "", "", "version")
	if code != 0 || stderr != "" {
		t.Fatalf("version: exit %d, stderr %q", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(text, "\n"), "\n")
	if len(lines) != 4 || !strings.HasPrefix(lines[0], "whilly ") || !strings.HasPrefix(lines[1], "commit  ") ||
		!strings.HasPrefix(lines[2], "built   ") || lines[3] != "go      "+runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("version printed:\n%s", text)
	}
	if code, flag, _ := run(t, "", "", "--version"); code != 0 || flag != text {
		t.Errorf("--version: exit %d, printed\n%s\nwant what 'whilly version' prints:\n%s", code, flag, text)
	}
	code, js, _ := run(t, "", "", "version", "--json")
	var info struct{ Version, Platform string }
	if err := json.Unmarshal([]byte(js), &info); err != nil || code != 0 {
		t.Fatalf("version --json: exit %d, %v:\n%s", code, err, js)
	}
	if "whilly "+info.Version != lines[0] || info.Platform != runtime.GOOS+"/"+runtime.GOARCH {
		t.Errorf("version --json = %+v, text says %q", info, lines[0])
	}
	if code, _, stderr := run(t, "", "", "version", "extra"); code != 2 || !strings.Contains(stderr, "takes no arguments") {
		t.Errorf("version extra: exit %d, stderr %q", code, stderr)
	}
}
