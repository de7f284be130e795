package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"testing/iotest"
	"time"
)

func TestMain(m *testing.M) {
	HandleInit()
	// Run in a box with a probe's name as its first argument, this binary probes the box
	// from inside instead of testing.
	if len(os.Args) > 1 && os.Args[1] == probeSyscallsArg {
		os.Exit(probeSyscalls())
	}
	os.Exit(m.Run())
}

func ctxT(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func TestSettingsFromEnv(t *testing.T) {
	t.Parallel()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	s, err := SettingsFromEnv(env(map[string]string{}))
	if err != nil || s.Mode != "" || s.Net != NetProxy || s.Memory != 4<<30 || s.Pids != 1024 || s.Disk != 10<<30 {
		t.Fatalf("defaults: %+v %v", s, err)
	}
	s, err = SettingsFromEnv(env(map[string]string{"WHILLY_SANDBOX_MEMORY": "512M", "WHILLY_SANDBOX_PIDS": "64", "WHILLY_SANDBOX_DISK": "2GiB"}))
	if err != nil || s.Memory != 512<<20 || s.Pids != 64 || s.Disk != 2<<30 {
		t.Fatalf("limits: %+v %v", s, err)
	}
	s, err = SettingsFromEnv(env(map[string]string{"WHILLY_SANDBOX": "None", "WHILLY_SANDBOX_NET": "host",
		"WHILLY_SANDBOX_ALLOW_HOSTS": " proxy.golang.org, *.npmjs.org ,example.com:8443", "WHILLY_AGENT_ENV": "GOFLAGS, NPM_CONFIG_REGISTRY"}))
	if err != nil || s.Mode != ModeNone || s.Net != NetHost || len(s.AllowHosts) != 3 || !slices.Equal(s.AgentEnv, []string{"GOFLAGS", "NPM_CONFIG_REGISTRY"}) {
		t.Fatalf("set: %+v %v", s, err)
	}
	for _, bad := range []map[string]string{
		{"WHILLY_SANDBOX": "docker"},
		{"WHILLY_SANDBOX_NET": "open"},
		{"WHILLY_SANDBOX_ALLOW_HOSTS": "http://evil.example.com/"},
		{"WHILLY_SANDBOX_ALLOW_HOSTS": "example.com:99999"},
		{"WHILLY_AGENT_ENV": "WHILLY_WORKER_TOKEN"},
		{"WHILLY_AGENT_ENV": "WHILLY_DATABASE_URL"},
		{"WHILLY_AGENT_ENV": "A=B"},
		{"WHILLY_AGENT_HOME": "relative/agent-home"},
		{"WHILLY_SANDBOX_TOOLS": "/"},
		{"WHILLY_SANDBOX_MEMORY": "lots"},
		{"WHILLY_SANDBOX_PIDS": "3"},
	} {
		if _, err := SettingsFromEnv(env(bad)); err == nil {
			t.Errorf("%v accepted", bad)
		}
	}
}

func TestAllowRules(t *testing.T) {
	t.Parallel()
	none := func(string) string { return "" }
	cases := []struct {
		kind   string
		getenv func(string) string
		extra  []string
		host   string
		port   int
		want   bool
	}{
		{AgentClaude, none, nil, "api.anthropic.com", 443, true},
		{AgentClaude, none, nil, "API.Anthropic.com", 443, false}, // the proxy lowercases before asking
		{AgentClaude, none, nil, "api.anthropic.com", 22, false},
		{AgentClaude, none, nil, "api.openai.com", 443, false},
		{AgentCodex, none, nil, "api.openai.com", 443, true},
		{AgentNone, none, nil, "api.anthropic.com", 443, false},
		{AgentCommand, none, nil, "api.openai.com", 443, true},
		{AgentClaude, func(k string) string {
			if k == "ANTHROPIC_BASE_URL" {
				return "http://127.0.0.1:4555/v1"
			}
			return ""
		}, nil, "127.0.0.1", 4555, true},
		{AgentClaude, func(k string) string {
			if k == "ANTHROPIC_BASE_URL" {
				return "http://127.0.0.1:4555/v1"
			}
			return ""
		}, nil, "127.0.0.1", 8000, false}, // not the control plane on the same host
		{AgentClaude, func(k string) string {
			if k == "ANTHROPIC_BASE_URL" {
				return "https://gateway.example.com"
			}
			return ""
		}, nil, "api.anthropic.com", 443, false},
		{AgentClaude, none, []string{"*.golang.org"}, "proxy.golang.org", 443, true},
		{AgentClaude, none, []string{"*.golang.org"}, "golang.org.evil.com", 443, false},
		{AgentClaude, none, []string{"registry.npmjs.org:8443"}, "registry.npmjs.org", 443, false},
	}
	for i, c := range cases {
		p := &proxy{cfg: proxyConfig{rules: allowRules(c.kind, c.getenv, c.extra, nil)}}
		if got := p.allowed(c.host, c.port); got != c.want {
			t.Errorf("case %d: %s %s:%d allowed = %v, want %v", i, c.kind, c.host, c.port, got, c.want)
		}
	}
}

func TestAllowedEnv(t *testing.T) {
	t.Parallel()
	environ := []string{"PATH=/usr/bin", "HOME=/root", "LANG=C.UTF-8", "LC_ALL=C", "ANTHROPIC_API_KEY=sk-ant", "OPENAI_API_KEY=sk-oai",
		"WHILLY_WORKER_TOKEN=w", "WHILLY_BOOTSTRAP_TOKEN=b", "GH_TOKEN=g", "AWS_SECRET_ACCESS_KEY=a", "PGPASSWORD=p",
		"HTTPS_PROXY=http://corp:3128", "GOFLAGS=-mod=mod", "WHILLY_PLAN=x"}
	got := allowedEnv(environ, AgentClaude, []string{"GOFLAGS", "WHILLY_WORKER_TOKEN"}, false, "/home/agent",
		[]string{"TMPDIR=/tmp"}, []string{"WHILLY_TASK_ID=T-1", "WHILLY_GITHUB_PRIVATE_KEY=k"})
	want := []string{"PATH=/usr/bin", "LANG=C.UTF-8", "LC_ALL=C", "ANTHROPIC_API_KEY=sk-ant", "GOFLAGS=-mod=mod",
		"HOME=/home/agent", "TMPDIR=/tmp", "WHILLY_TASK_ID=T-1"}
	if !slices.Equal(got, want) {
		t.Errorf("allowedEnv =\n %q\nwant\n %q", got, want)
	}
}

func boxT(t *testing.T, set Settings) *Sandbox {
	t.Helper()
	if err := Check(ctxT(t)); err != nil {
		if os.Getenv("WHILLY_TEST_SANDBOX") == "require" {
			t.Fatalf("the sandbox must work here: %v", err)
		}
		t.Skipf("bubblewrap does not work here: %v", err)
	}
	set.Mode = ModeBwrap
	s, err := New(Config{Settings: set})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// runIn runs sh -c script in a box and returns its output.
func runIn(t *testing.T, s *Sandbox, dir, script string, environ []string) (string, error) {
	t.Helper()
	c, err := s.Prepare(ctxT(t), Spec{Path: "/bin/sh", Args: []string{"-c", script}, Dir: dir, Environ: environ})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return runCmd(t, c)
}

// runCmd runs a prepared Cmd as the agent package does, and returns its output.
func runCmd(t *testing.T, c *Cmd) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctxT(t), c.Path, c.Args...)
	cmd.Dir, cmd.Env, cmd.ExtraFiles, cmd.Stdout, cmd.Stderr = c.Dir, c.Env, c.ExtraFiles, &out, &out
	if err := cmd.Start(); err != nil {
		return "", err
	}
	c.Started(cmd.Process)
	err := cmd.Wait()
	return out.String(), err
}

// The box: the workspace is writable, the system is not, /etc/shadow reads as empty,
// HOME is private and empty, there is no network but loopback, and the host's
// processes are not there.
func TestBoxLayout(t *testing.T) {
	t.Parallel()
	s := boxT(t, Settings{Net: NetNone})
	ws := t.TempDir()
	home := t.TempDir()
	if err := os.WriteFile(filepath.Join(home, ".git-credentials"), []byte("https://x:tok@github.com\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	out, err := runIn(t, s, ws, `
echo hi > inside && echo ws-writable
touch /usr/evil 2>/dev/null || echo usr-readonly
[ -s /etc/shadow ] && echo shadow-visible || echo shadow-hidden
echo "home=$HOME"; ls -A "$HOME" | wc -l
cat /proc/1/cmdline | tr '\0' ' '; echo
ls /sys/class/net 2>/dev/null | tr '\n' ' '; echo
cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' ' | tr '\n' ' '; echo
hostname
`, []string{"PATH=/usr/bin:/bin", "HOME=" + home})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"ws-writable", "usr-readonly", "shadow-hidden", "home=/home/agent\n0\n", "bwrap", "\nlo \n", "whilly-sandbox"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if b, err := os.ReadFile(filepath.Join(ws, "inside")); err != nil || string(b) != "hi\n" {
		t.Errorf("the file written in the box: %q %v", b, err)
	}
}

// A workspace that is HOME, or holds it, would hand the agent everything in it.
func TestBoxRefusesHomeAsWorkspace(t *testing.T) {
	t.Parallel()
	s := boxT(t, Settings{})
	home := t.TempDir()
	for _, dir := range []string{home, filepath.Dir(home), "/"} {
		_, err := s.Prepare(ctxT(t), Spec{Path: "/bin/true", Dir: dir, Environ: []string{"HOME=" + home}})
		if err == nil || !strings.Contains(err.Error(), "expose") {
			t.Errorf("workspace %s: %v", dir, err)
		}
	}
}

// The agent's own configuration is copied in, nothing else of HOME; what the agent
// writes in its HOME does not come back.
func TestBoxHomeSeedAndCredentials(t *testing.T) {
	t.Parallel()
	s := boxT(t, Settings{Net: NetNone})
	home := t.TempDir()
	// The worker's own dotfiles may be links (stow): its configuration is followed.
	dotfile := filepath.Join(t.TempDir(), "claude.json")
	if err := os.WriteFile(dotfile, []byte(`{"x":1}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dotfile, filepath.Join(home, ".claude.json")); err != nil {
		t.Fatal(err)
	}
	for name, body := range map[string]string{".claude/.credentials.json": `{"old":1}`,
		".git-credentials": "secret", ".codex/auth.json": `{"codex":1}`, ".claude/projects/p.jsonl": "history"} {
		p := filepath.Join(home, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	c, err := s.Prepare(ctxT(t), Spec{Path: "/bin/sh", Args: []string{"-c", `find "$HOME" -type f | sort; echo '{"new":2}' > "$HOME/.claude.json"`},
		Dir: t.TempDir(), Agent: AgentClaude, Environ: []string{"PATH=/usr/bin:/bin", "HOME=" + home}})
	if err != nil {
		t.Fatal(err)
	}
	out, err := runCmd(t, c)
	c.Close()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if got := string(out); got != "/home/agent/.claude.json\n/home/agent/.claude/.credentials.json\n" {
		t.Errorf("the box's HOME holds:\n%s", got)
	}
	if b, _ := os.ReadFile(dotfile); string(b) != `{"x":1}` {
		t.Errorf("the box wrote the worker's .claude.json: %s", b)
	}
	if _, err := os.Stat(c.tmp); c.tmp != "" || err == nil {
		t.Errorf("the box's directory is left: %q", c.tmp)
	}
}

func TestCheckAndOpen(t *testing.T) {
	t.Parallel()
	boxT(t, Settings{})
	ctx := ctxT(t)
	sb, err := Open(ctx, Settings{}, true)
	if err != nil || !sb.Boxed() {
		t.Fatalf("Open with bwrap working: %v %v", sb, err)
	}
	sb, err = Open(ctx, Settings{Mode: ModeNone}, true)
	if err != nil || sb == nil || sb.Boxed() || sb.Mode() != ModeNone {
		t.Fatalf("Open none: %v %v", sb, err)
	}
	var nilBox *Sandbox
	if nilBox.Mode() != ModeNone || nilBox.Boxed() || nilBox.Net() != "" {
		t.Errorf("a nil Sandbox must be unboxed")
	}
}

// With bubblewrap missing: unset fails for agents that run processes (naming the fix)
// and gives no box otherwise; bwrap asked for explicitly fails.
func TestOpenWithoutBubblewrap(t *testing.T) {
	t.Parallel()
	cfg := Config{Settings: Settings{Net: NetProxy}, Bwrap: "/nonexistent/bwrap"}
	if _, err := New(cfg); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("New with a missing bwrap: %v", err)
	}
	// Open reads bwrap from PATH; make a PATH without it.
	empty := t.TempDir()
	cmd := exec.CommandContext(ctxT(t), os.Args[0], "-test.run=^TestOpenHelper$")
	cmd.Env = []string{"PATH=" + empty, "SANDBOX_OPEN_HELPER=1"}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"unset+process: agents run in a sandbox by default", "apt-get install bubblewrap", "WHILLY_SANDBOX=none",
		"unset+sim: <nil> <nil>", "bwrap+sim: WHILLY_SANDBOX=bwrap, but"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
}

func TestOpenHelper(t *testing.T) {
	if os.Getenv("SANDBOX_OPEN_HELPER") != "1" {
		t.Skip("run by TestOpenWithoutBubblewrap")
	}
	ctx := ctxT(t)
	_, err := Open(ctx, Settings{}, true)
	fmt.Printf("unset+process: %v\n", err)
	sb, err := Open(ctx, Settings{}, false)
	fmt.Printf("unset+sim: %v %v\n", sb, err)
	_, err = Open(ctx, Settings{Mode: ModeBwrap}, false)
	fmt.Printf("bwrap+sim: %v\n", err)
}

func TestNotDumpable(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("linux only")
	}
	// In a child, so this test process keeps its own setting.
	if os.Getenv("SANDBOX_DUMPABLE_HELPER") == "1" {
		before, _ := Dumpable()
		if err := NotDumpable(); err != nil {
			t.Fatal(err)
		}
		after, _ := Dumpable()
		if !before || after {
			t.Fatalf("dumpable before %v after %v", before, after)
		}
		return
	}
	cmd := exec.CommandContext(ctxT(t), os.Args[0], "-test.run=^TestNotDumpable$")
	cmd.Env = append(os.Environ(), "SANDBOX_DUMPABLE_HELPER=1")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
}

// A CLI installed with npm runs a launcher that finds its native binary in a sibling
// package of node_modules (Codex, Claude Code): its package and that sibling are bound,
// not the rest of node_modules (another package's token), scoped or not.
func TestBoxBindsTheNpmPackageOfACLI(t *testing.T) {
	t.Parallel()
	s := boxT(t, Settings{Net: NetNone})
	for _, scope := range []string{"", "@vendor"} {
		nm := filepath.Join(t.TempDir(), "node_modules")
		pkgs := filepath.Join(nm, scope)
		writeFiles(t, pkgs, map[string]string{
			"cli/bin/cli.sh":              "#!/bin/sh\nd=\"$(dirname \"$0\")/../..\"\ncat \"$d/cli-linux-x64/vendor/native\" \"$d/other/token\" \"$d/clip/token\" " + nm + "/top/token\n",
			"cli-linux-x64/vendor/native": "native binary here\n",
			"other/token":                 "otherPackageToken\n",
			"clip/token":                  "clipPackageToken\n",
		})
		writeFiles(t, nm, map[string]string{"top/token": "topToken\n"})
		if err := os.Chmod(filepath.Join(pkgs, "cli/bin/cli.sh"), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(nm, ".bin"), 0o755); err != nil {
			t.Fatal(err)
		}
		link := filepath.Join(nm, ".bin", "cli")
		if err := os.Symlink(filepath.Join("..", scope, "cli/bin/cli.sh"), link); err != nil {
			t.Fatal(err)
		}
		out, _ := runSpec(t, s, Spec{Path: link, Dir: t.TempDir(), Agent: AgentCodex, Environ: []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}})
		if !strings.HasPrefix(out, "native binary here\n") || strings.Contains(out, "Token") {
			t.Errorf("the npm CLI in %s in the box:\n%s", pkgs, out)
		}
	}
}

// The box directories of a worker that was killed (credentials copies in them) are
// removed; a live worker's, and one not yet marked, stay.
func TestStaleBoxesAreRemoved(t *testing.T) {
	t.Parallel()
	dead := exec.CommandContext(ctxT(t), "/bin/true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mk := func(name, owner string) string {
		p := filepath.Join(dir, boxDirPrefix+name)
		if err := os.MkdirAll(filepath.Join(p, "home", ".claude"), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "home", ".claude", ".credentials.json"), []byte(`{}`), 0o600); err != nil {
			t.Fatal(err)
		}
		if owner != "" {
			if err := os.WriteFile(filepath.Join(p, ownerFile), []byte(owner), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return p
	}
	stale := mk("stale", fmt.Sprint(dead.Process.Pid))
	live := mk("live", fmt.Sprint(os.Getpid()))
	unmarked := mk("new", "")
	removeStaleBoxes(dir)
	if _, err := os.Stat(stale); !os.IsNotExist(err) {
		t.Errorf("the dead worker's box is still there: %v", err)
	}
	for _, p := range []string{live, unmarked} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
}

// The advice follows what failed: a /proc bubblewrap cannot mount again (systemd's
// ProtectKernelTunables=) is not fixed by installing bubblewrap.
func TestFixNamesTheCause(t *testing.T) {
	t.Parallel()
	_, missing := New(Config{Bwrap: "/nonexistent/bwrap"})
	for _, tt := range []struct {
		err       error
		want, not string
	}{
		{missing, "apt-get install bubblewrap", "ProtectKernelTunables"},
		{fmt.Errorf("%w: /usr/bin/bwrap: exit status 1: bwrap: Can't mount proc on /newroot/proc: Operation not permitted", ErrUnavailable),
			"ProtectKernelTunables", "install bubblewrap"},
		{fmt.Errorf("%w: /usr/bin/bwrap: exit status 1: bwrap: No permission to create new namespace, likely because the kernel does not allow non-privileged user namespaces", ErrUnavailable),
			"kernel.apparmor_restrict_unprivileged_userns=0", "install bubblewrap"},
	} {
		got := Fix(tt.err)
		if !strings.Contains(got, tt.want) || strings.Contains(got, tt.not) || !strings.Contains(got, "WHILLY_SANDBOX=none") {
			t.Errorf("Fix(%v) = %q, want it to name %q and not %q", tt.err, got, tt.want, tt.not)
		}
	}
}

// bwrapKnows finds an option in the binary's text without running it, and asks a file
// that does not hold the option's name (a wrapper script) with --help.
func TestBwrapKnows(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	write := func(name, text string, mode os.FileMode) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(text), mode); err != nil {
			t.Fatal(err)
		}
		return p
	}
	// Not executable: found in its text, or not at all.
	binary := write("binary", "\x7fELF…\x00--disable-userns\x00--unshare-user\x00", 0o644)
	wrapper := write("wrapper", "#!/bin/sh\necho '    --disable-'\"userns  Disable further use of user namespaces\"\n", 0o755)
	old := write("old", "#!/bin/sh\necho '    --unshare-user  Create new user namespace'\n", 0o755)
	for _, tt := range []struct {
		path string
		want bool
	}{{binary, true}, {wrapper, true}, {old, false}, {filepath.Join(dir, "missing"), false}} {
		if got := bwrapKnows(tt.path, "--disable-userns"); got != tt.want {
			t.Errorf("bwrapKnows(%s) = %v, want %v", filepath.Base(tt.path), got, tt.want)
		}
	}
}

// holds finds a string wherever it lies, across the pieces it reads too.
func TestHolds(t *testing.T) {
	t.Parallel()
	s := []byte("--disable-userns")
	for _, at := range []int{0, 1, 16<<10 - 8, 16<<10 - 1, 16 << 10, 40<<10 + 3, 100 << 10} {
		data := bytes.Repeat([]byte{'x'}, 100<<10+len(s))
		copy(data[at:], s)
		if !holds(bytes.NewReader(data), s) {
			t.Errorf("not found at %d", at)
		}
		// One byte at a time, too.
		if !holds(iotest.OneByteReader(bytes.NewReader(data)), s) {
			t.Errorf("not found at %d, read a byte at a time", at)
		}
	}
	if holds(bytes.NewReader(bytes.Repeat([]byte("--disable-user"), 5000)), s) {
		t.Error("found in text that does not hold it")
	}
}
