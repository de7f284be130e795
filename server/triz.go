package server

import (
	"log/slog"

	"github.com/riverqueue/river"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/triz"
)

// trizPart is the TRIZ failure analyzer, or nil when it is off. Every failed attempt
// enqueues a triz job in its FAIL transaction (StoreHooks); the control plane's River
// client runs it with the analyzer agent (TRIZ.Agent, else claude), each run bounded by
// TRIZ.Timeout.
func trizPart(st *queue.Store, log *slog.Logger, cfg Config) (*part, error) {
	if !cfg.TRIZ.Enabled {
		return nil, nil
	}
	ag, err := newQuestionAgent(cfg, firstNonEmpty(cfg.TRIZ.Agent, agent.NameClaude), log)
	if err != nil {
		return nil, configErrorf("WHILLY_TRIZ_AGENT: %w", err)
	}
	w, err := triz.NewWorker(st, triz.Config{
		Agent:   ag,
		Timeout: cfg.TRIZ.Timeout,
		Model:   cfg.TRIZ.Model,
		Logger:  log,
	})
	if err != nil {
		return nil, err
	}
	return &part{
		register: func(ws *river.Workers) []*river.PeriodicJob {
			river.AddWorker(ws, w)
			return nil
		},
		queues: map[string]river.QueueConfig{triz.QueueName: {MaxWorkers: 4}},
	}, nil
}
