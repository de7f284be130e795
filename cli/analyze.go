package cli

import (
	"context"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/sandbox"
	"github.com/whilly-go/whilly/server"
	"github.com/whilly-go/whilly/worker/workerenv"
)

// questionAgent builds an agent that answers questions (server.QuestionAgent).
func (a *app) questionAgent(name string) (agent.Agent, error) {
	return server.QuestionAgent(a.io.Getenv, name, a.log)
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
