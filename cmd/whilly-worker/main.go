// Command whilly-worker is the slim remote worker: it claims tasks from a whilly control
// plane over HTTP and runs a coding agent on each. Its import graph holds no database,
// River, router or GitHub App code.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"runtime"
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
	oneCore()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := workercli.Main(ctx, os.Args[1:], os.Stdout, os.Stderr, os.Getenv)
	stop()
	os.Exit(code)
}

// oneCore runs the worker's Go code on one core. Its work is waiting — on the control
// plane, on git and on the agent, which run as processes of their own — and with more
// cores the Go scheduler spins looking for work on the idle ones whenever a goroutine
// wakes: with 8 workers on 2 cores (whilly bench e2e), one core each cut the workers' CPU
// per task by a fifth to a third (0.80 to 0.63 ms, the medians of 5 interleaved runs
// each), and Postgres's did not grow. GOMAXPROCS set in the environment wins.
func oneCore() {
	if os.Getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(1)
	}
}
