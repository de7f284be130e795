// Command whilly-worker is the slim remote worker: it claims tasks from a whilly control
// plane over HTTP and runs a coding agent on each. Its import graph holds no database,
// River, router or GitHub App code.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/whilly-go/whilly/worker"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := worker.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
