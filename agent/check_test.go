package agent_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
