// Command whilly-worker is the slim remote worker: it claims tasks from a whilly control
// plane over HTTP and runs a coding agent on each. Its import graph holds no database,
// River, router or GitHub App code.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/whilly-go/whilly/cmd/whilly-worker/workercli"
	"github.com/whilly-go/whilly/sandbox"
)

func main() {
	// This binary is also the init of its agents' sandboxes.
	sandbox.HandleInit()
	// It holds its token and the push tokens: no process of its user may read its memory.
	if err := sandbox.NotDumpable(); err != nil {
		fmt.Fprintf(os.Stderr, "whilly-worker: %v\n", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := workercli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}
