package cli

import (
	"context"

	"github.com/riverqueue/river"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/internal/config"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/sandbox"
	"github.com/whilly-go/whilly/triz"
	"github.com/whilly-go/whilly/worker/workerenv"
)

// trizExtension is the TRIZ failure analyzer (SPEC §8) as a control-plane extension, or
// nil when WHILLY_TRIZ_ENABLED is off. Every failed attempt enqueues a triz job in its
// FAIL transaction; the control plane's River client runs it with the analyzer agent:
// WHILLY_TRIZ_AGENT, else WHILLY_AGENT, else claude (WHILLY_TRIZ_MODEL, else
// WHILLY_MODEL; CLAUDE_BIN, CODEX_BIN and WHILLY_AGENT_CMD as for workers), each run
// bounded by WHILLY_TRIZ_TIMEOUT (default 25s).
func (a *app) trizExtension(st *queue.Store) (*extension, error) {
	on, err := a.cfg.Bool(config.TrizEnabled)
	if err != nil || !on {
		return nil, envErr(err)
	}
	name := firstNonEmpty(a.cfg.Raw(config.TrizAgent), a.cfg.String(config.Agent))
	timeout, err := a.cfg.Duration(config.TrizTimeout)
	if err != nil {
		return nil, envErr(err)
	}
	ag, err := a.questionAgent(name)
	if err != nil {
		return nil, envf("WHILLY_TRIZ_AGENT: %w", err)
	}
	w, err := triz.NewWorker(st, triz.Config{
		Agent:   ag,
		Timeout: timeout,
		Model:   firstNonEmpty(a.cfg.Raw(config.TrizModel), a.cfg.Raw(config.Model)),
		Logger:  a.log,
	})
	if err != nil {
		return nil, err
	}
	return &extension{
		register: func(ws *river.Workers) []*river.PeriodicJob {
			river.AddWorker(ws, w)
			return nil
		},
		queues: map[string]river.QueueConfig{triz.QueueName: {MaxWorkers: 4}},
	}, nil
}

// questionAgent builds an agent that answers questions (planner, analyzer), configured
// from the environment like a worker's agent, but read-only where the agent allows it
// (agent.QuestionPermissionMode).
//
// It runs in the sandbox like a worker's agent (SPEC §9): on the control plane the box
// keeps the App key, the database URL and the host's files away from it.
func (a *app) questionAgent(name string) (agent.Agent, error) {
	cfg := workerenv.AgentConfig(a.cfg)
	cfg.Logger = a.log
	cfg.PermissionMode = agent.QuestionPermissionMode
	sb, err := a.openSandbox(name)
	if err != nil {
		return nil, err
	}
	cfg.Sandbox = sb
	return agent.New(name, cfg)
}

// openSandbox opens the sandbox for agent name's processes (workerenv.OpenSandbox).
func (a *app) openSandbox(name string) (*sandbox.Sandbox, error) {
	return workerenv.OpenSandbox(context.Background(), a.io.Getenv, name, a.log)
}

func firstNonEmpty(s ...string) string {
	for _, v := range s {
		if v != "" {
			return v
		}
	}
	return ""
}
