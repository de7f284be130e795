package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// ErrNotReady means the agent cannot run on this machine at all: its CLI is missing or
// not logged in. It is the environment's fault, never a task's: a worker says so and
// exits (2) before it claims anything, instead of failing every attempt of every task.
var ErrNotReady = errors.New("agent not ready")

// Check tells, before any task is claimed, whether the agent can run here: the claude
// and codex CLIs must be found (CLAUDE_BIN, CODEX_BIN or PATH) and hold credentials —
// an API key in the environment or the login file their CLI writes, which is also all
// the sandbox hands the agent. getenv reads the worker's environment. Agents without
// an executable of their own (sim, command) always pass.
func Check(a Agent, getenv func(string) string) error {
	var (
		name    string
		bin     string
		install string
		binVar  string
		keys    []string
		login   func(home string) []string
		howTo   string
	)
	switch x := a.(type) {
	case *claudeAgent:
		name, bin, binVar = NameClaude, x.r.cfg.ClaudeBin, "CLAUDE_BIN"
		install = "npm install -g @anthropic-ai/claude-code"
		keys = []string{"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN",
			"CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX"}
		login = func(home string) []string {
			files := []string{filepath.Join(home, ".claude", ".credentials.json")}
			if dir := getenv("CLAUDE_CONFIG_DIR"); dir != "" {
				files = append(files, filepath.Join(dir, ".credentials.json"))
			}
			return files
		}
		howTo = "run 'claude' once and log in (/login), or set ANTHROPIC_API_KEY"
	case *codexAgent:
		name, bin, binVar = NameCodex, x.r.cfg.CodexBin, "CODEX_BIN"
		install = "npm install -g @openai/codex"
		keys = []string{"OPENAI_API_KEY", "CODEX_API_KEY"}
		login = func(home string) []string {
			files := []string{filepath.Join(home, ".codex", "auth.json")}
			if dir := getenv("CODEX_HOME"); dir != "" {
				files = append(files, filepath.Join(dir, "auth.json"))
			}
			return files
		}
		howTo = "run 'codex login', or set OPENAI_API_KEY"
	default:
		return nil
	}
	if _, err := exec.LookPath(bin); err != nil {
		return fmt.Errorf("%w: the %s CLI %q is not installed or not on PATH: install it with '%s', or set %s to its path",
			ErrNotReady, name, bin, install, binVar)
	}
	for _, k := range keys {
		if getenv(k) != "" {
			return nil
		}
	}
	home := getenv("HOME")
	for _, f := range login(home) {
		if st, err := os.Stat(f); err == nil && st.Mode().IsRegular() && st.Size() > 0 {
			return nil
		}
	}
	return fmt.Errorf("%w: the %s CLI is not logged in (no %s and no %s): %s",
		ErrNotReady, name, keys[0], login(home)[0], howTo)
}

// CLI is the executable the claude or codex agent runs (CLAUDE_BIN or CODEX_BIN, else
// the CLI's name, looked up on PATH); "" for agents without one (sim, command).
func CLI(a Agent) string {
	switch x := a.(type) {
	case *claudeAgent:
		return x.r.cfg.ClaudeBin
	case *codexAgent:
		return x.r.cfg.CodexBin
	}
	return ""
}

// CLIVersion runs `path --version`, for at most timeout, and returns the first line it
// prints, cut at 120 characters; a CLI that fails says why in the error, with that line.
func CLIVersion(ctx context.Context, path string, timeout time.Duration) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var out bytes.Buffer
	cmd := exec.CommandContext(ctx, path, "--version")
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.WaitDelay = time.Second
	err := cmd.Run()
	line, _, _ := strings.Cut(strings.TrimSpace(out.String()), "\n")
	if len(line) > 120 {
		line = line[:120] + "…"
	}
	if err != nil {
		return "", fmt.Errorf("%w: %s", err, line)
	}
	if line == "" {
		return "", errors.New("it printed nothing")
	}
	return line, nil
}
