// Command whilly is the CLI, control plane and local all-in-one runner of whilly.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/whilly-go/whilly/cli"
	"github.com/whilly-go/whilly/sandbox"
)

func main() {
	// This binary is also the init of its agents' sandboxes (whilly run, the planner, the
	// failure analyzer).
	sandbox.HandleInit()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Execute(ctx, os.Args[1:], cli.StdIO())
	stop()
	os.Exit(code)
}
