package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// writeFiles writes files (relative path → content) under root, mode 0600.
func writeFiles(t *testing.T, root string, files map[string]string) {
	t.Helper()
	for name, body := range files {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
}

// The worker's logins, as the CLIs write them.
const (
	claudeLogin = `{"claudeAiOauth":{"accessToken":"sk-ant-oat01-workerAccess","refreshToken":"sk-ant-ort01-workerRefresh",` +
		`"expiresAt":4102444800000,"scopes":["user:inference","user:profile"],"subscriptionType":"max"}}`
	codexLogin = `{"OPENAI_API_KEY":null,"tokens":{"id_token":"workerIdToken","access_token":"workerAccessToken",` +
		`"refresh_token":"workerRefreshToken","account_id":"acct-1"},"last_refresh":"2026-12-01T00:00:00Z"}`
)

// runSpec prepares spec in s, runs it and closes the box; it returns the output.
func runSpec(t *testing.T, s *Sandbox, spec Spec) (string, error) {
	t.Helper()
	c, err := s.Prepare(ctxT(t), spec)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	return runCmd(t, c)
}

// An agent that puts its own login (its attacker's model account) in the box's
// credential files, however it can, changes nothing of the worker's.
func TestBoxCredentialsDoNotFlowBack(t *testing.T) {
	t.Parallel()
	s := boxT(t, Settings{Net: NetNone})
	home := t.TempDir()
	writeFiles(t, home, map[string]string{".claude/.credentials.json": claudeLogin, ".codex/auth.json": codexLogin})
	script := `cd "$HOME" || exit 1
for f in .claude/.credentials.json .codex/auth.json; do
  echo '{"attacker":1}' > "$f" 2>/dev/null ||
  { rm -f "$f"; echo '{"attacker":1}' > "$f"; } 2>/dev/null ||
  { mv "$(dirname "$f")" "$(dirname "$f").old" && mkdir "$(dirname "$f")" && echo '{"attacker":1}' > "$f"; } 2>/dev/null
  cat "$f"
done`
	out, err := runSpec(t, s, Spec{Path: "/bin/sh", Args: []string{"-c", script}, Dir: t.TempDir(), Agent: AgentCommand,
		Environ: []string{"PATH=/usr/bin:/bin", "HOME=" + home}})
	t.Logf("the box: %v\n%s", err, out)
	for name, want := range map[string]string{".claude/.credentials.json": claudeLogin, ".codex/auth.json": codexLogin} {
		if b, _ := os.ReadFile(filepath.Join(home, name)); string(b) != want {
			t.Errorf("the worker's %s is now %s", name, b)
		}
	}
}

// The box gets the access token, never the refresh token, and cannot change its copy.
func TestBoxCredentialsHaveNoRefreshToken(t *testing.T) {
	t.Parallel()
	s := boxT(t, Settings{Net: NetNone})
	home := t.TempDir()
	writeFiles(t, home, map[string]string{".claude/.credentials.json": claudeLogin, ".codex/auth.json": codexLogin})
	script := `cd "$HOME" || exit 1
for f in .claude/.credentials.json .codex/auth.json; do
  cat "$f"; echo
  if (: >> "$f") 2>/dev/null; then echo "$f is writable"; fi
done`
	out, err := runSpec(t, s, Spec{Path: "/bin/sh", Args: []string{"-c", script}, Dir: t.TempDir(), Agent: AgentCommand,
		Environ: []string{"PATH=/usr/bin:/bin", "HOME=" + home}})
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	for _, want := range []string{"sk-ant-oat01-workerAccess", `"expiresAt":4102444800000`, `"subscriptionType":"max"`, `"user:inference"`,
		"workerAccessToken", "workerIdToken", `"account_id":"acct-1"`} {
		if !strings.Contains(out, want) {
			t.Errorf("the box's credentials lack %s:\n%s", want, out)
		}
	}
	for _, leak := range []string{"Refresh", "refresh_token", "refreshToken", "writable"} {
		if strings.Contains(out, leak) {
			t.Errorf("the box's credentials show %q:\n%s", leak, out)
		}
	}
}

// A 0600 token file in /opt and a token file lying next to the agent's command are not
// in the box; the command itself runs.
func TestBoxHidesOptAndTheCommandsNeighbours(t *testing.T) {
	t.Parallel()
	s := boxT(t, Settings{Net: NetNone})
	opt, err := os.MkdirTemp("/opt", "whilly-test-")
	if err != nil {
		t.Skipf("cannot make a directory in /opt: %v", err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(opt) })
	writeFiles(t, opt, map[string]string{"token": "optSecretToken"})
	bin := t.TempDir()
	writeFiles(t, bin, map[string]string{"bootstrap-token": "bootstrapSecretToken"})
	agent := filepath.Join(bin, "agent.sh")
	if err := os.WriteFile(agent, []byte("#!/bin/sh\necho started\ncat "+opt+"/token \"$(dirname \"$0\")/bootstrap-token\"\nls \"$(dirname \"$0\")\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out, _ := runSpec(t, s, Spec{Path: agent, Dir: t.TempDir(), Agent: AgentCommand,
		Environ: []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir()}})
	if !strings.Contains(out, "started") {
		t.Fatalf("the agent's command did not run in the box:\n%s", out)
	}
	for _, leak := range []string{"optSecretToken", "bootstrapSecretToken", "bootstrap-token\n"} {
		if strings.Contains(out, leak) {
			t.Errorf("the box shows %q:\n%s", leak, out)
		}
	}
}

// settingsT reads the sandbox's settings from env, as the worker does.
func settingsT(t *testing.T, env map[string]string) Settings {
	t.Helper()
	set, err := SettingsFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	return set
}

// codexProviderConfig selects a custom model provider whose key is in CORP_LLM_KEY.
const codexProviderConfig = `# the operator's codex
model = "corp-large"
model_provider = "corp"   # not OpenAI

[model_providers.corp]
name = "Corp LLM"
base_url = "https://llm.corp.example:8443/v1"
env_key = "CORP_LLM_KEY"

[model_providers.other]
base_url = "https://other.example/v1"
env_key = "OTHER_KEY"
`

// Codex with a custom model provider: its key variable reaches the box (and no other
// provider's), its base URL's host is allowed by the proxy; CODEX_HOME is where the
// worker keeps codex's files.
func TestBoxCodexCustomProvider(t *testing.T) {
	t.Parallel()
	s := boxT(t, Settings{Net: NetNone})
	codexHome := t.TempDir()
	writeFiles(t, codexHome, map[string]string{"config.toml": codexProviderConfig})
	environ := []string{"PATH=/usr/bin:/bin", "HOME=" + t.TempDir(), "CODEX_HOME=" + codexHome, "CORP_LLM_KEY=corpKey1", "OTHER_KEY=otherKey2"}
	out, err := runSpec(t, s, Spec{Path: "/bin/sh", Args: []string{"-c", `echo "key=$CORP_LLM_KEY other=$OTHER_KEY"; grep -c env_key "$HOME/.codex/config.toml"`},
		Dir: t.TempDir(), Agent: AgentCodex, Environ: environ})
	if err != nil || out != "key=corpKey1 other=\n2\n" {
		t.Errorf("the box: %v\n%s", err, out)
	}
	getenv := lookup(environ)
	_, baseURLs := customProviders(AgentCodex, s.files(getenv))
	p := &proxy{cfg: proxyConfig{rules: allowRules(AgentCodex, getenv, nil, baseURLs)}}
	if !p.allowed("llm.corp.example", 8443) || p.allowed("other.example", 443) || p.allowed("llm.corp.example", 443) {
		t.Errorf("the proxy's rules for the custom provider: %+v", p.cfg.rules)
	}
}

// WHILLY_AGENT_HOME seeds the box's HOME instead of the worker's HOME; whilly never
// writes it, whatever the agent does with its copy.
func TestBoxSeededFromAgentHome(t *testing.T) {
	t.Parallel()
	agentHome := t.TempDir()
	writeFiles(t, agentHome, map[string]string{".claude/.credentials.json": claudeLogin, ".claude/CLAUDE.md": "operator rules",
		".codex/config.toml": `model = "o3"`, ".ssh/id_ed25519": "operatorKey"})
	home := t.TempDir()
	writeFiles(t, home, map[string]string{".claude/CLAUDE.md": "worker's own rules"})
	before := snapshot(t, agentHome)
	s := boxT(t, settingsT(t, map[string]string{"WHILLY_SANDBOX_NET": "none", "WHILLY_AGENT_HOME": agentHome}))
	script := `cat "$HOME/.claude/CLAUDE.md"; echo; cat "$HOME/.codex/config.toml"; echo; cat "$HOME/.ssh/id_ed25519" 2>/dev/null
echo poisoned > "$HOME/.claude/CLAUDE.md"; echo '{}' > "$HOME/.claude/.credentials.json"; echo x > "$HOME/.codex/config.toml"`
	out, err := runSpec(t, s, Spec{Path: "/bin/sh", Args: []string{"-c", script}, Dir: t.TempDir(), Agent: AgentCommand,
		Environ: []string{"PATH=/usr/bin:/bin", "HOME=" + home}})
	t.Logf("the box: %v\n%s", err, out)
	if !strings.HasPrefix(out, "operator rules\nmodel = \"o3\"\n") || strings.Contains(out, "operatorKey") || strings.Contains(out, "worker's own") {
		t.Errorf("the box's HOME is not seeded from WHILLY_AGENT_HOME (and only its agent configuration):\n%s", out)
	}
	if after := snapshot(t, agentHome); after != before {
		t.Errorf("WHILLY_AGENT_HOME changed:\nbefore %s\nafter  %s", before, after)
	}
}

// snapshot is every file under root with its mode, mtime and contents.
func snapshot(t *testing.T, root string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		body := ""
		if fi.Mode().IsRegular() {
			raw, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			body = string(raw)
		}
		fmt.Fprintf(&b, "%s %v %d %q; ", p, fi.Mode(), fi.ModTime().UnixNano(), body)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// WHILLY_SANDBOX_TOOLS: a toolchain under the worker's HOME (rustup's, pyenv's) is in the
// box, read-only; HOME itself, or a directory holding it, is refused.
func TestBoxSandboxTools(t *testing.T) {
	t.Parallel()
	home := t.TempDir()
	writeFiles(t, home, map[string]string{".rustup/toolchains/stable/bin/rustc": "#!/bin/sh\necho rustc 1.0\n",
		".git-credentials": "workerGitSecret"})
	if err := os.Chmod(filepath.Join(home, ".rustup/toolchains/stable/bin/rustc"), 0o755); err != nil {
		t.Fatal(err)
	}
	tools := filepath.Join(home, ".rustup")
	s := boxT(t, settingsT(t, map[string]string{"WHILLY_SANDBOX_NET": "none", "WHILLY_SANDBOX_TOOLS": tools, "HOME": home}))
	script := `"$0/toolchains/stable/bin/rustc"; cat "$1/.git-credentials" 2>/dev/null
if touch "$0/planted" 2>/dev/null; then echo writable; fi`
	out, err := runSpec(t, s, Spec{Path: "/bin/sh", Args: []string{"-c", script, tools, home}, Dir: t.TempDir(), Agent: AgentCommand,
		Environ: []string{"PATH=/usr/bin:/bin", "HOME=" + home}})
	if err != nil || out != "rustc 1.0\n" {
		t.Errorf("the box with WHILLY_SANDBOX_TOOLS=%s: %v\n%s", tools, err, out)
	}
	for _, bad := range []string{home, filepath.Dir(home), "/", "relative/dir"} {
		_, err := SettingsFromEnv(func(k string) string {
			return map[string]string{"WHILLY_SANDBOX_TOOLS": "/usr/local/go," + bad, "HOME": home}[k]
		})
		if err == nil || !strings.Contains(err.Error(), "WHILLY_SANDBOX_TOOLS") {
			t.Errorf("WHILLY_SANDBOX_TOOLS=%s: %v, want it refused", bad, err)
		}
	}
}

// What the box binds for each PATH entry, and which it does not show.
func TestPathEntry(t *testing.T) {
	t.Parallel()
	home := "/srv/app/home"
	cases := []struct {
		entry, bind string
		hidden      bool
	}{
		{"/opt/go/bin", "/opt/go", false},       // a toolchain: its directory, for bin's links into it
		{"/opt/bin", "/opt/bin", false},         // never /opt whole
		{"/srv/app/bin", "/srv/app/bin", false}, // its parent holds HOME
		{"/opt/node/bin/", "/opt/node", false},  // cleaned
		{"/data/tools", "/data/tools", false},   // not a bin directory
		{"/usr/local/go/bin", "", false},        // a system directory: there anyway
		{"/bin", "", false},
		{home + "/go/bin", "", true}, // under HOME
		{home, "", true},             // HOME itself
		{"/srv", "", true},           // holds HOME
		{"/", "", true},
		{"node_modules/.bin", "", true}, // relative
		{"/proc/self/cwd", "", true},
	}
	for _, c := range cases {
		if bind, hidden := pathEntry(c.entry, home); bind != c.bind || hidden != c.hidden {
			t.Errorf("pathEntry(%q) = %q %v, want %q %v", c.entry, bind, hidden, c.bind, c.hidden)
		}
	}
}
