package agent

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/whilly-go/whilly/sandbox"
)

// ErrNotReady means the agent cannot run on this machine at all: its CLI is missing or
// not logged in. It is the environment's fault, never a task's: a worker says so and
// exits (2) before it claims anything, instead of failing every attempt of every task.
var ErrNotReady = errors.New("agent not ready")

// Check tells, before any task is claimed, whether the agent can run here: the claude
// and codex CLIs must be found (CLAUDE_BIN, CODEX_BIN or PATH) and hold credentials —
// an API key in the environment, codex's custom model provider with its key variable
// set, or the login file their CLI writes, unexpired (the box gets its access token and
// never refreshes it), where the box's HOME is seeded from (WHILLY_AGENT_HOME, CODEX_HOME,
// CLAUDE_CONFIG_DIR, HOME). getenv reads the worker's environment. Agents without an
// executable of their own (sim, command) always pass.
func Check(a Agent, getenv func(string) string) error {
	var (
		name    string
		bin     string
		install string
		binVar  string
		keys    []string
		login   string
		howTo   string
		refresh string
	)
	switch x := a.(type) {
	case *claudeAgent:
		name, bin, binVar = NameClaude, x.r.cfg.ClaudeBin, "CLAUDE_BIN"
		install = "npm install -g @anthropic-ai/claude-code"
		keys = []string{"ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "CLAUDE_CODE_OAUTH_TOKEN",
			"CLAUDE_CODE_USE_BEDROCK", "CLAUDE_CODE_USE_VERTEX"}
		login = sandbox.AgentFile(".claude/.credentials.json", getenv)
		howTo = "run 'claude' once and log in (/login), or set ANTHROPIC_API_KEY"
		refresh = "run 'claude' once outside the box, as the worker's user, to refresh it; or set " +
			"CLAUDE_CODE_OAUTH_TOKEN (a long-lived token from 'claude setup-token') or ANTHROPIC_API_KEY"
	case *codexAgent:
		name, bin, binVar = NameCodex, x.r.cfg.CodexBin, "CODEX_BIN"
		install = "npm install -g @openai/codex"
		keys = []string{"OPENAI_API_KEY", "CODEX_API_KEY"}
		login = sandbox.AgentFile(".codex/auth.json", getenv)
		howTo = "run 'codex login', or set OPENAI_API_KEY"
		refresh = "run 'codex' once outside the box, as the worker's user, to refresh it; or set OPENAI_API_KEY"
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
	if name == NameCodex {
		if provider, key, ok := sandbox.CodexProvider(getenv); ok {
			if key == "" || getenv(key) != "" {
				return nil
			}
			return fmt.Errorf("%w: codex's config.toml selects the model provider %q, whose key variable %s is not set: set it in the worker's environment",
				ErrNotReady, provider, key)
		}
	}
	if st, err := os.Stat(login); login == "" || err != nil || !st.Mode().IsRegular() || st.Size() == 0 {
		if login == "" {
			login = "login file (HOME is unset)"
		}
		return fmt.Errorf("%w: the %s CLI is not logged in (no %s and no %s): %s",
			ErrNotReady, name, keys[0], login, howTo)
	}
	if exp := loginExpires(login); !exp.IsZero() && time.Now().After(exp) {
		return fmt.Errorf("%w: the %s CLI's login in %s expired at %s, and the box never refreshes a login: %s",
			ErrNotReady, name, login, exp.UTC().Format(time.RFC3339), refresh)
	}
	return nil
}

// loginExpires is when the access token of a CLI's login file expires: Claude Code's
// expiresAt, or the exp of codex's access token (a JWT) unless the file holds an API key.
// Zero when the file does not say.
func loginExpires(path string) time.Time {
	b, err := os.ReadFile(path)
	if err != nil {
		return time.Time{}
	}
	var f struct {
		Claude *struct {
			ExpiresAt int64 `json:"expiresAt"`
		} `json:"claudeAiOauth"`
		APIKey *string `json:"OPENAI_API_KEY"`
		Tokens *struct {
			AccessToken string `json:"access_token"`
		} `json:"tokens"`
	}
	if json.Unmarshal(b, &f) != nil {
		return time.Time{}
	}
	switch {
	case f.Claude != nil && f.Claude.ExpiresAt > 0:
		return time.UnixMilli(f.Claude.ExpiresAt)
	case f.APIKey != nil && *f.APIKey != "", f.Tokens == nil:
		return time.Time{}
	}
	parts := strings.Split(f.Tokens.AccessToken, ".")
	if len(parts) != 3 {
		return time.Time{}
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	var claims struct {
		Exp int64 `json:"exp"`
	}
	if err != nil || json.Unmarshal(payload, &claims) != nil || claims.Exp <= 0 {
		return time.Time{}
	}
	return time.Unix(claims.Exp, 0)
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
