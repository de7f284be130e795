// Package cli is whilly's command line: the cobra command tree, exit codes and the
// composition roots (`whilly serve`, `whilly run`) that wire the store, the control plane
// and the workers together. It is the only package that reads the environment.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/whilly-go/whilly/internal/config"
	"github.com/whilly-go/whilly/internal/logging"
	"github.com/whilly-go/whilly/internal/pglocal"
	"github.com/whilly-go/whilly/internal/version"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// Exit codes.
const (
	ExitOK     = 0
	ExitFailed = 1 // validation or operation error
	ExitEnv    = 2 // environment or configuration error
	ExitUsage  = 2 // a usage error (unknown command or flag, wrong arguments, bad flag value): the command line is the configuration
)

// exitError carries an exit code and the one sentence printed on stderr.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// failf is an operation or validation error: exit 1.
func failf(format string, args ...any) error {
	return &exitError{code: ExitFailed, err: fmt.Errorf(format, args...)}
}

// envf is an environment or configuration error: exit 2.
func envf(format string, args ...any) error {
	return &exitError{code: ExitEnv, err: fmt.Errorf(format, args...)}
}

// usagef is a usage error: an unknown command or flag, a wrong number of arguments or a
// flag value of the wrong type. Exit 2.
func usagef(format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...)}
}

// IO is where a command reads and writes.
type IO struct {
	In     io.Reader
	Out    io.Writer
	Err    io.Writer
	Getenv func(string) string
}

// StdIO is the process's own standard streams and environment.
func StdIO() IO { return IO{In: os.Stdin, Out: os.Stdout, Err: os.Stderr, Getenv: os.Getenv} }

// Execute runs the whilly command line with args (without the program name) and returns
// the process exit code.
func Execute(ctx context.Context, args []string, stdio IO) int {
	root := NewRootCommand(stdio)
	root.SetArgs(args)
	// cobra reports an unknown command as a plain error: it is a usage error.
	if _, _, err := root.Find(args); err != nil {
		return report(stdio.Err, usagef("%v (see 'whilly --help')", err))
	}
	err := root.ExecuteContext(ctx)
	return report(stdio.Err, err)
}

// report prints err as one sentence and maps it to an exit code.
func report(w io.Writer, err error) int {
	if err == nil {
		return ExitOK
	}
	code := ExitFailed
	var ee *exitError
	var ve *plan.ValidationError
	switch {
	case errors.As(err, &ee):
		code = ee.code
	case errors.As(err, &ve) && len(ve.Problems) == 1:
		fmt.Fprintf(w, "whilly: the plan is invalid: %s\n", ve.Error())
		return ExitFailed
	case errors.As(err, &ve):
		fmt.Fprintf(w, "whilly: the plan is invalid:\n%s\n", indent(ve.Error()))
		return ExitFailed
	case errors.Is(err, pglocal.ErrNoBinaries):
		code = ExitEnv
	case errors.Is(err, context.Canceled):
		fmt.Fprintln(w, "whilly: interrupted")
		return 130
	}
	fmt.Fprintf(w, "whilly: %s\n", sentence(err))
	return code
}

func indent(s string) string {
	return "  " + strings.ReplaceAll(strings.TrimRight(s, "\n"), "\n", "\n  ")
}

// sentence makes the error read as one sentence: without its error class (however it
// was wrapped: a control plane's message has none), its first letter kept lowercase as Go
// errors are, and a final period added.
func sentence(err error) string {
	s := queue.WithoutClass(err.Error())
	if s != "" && !strings.HasSuffix(s, ".") {
		s += "."
	}
	return s
}

// app holds what every command needs: streams, configuration, logger.
type app struct {
	io  IO
	cfg *config.Env
	log *slog.Logger
}

// newApp is an app reading its configuration through stdio.Getenv (nil: an empty
// environment).
func newApp(stdio IO, log *slog.Logger) *app {
	if stdio.Getenv == nil {
		stdio.Getenv = func(string) string { return "" }
	}
	return &app{io: stdio, cfg: config.New(stdio.Getenv), log: log}
}

// useLogger sets the logger of WHILLY_LOG_LEVEL (def when unset) and WHILLY_LOG_FORMAT.
func (a *app) useLogger(def slog.Level) error {
	l, err := logging.New(a.io.Err, a.cfg, def)
	if err != nil {
		return envErr(err)
	}
	a.log = l
	return nil
}

// commandOf names the command of the configuration table that cmd is.
func commandOf(cmd *cobra.Command) config.Command {
	path := strings.Fields(cmd.CommandPath())
	if len(path) < 2 {
		return config.Any
	}
	switch c := config.Command(path[1]); c {
	case config.Serve, config.Run, config.Init, config.Forge, config.AppCmd, config.Doctor, config.Dashboard, config.Events, config.TaskCmd:
		return c
	case "worker":
		if len(path) > 2 && path[2] == "register" {
			return config.Register
		}
		return config.Any
	case config.Any, config.Register, config.Worker: // not first words of a whilly command
		return config.Any
	default:
		return config.Any
	}
}

// NewRootCommand builds the whilly command tree.
func NewRootCommand(stdio IO) *cobra.Command {
	a := newApp(stdio, slog.New(slog.DiscardHandler)) // PersistentPreRunE sets the configured one
	root := &cobra.Command{
		Use:   "whilly",
		Short: "GitHub-native orchestrator for AI coding agents",
		Long: `whilly turns plans of tasks into work done by coding agents.

Plans live in Postgres. With WHILLY_DATABASE_URL unset, whilly starts (or reuses) a private
Postgres cluster in its data directory (WHILLY_DATA_DIR, default ~/.local/share/whilly).

Exit codes: 0 success, 1 validation or operation error, 2 environment or configuration error
or a usage error (unknown command or flag, wrong arguments, a flag value of the wrong type).`,
		SilenceUsage:  true,
		SilenceErrors: true,
		// Every command checks the variables it reads before it does anything, and
		// reports all the problems at once (exit 2).
		PersistentPreRunE: func(cmd *cobra.Command, _ []string) error {
			if err := a.cfg.Check(commandOf(cmd)); err != nil {
				return envErr(err)
			}
			return a.useLogger(slog.LevelWarn)
		},
	}
	root.SetIn(stdio.In)
	root.SetOut(stdio.Out)
	root.SetErr(stdio.Err)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usagef("%v (see --help)", err) })
	info := version.Get()
	root.Version = info.Version
	root.SetVersionTemplate(info.Text("whilly"))
	root.AddCommand(
		a.planCommand(),
		a.migrateCommand(),
		a.dbCommand(),
		a.serveCommand(),
		a.adminCommand(),
		a.workerCommand(),
		a.runCommand(),
		a.initCommand(),
		a.dashboardCommand(),
		a.forgeCommand(),
		a.appCommand(),
		a.benchCommand(),
		a.eventsCommand(),
		a.taskCommand(),
		a.doctorCommand(),
		a.versionCommand(),
		a.pauseCommand(),
		a.resumeCommand(),
	)
	for _, c := range root.Commands() {
		refuseUnknownSubcommands(c)
	}
	return root
}

// refuseUnknownSubcommands makes every group of commands under c (such as 'whilly plan')
// answer an unknown subcommand with a usage error (exit 2) rather than its help and exit
// 0; with no argument it still prints its help.
func refuseUnknownSubcommands(c *cobra.Command) {
	if !c.HasSubCommands() {
		return
	}
	for _, sub := range c.Commands() {
		refuseUnknownSubcommands(sub)
	}
	if c.Runnable() {
		return
	}
	c.Args = func(cmd *cobra.Command, args []string) error {
		if len(args) > 0 {
			return usagef("unknown command %q for %q (see '%s --help')", args[0], cmd.CommandPath(), cmd.CommandPath())
		}
		return nil
	}
	c.RunE = func(cmd *cobra.Command, _ []string) error { return cmd.Help() }
}

// noArgs and exactArgs answer a wrong argument count with exit 2 and a usage hint.
func exactArgs(n int, what string) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if len(args) != n {
			return usagef("%s takes %s (see '%s --help')", cmd.CommandPath(), what, cmd.CommandPath())
		}
		return nil
	}
}

func noArgs(cmd *cobra.Command, args []string) error {
	if len(args) != 0 {
		return usagef("%s takes no arguments, got %q (see '%s --help')", cmd.CommandPath(), args[0], cmd.CommandPath())
	}
	return nil
}

// storeErr maps store errors to exit codes.
func storeErr(err error) error {
	if err == nil {
		return nil
	}
	var ee *exitError
	if errors.As(err, &ee) {
		return err
	}
	if errors.Is(err, queue.ErrNotFound) || errors.Is(err, queue.ErrConflict) {
		return &exitError{code: ExitFailed, err: err}
	}
	return err
}
