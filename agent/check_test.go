package agent_test

import (
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/agent"
)

func TestCheckNamesTheVariableAndTheInstallCommand(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	fake := filepath.Join(dir, "claude")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir()
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	newAgent := func(name string, cfg agent.Config) agent.Agent {
		a, err := agent.New(name, cfg)
		if err != nil {
			t.Fatal(err)
		}
		return a
	}
	missing := filepath.Join(dir, "nope")
	cases := []struct {
		name  string
		agent agent.Agent
		env   map[string]string
		want  []string // "" means it passes
	}{
		{"claude missing", newAgent("claude", agent.Config{ClaudeBin: missing}), map[string]string{"HOME": home},
			[]string{"CLAUDE_BIN", "npm install -g @anthropic-ai/claude-code", missing}},
		{"codex missing", newAgent("codex", agent.Config{CodexBin: missing}), map[string]string{"HOME": home},
			[]string{"CODEX_BIN", "npm install -g @openai/codex"}},
		{"claude logged out", newAgent("claude", agent.Config{ClaudeBin: fake}), map[string]string{"HOME": home},
			[]string{"not logged in", "ANTHROPIC_API_KEY", ".claude/.credentials.json"}},
		{"claude with a key", newAgent("claude", agent.Config{ClaudeBin: fake}), map[string]string{"HOME": home, "ANTHROPIC_API_KEY": "k"}, nil},
		{"sim", newAgent("sim", agent.Config{}), nil, nil},
	}
	for _, c := range cases {
		err := agent.Check(c.agent, env(c.env))
		if c.want == nil {
			if err != nil {
				t.Errorf("%s: %v, want no error", c.name, err)
			}
			continue
		}
		if !errors.Is(err, agent.ErrNotReady) {
			t.Errorf("%s: %v, want ErrNotReady", c.name, err)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not name %q", c.name, err, w)
			}
		}
	}
	// Logged in through the CLI's own login file.
	if err := os.MkdirAll(filepath.Join(home, ".claude"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(home, ".claude", ".credentials.json"), []byte(`{"claudeAiOauth":{}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := agent.Check(newAgent("claude", agent.Config{ClaudeBin: fake}), env(map[string]string{"HOME": home})); err != nil {
		t.Errorf("claude logged in with a credentials file: %v", err)
	}
}

// Codex with a custom model provider in its config.toml (CODEX_HOME or ~/.codex) is ready
// when the provider's key variable is set, and not when it is missing; a provider that
// needs no key is ready.
func TestCheckCodexCustomProvider(t *testing.T) {
	t.Parallel()
	fake := filepath.Join(t.TempDir(), "codex")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	a, err := agent.New("codex", agent.Config{CodexBin: fake})
	if err != nil {
		t.Fatal(err)
	}
	withKey := "model_provider = \"corp\"\n[model_providers.corp]\nbase_url = \"https://llm.corp.example/v1\"\nenv_key = \"CORP_LLM_KEY\"\n"
	keyless := "profile = \"local\"\n[profiles.local]\nmodel_provider = \"ollama\"\n[model_providers.ollama]\nbase_url = \"http://127.0.0.1:11434/v1\"\n"
	home, codexHome, keylessHome := t.TempDir(), t.TempDir(), t.TempDir()
	write := func(p, body string) {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(home, ".codex", "config.toml"), withKey)
	write(filepath.Join(codexHome, "config.toml"), withKey)
	write(filepath.Join(keylessHome, ".codex", "config.toml"), keyless)
	env := func(m map[string]string) func(string) string { return func(k string) string { return m[k] } }
	for _, m := range []map[string]string{
		{"HOME": home, "CORP_LLM_KEY": "k"},
		{"HOME": t.TempDir(), "CODEX_HOME": codexHome, "CORP_LLM_KEY": "k"},
		{"HOME": keylessHome},
	} {
		if err := agent.Check(a, env(m)); err != nil {
			t.Errorf("%v: %v, want ready", m, err)
		}
	}
	err = agent.Check(a, env(map[string]string{"HOME": home}))
	if !errors.Is(err, agent.ErrNotReady) || !strings.Contains(err.Error(), "CORP_LLM_KEY") || !strings.Contains(err.Error(), `"corp"`) {
		t.Errorf("the provider's key unset: %v, want not ready naming CORP_LLM_KEY and the provider", err)
	}
}

// A login whose access token has expired is not ready, and the error says what to do:
// the box never refreshes it.
func TestCheckExpiredLogin(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	for _, n := range []string{"claude", "codex"} {
		if err := os.WriteFile(filepath.Join(dir, n), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	jwt := func(exp int64) string {
		return "e30." + base64.RawURLEncoding.EncodeToString([]byte(fmt.Sprintf(`{"exp":%d}`, exp))) + ".sig"
	}
	past, future := time.Now().Add(-time.Hour), time.Now().Add(time.Hour)
	cases := []struct {
		agent, file, body string
		ready             bool
	}{
		{"claude", ".claude/.credentials.json", fmt.Sprintf(`{"claudeAiOauth":{"accessToken":"a","expiresAt":%d}}`, past.UnixMilli()), false},
		{"claude", ".claude/.credentials.json", fmt.Sprintf(`{"claudeAiOauth":{"accessToken":"a","expiresAt":%d}}`, future.UnixMilli()), true},
		{"codex", ".codex/auth.json", fmt.Sprintf(`{"OPENAI_API_KEY":null,"tokens":{"access_token":%q}}`, jwt(past.Unix())), false},
		{"codex", ".codex/auth.json", fmt.Sprintf(`{"OPENAI_API_KEY":null,"tokens":{"access_token":%q}}`, jwt(future.Unix())), true},
		{"codex", ".codex/auth.json", fmt.Sprintf(`{"OPENAI_API_KEY":"sk-x","tokens":{"access_token":%q}}`, jwt(past.Unix())), true},
	}
	for i, c := range cases {
		home := t.TempDir()
		p := filepath.Join(home, c.file)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(c.body), 0o600); err != nil {
			t.Fatal(err)
		}
		a, err := agent.New(c.agent, agent.Config{ClaudeBin: filepath.Join(dir, "claude"), CodexBin: filepath.Join(dir, "codex")})
		if err != nil {
			t.Fatal(err)
		}
		err = agent.Check(a, func(k string) string { return map[string]string{"HOME": home}[k] })
		switch {
		case c.ready && err != nil:
			t.Errorf("case %d: %v, want ready", i, err)
		case !c.ready && (!errors.Is(err, agent.ErrNotReady) || !strings.Contains(err.Error(), "expired") || !strings.Contains(err.Error(), "outside the box")):
			t.Errorf("case %d: %v, want not ready: expired, refresh it outside the box", i, err)
		}
	}
}

// WHILLY_AGENT_HOME is where the login is looked for, as the box is seeded from it.
func TestCheckAgentHome(t *testing.T) {
	t.Parallel()
	fake := filepath.Join(t.TempDir(), "claude")
	if err := os.WriteFile(fake, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	a, err := agent.New("claude", agent.Config{ClaudeBin: fake})
	if err != nil {
		t.Fatal(err)
	}
	agentHome := t.TempDir()
	if err := os.MkdirAll(filepath.Join(agentHome, ".claude"), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(agentHome, ".claude", ".credentials.json"), []byte(`{"claudeAiOauth":{"accessToken":"a"}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"HOME": t.TempDir(), "WHILLY_AGENT_HOME": agentHome}
	if err := agent.Check(a, func(k string) string { return env[k] }); err != nil {
		t.Errorf("logged in in WHILLY_AGENT_HOME: %v", err)
	}
}
