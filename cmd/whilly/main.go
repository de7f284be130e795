// Command whilly is the CLI, control plane and local all-in-one runner of whilly.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/whilly-go/whilly/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Execute(ctx, os.Args[1:], cli.StdIO())
	stop()
	os.Exit(code)
}
