package config_test

import (
	"slices"
	"testing"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/internal/config"
	"github.com/whilly-go/whilly/worker/workerenv"
)

func TestAgentNamesMatch(t *testing.T) {
	t.Parallel()
	if !slices.Equal(agent.Names(), config.AgentNames()) {
		t.Errorf("agent names %q, the configuration table's %q", agent.Names(), config.AgentNames())
	}
}

func TestAgentConfig(t *testing.T) {
	t.Parallel()
	cfg := workerenv.AgentConfig(config.New(func(k string) string {
		return map[string]string{"CLAUDE_BIN": " /c ", "CODEX_BIN": "/x", "WHILLY_AGENT_CMD": "run-it"}[k]
	}))
	if cfg.ClaudeBin != "/c" || cfg.CodexBin != "/x" || cfg.Command != "run-it" {
		t.Errorf("AgentConfig = %+v", cfg)
	}
	if d := workerenv.AgentConfig(config.New(nil)); d.ClaudeBin != "claude" || d.CodexBin != "codex" || d.Command != "" {
		t.Errorf("AgentConfig defaults = %+v", d)
	}
}
