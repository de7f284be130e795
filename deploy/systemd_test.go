package deploy_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// TestSystemdUnits verifies the units with systemd's own analyzer (unit syntax, and the
// exposure score of the hardening options), with the binaries swapped for /bin/true.
func TestSystemdUnits(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		if os.Getenv("WHILLY_TEST_SANDBOX") == "require" {
			t.Fatal("WHILLY_TEST_SANDBOX=require, but systemd-analyze is not installed (apt-get install systemd)")
		}
		t.Skip("systemd-analyze is not installed")
	}
	dir := t.TempDir()
	units := map[string]struct {
		src      string
		exposure float64 // systemd-analyze security: 0 best, 10 worst
	}{
		"whilly-serve.service": {"systemd/whilly-serve.service", 2},
		// bubblewrap needs namespaces, so the worker keeps RestrictNamespaces off.
		"whilly-worker@1.service": {"systemd/whilly-worker@.service", 5},
	}
	var names []string
	for name, u := range units {
		body := strings.NewReplacer("/usr/local/bin/whilly-worker", "/bin/true", "/usr/local/bin/whilly", "/bin/true").
			Replace(readFile(t, u.src))
		if err := os.WriteFile(filepath.Join(dir, name), []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
		names = append(names, name)
	}
	verify := func() {
		t.Helper()
		cmd := exec.CommandContext(t.Context(), "systemd-analyze", append([]string{"verify"}, names...)...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil || len(strings.TrimSpace(string(out))) > 0 {
			t.Errorf("systemd-analyze verify: %v\n%s", err, out)
		}
	}
	verify()
	score := regexp.MustCompile(`Overall exposure level for \S+: (\d+\.\d+)`)
	for name, u := range units {
		cmd := exec.CommandContext(t.Context(), "systemd-analyze", "security", "--offline=yes", name)
		cmd.Dir = dir
		out, _ := cmd.CombinedOutput() // exits non-zero above its own threshold; the score decides
		m := score.FindSubmatch(out)
		if m == nil {
			t.Errorf("systemd-analyze security %s printed no score:\n%s", name, out)
			continue
		}
		if got, _ := strconv.ParseFloat(string(m[1]), 64); got > u.exposure {
			t.Errorf("%s: exposure %.1f, want at most %.1f", name, got, u.exposure)
		}
	}
	// The planner drop-in, where systemd finds it next to the unit (after the exposure
	// scores, which it worsens on purpose).
	if err := os.Mkdir(filepath.Join(dir, "whilly-serve.service.d"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "whilly-serve.service.d", "planner.conf"), []byte(readFile(t, "systemd/whilly-serve-planner.conf")), 0o600); err != nil {
		t.Fatal(err)
	}
	verify()
}

// The shipped examples register scoped workers: each says how to mint a bootstrap token
// with --scope.
func TestExamplesRegisterScopedWorkers(t *testing.T) {
	t.Parallel()
	for _, f := range []string{"systemd/worker.env.example", "compose/whilly.env.example", chartDir + "/values.yaml", chartDir + "/templates/NOTES.txt"} {
		if !strings.Contains(readFile(t, f), "--bootstrap --scope repo:") {
			t.Errorf("%s does not say how to mint a scoped bootstrap token for the workers", f)
		}
	}
	for _, f := range []string{"systemd/whilly.env.example", "systemd/worker.env.example"} {
		names := varName.FindAllString(readFile(t, f), -1)
		if bad := unknownVariables(t, names); len(bad) > 0 {
			t.Errorf("%s names variables whilly does not read: %v", f, bad)
		}
	}
}
