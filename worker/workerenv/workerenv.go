// Package workerenv reads the worker side's settings from the environment (through the
// table of internal/config) into the values the worker, agent and sandbox packages take.
// Both composition roots that run workers use it: whilly-worker's command line and whilly's
// (run, doctor, analyze). The worker library itself never reads the environment.
package workerenv

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/internal/config"
	"github.com/whilly-go/whilly/sandbox"
	"github.com/whilly-go/whilly/worker"
)

// GateFromConfig reads the diff gate's policy: WHILLY_PROTECTED_PATHS (globs) and
// WHILLY_DIFF_MAX_BYTES.
func GateFromConfig(c *config.Env) (worker.GatePolicy, error) {
	protected, err := worker.ParseProtectedPaths(strings.Join(c.List(config.ProtectedPaths), ","))
	if err != nil {
		return worker.GatePolicy{}, fmt.Errorf("%s: %w", config.ProtectedPaths, err)
	}
	maxBytes, err := c.Int(config.DiffMaxBytes)
	if err != nil {
		return worker.GatePolicy{}, err
	}
	return worker.GatePolicy{Protected: protected, MaxBytes: int64(maxBytes)}, nil
}

// CacheFromConfig reads where the box's caches live and how much they may hold:
// WHILLY_CACHE_DIR (default worker.DefaultCacheDir) and WHILLY_CACHE_MAX_BYTES.
func CacheFromConfig(c *config.Env) (worker.CachePolicy, error) {
	maxBytes, err := c.Size(config.CacheMaxBytes)
	if err != nil {
		return worker.CachePolicy{}, err
	}
	dir := c.String(config.CacheDir)
	if dir == "" {
		if dir, err = worker.DefaultCacheDir(); err != nil {
			return worker.CachePolicy{}, err
		}
	}
	return worker.CachePolicy{Dir: dir, MaxBytes: maxBytes}, nil
}

// OpenSandbox opens the box for agentName's processes from WHILLY_SANDBOX,
// WHILLY_SANDBOX_NET, WHILLY_SANDBOX_ALLOW_HOSTS, WHILLY_AGENT_ENV and
// WHILLY_SANDBOX_REGISTRIES, and logs whether it works and, behind the box's proxy, the
// hosts its agents may reach. An error (a configuration error: exit 2) says how to fix
// it. The sim agent runs no process: without a working box it gets none (nil), and no
// error.
func OpenSandbox(ctx context.Context, getenv func(string) string, agentName string, log *slog.Logger) (*sandbox.Sandbox, error) {
	set, err := sandbox.SettingsFromEnv(getenv)
	if err != nil {
		return nil, err
	}
	sb, err := sandbox.Open(ctx, set, agentName != agent.NameSim)
	switch {
	case err != nil:
		return nil, err
	case sb == nil:
		log.InfoContext(ctx, "sandbox does not work here; the sim agent runs no process and needs none", "agent", agentName)
	case !sb.Boxed():
		log.WarnContext(ctx, "WHILLY_SANDBOX=none: agents run unboxed, as this user, with this machine's files and network", "agent", agentName)
	default:
		attrs := []any{"agent", agentName, "net", sb.Net(), "limits", sb.LimitsNote()}
		if sb.Net() == sandbox.NetProxy {
			registries := sandbox.RegistriesOff
			if sb.Registries() {
				registries = sandbox.RegistriesAuto
			}
			attrs = append(attrs, "allowed_hosts", strings.Join(sb.AllowedHosts(agentName, getenv), ","),
				"registries", registries, "upstream_proxy", sandbox.WorkerProxies(getenv))
		}
		log.InfoContext(ctx, "sandbox works: agents run under bubblewrap", attrs...)
		if !sb.LimitsEnforced() {
			log.WarnContext(ctx, "sandbox limits are a best effort", "limits", sb.LimitsNote(), "agent", agentName)
		}
		if hidden := sandbox.HiddenPath(getenv("PATH"), getenv("HOME"), set.Tools); len(hidden) > 0 {
			log.WarnContext(ctx, "agents in the box do not see these PATH entries (relative, or under HOME); add a toolchain among them to WHILLY_SANDBOX_TOOLS",
				"path", hidden)
		}
	}
	return sb, nil
}

// AgentConfig reads the agent settings of the environment (CLAUDE_BIN, CODEX_BIN,
// WHILLY_AGENT_CMD, WHILLY_PRICES_FILE). Timeouts and the model are per request and read by the caller.
func AgentConfig(env *config.Env) agent.Config {
	return agent.Config{
		ClaudeBin: env.String(config.ClaudeBin),
		CodexBin:  env.String(config.CodexBin),
		Command:   env.Raw(config.AgentCmd),
		// Checked at start-up (config.PricesFile's Check); New loads it.
		PricesFile: env.String(config.PricesFile),
	}
}
