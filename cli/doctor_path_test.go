package cli

import (
	"path/filepath"
	"strings"
	"testing"
)

// doctor names the PATH entries under HOME and the relative ones, which the box does
// not see, and says how to add a toolchain (WHILLY_SANDBOX_TOOLS); one listed there is
// seen.
func TestDoctorSandboxPath(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	goBin, cargoBin := filepath.Join(home, "go", "bin"), filepath.Join(home, ".cargo", "bin")
	path := strings.Join([]string{"/usr/local/go/bin", goBin, cargoBin, "node_modules/.bin", "/usr/bin"}, ":")
	cases := []struct {
		env    map[string]string
		status string
		names  []string
		not    []string
	}{
		{map[string]string{"PATH": path, "HOME": home}, checkWarn,
			[]string{goBin, cargoBin, "node_modules/.bin", "WHILLY_SANDBOX_TOOLS=" + goBin + "," + cargoBin}, []string{"/usr/bin", "/usr/local/go/bin"}},
		{map[string]string{"PATH": path, "HOME": home, "WHILLY_SANDBOX_TOOLS": filepath.Join(home, "go") + "," + filepath.Join(home, ".cargo")}, checkWarn,
			[]string{"node_modules/.bin"}, []string{goBin, cargoBin}},
		{map[string]string{"PATH": "/usr/local/go/bin:/usr/bin", "HOME": home}, checkOK, nil, nil},
	}
	for i, c := range cases {
		rep := &doctorReport{}
		doctorSandboxPath(func(k string) string { return c.env[k] }, rep)
		if len(rep.Checks) != 1 || rep.Checks[0].Name != "sandbox path" || rep.Checks[0].Status != c.status {
			t.Errorf("case %d: %+v, want one sandbox path line, %s", i, rep.Checks, c.status)
			continue
		}
		d := rep.Checks[0].Detail
		for _, n := range c.names {
			if !strings.Contains(d, n) {
				t.Errorf("case %d: %q does not name %s", i, d, n)
			}
		}
		for _, n := range c.not {
			if strings.Contains(d, n+",") || strings.Contains(d, n+";") || strings.HasSuffix(d, n) {
				t.Errorf("case %d: %q names %s", i, d, n)
			}
		}
	}
	rep := &doctorReport{}
	doctorSandboxPath(func(k string) string { return map[string]string{"PATH": path, "WHILLY_SANDBOX": "none"}[k] }, rep)
	if len(rep.Checks) != 0 {
		t.Errorf("with WHILLY_SANDBOX=none: %+v", rep.Checks)
	}
}
