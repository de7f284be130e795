package agent_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/agent"
)

func TestCLINamesTheExecutableOfClaudeAndCodexOnly(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  agent.Config
		want string
	}{
		{agent.NameClaude, agent.Config{}, "claude"},
		{agent.NameClaude, agent.Config{ClaudeBin: "/opt/claude/bin/claude"}, "/opt/claude/bin/claude"},
		{agent.NameCodex, agent.Config{}, "codex"},
		{agent.NameCodex, agent.Config{CodexBin: "/usr/local/bin/codex-beta"}, "/usr/local/bin/codex-beta"},
		{agent.NameSim, agent.Config{}, ""},
		{agent.NameCommand, agent.Config{Command: "make fix"}, ""},
	} {
		ag, err := agent.New(tc.name, tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		if got := agent.CLI(ag); got != tc.want {
			t.Errorf("CLI(%s with %+v) = %q, want %q", tc.name, tc.cfg, got, tc.want)
		}
	}
}

// script writes an executable shell script.
func script(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "cli")
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestCLIVersion(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	long := strings.Repeat("9", 300)
	for _, tc := range []struct {
		what, body, want, wantErr string
	}{
		{"first line of several", "echo '  2.0.14 (Claude Code)'; echo 'more'\n", "2.0.14 (Claude Code)", ""},
		{"on stderr", "echo 'codex-cli 0.46.0' >&2\n", "codex-cli 0.46.0", ""},
		{"a line that goes on", "echo " + long + "\n", long[:120] + "…", ""},
		{"a failing CLI says why", "echo 'unknown option --version'; exit 3\n", "", "exit status 3: unknown option --version"},
		{"silence", "exit 0\n", "", "it printed nothing"},
		{"a CLI that hangs", "exec sleep 30\n", "", "signal: killed"},
	} {
		t.Run(tc.what, func(t *testing.T) {
			t.Parallel()
			got, err := agent.CLIVersion(ctx, script(t, tc.body), 500*time.Millisecond)
			if tc.wantErr == "" {
				if err != nil || got != tc.want {
					t.Errorf("CLIVersion = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("CLIVersion = %q, %v; want an error containing %q", got, err, tc.wantErr)
			}
		})
	}
}
