package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/queue"
)

type taskLogOptions struct {
	attempt   int
	follow    bool
	connect   string
	tokenFile string
	insecure  bool
	asJSON    bool
}

func (a *app) taskCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:     "task",
		Short:   "Read what an agent did on one task",
		Example: `  whilly task log demo AUTH-1 --follow`,
	}
	cmd.AddCommand(a.taskLog())
	return cmd
}

func (a *app) taskLog() *cobra.Command {
	o := taskLogOptions{}
	cmd := &cobra.Command{
		Use:   "log PLAN TASK [--attempt N] [--follow]",
		Short: "Print an attempt's agent log; --follow streams it until the attempt ends",
		Long: `Print what the agent of one attempt of TASK printed — stdout and stderr, secrets
redacted by the worker — as the control plane keeps it: its last 1 MiB. The worker uploads it
while the agent runs (every second, or every 64 KiB). Without --attempt, the task's latest
attempt. With --follow, wait for more and print it as it comes until the attempt ends (then
exit 0); without it, print what there is now and exit. Terminal escape sequences and other
control characters in the log are not printed. With --json, each read is one JSON object on
its own line, as the API answers it (text unchanged, offset, next_offset, running, task_status).

Without --connect it reads the local database (WHILLY_DATABASE_URL, or the embedded one). With
--connect URL it reads that control plane's API (GET /v1/plans/PLAN/tasks/TASK/attempts/N/log)
with the API token in --token-file, else in WHILLY_API_TOKEN (a read token from 'whilly admin
token mint --owner EMAIL'; a scoped token sees only its plans).

Exit codes: 0 the log was printed, 1 no such plan, task or attempt, 2 a usage error or an
unreachable control plane.`,
		Example: `  whilly task log demo AUTH-1
  whilly task log demo AUTH-1 --attempt 2
  whilly task log demo AUTH-1 --follow
  whilly task log demo AUTH-1 --json | jq -r .text
  WHILLY_API_TOKEN=whilly_r_… whilly task log demo AUTH-1 --follow --connect https://whilly.example.com`,
		Args: exactArgs(2, "a plan id and a task id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("attempt") && o.attempt < 1 {
				return usagef("--attempt must be an attempt number, 1 or more, got %d", o.attempt)
			}
			if o.connect != "" {
				return a.taskLogRemote(cmd.Context(), args[0], args[1], o)
			}
			return a.taskLogLocal(cmd.Context(), args[0], args[1], o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.attempt, "attempt", 0, "the attempt to print (default: the latest)")
	f.BoolVar(&o.follow, "follow", false, "print the log as it grows until the attempt ends")
	f.StringVar(&o.connect, "connect", "", "control plane URL (default: the local database)")
	f.StringVar(&o.tokenFile, "token-file", "", "with --connect: file holding the API token (default $WHILLY_API_TOKEN)")
	f.BoolVar(&o.insecure, "insecure", false, "with --connect: allow plain http:// to a non-loopback host")
	f.BoolVar(&o.asJSON, "json", false, "print each read as a JSON object on its own line (the API's answer: text, offsets, running)")
	return cmd
}

// logFollowWait is how long one read waits for more while following.
const logFollowWait = 25 * time.Second

// logReader reads an attempt's log from after on, waiting up to wait for more.
type logReader func(ctx context.Context, attempt int, after int64, wait time.Duration) (client.AttemptLog, error)

func (a *app) taskLogLocal(ctx context.Context, planID, taskID string, o taskLogOptions) error {
	st, closeDB, err := a.openStore(ctx)
	if err != nil {
		return err
	}
	defer closeDB()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ln := queue.NewListener(st.Pool(), a.log)
	if o.follow {
		go func() {
			if err := ln.Run(ctx); err != nil {
				a.log.ErrorContext(ctx, "log listener stopped", "error", err)
			}
		}()
	}
	return a.printTaskLog(ctx, o, func(ctx context.Context, attempt int, after int64, wait time.Duration) (client.AttemptLog, error) {
		lg, err := st.WaitAttemptLog(ctx, ln, planID, taskID, attempt, after, time.Now().Add(wait), nil)
		if err != nil {
			return client.AttemptLog{}, storeErr(err)
		}
		return client.AttemptLog{PlanID: lg.PlanID, TaskID: lg.TaskID, Attempt: lg.Attempt, Offset: lg.Offset, NextOffset: lg.Size,
			Text: string(lg.Data), Running: lg.Running, TaskStatus: lg.Status}, nil
	})
}

func (a *app) taskLogRemote(ctx context.Context, planID, taskID string, o taskLogOptions) error {
	api, err := a.connectAPI(o.connect, o.tokenFile, o.insecure, "whilly-task-log", "task log --connect needs an API token in --token-file or WHILLY_API_TOKEN (mint a read token with 'whilly admin token mint --owner EMAIL')")
	if err != nil {
		return err
	}
	return a.printTaskLog(ctx, o, func(ctx context.Context, attempt int, after int64, wait time.Duration) (client.AttemptLog, error) {
		lg, err := api.AttemptLog(ctx, planID, taskID, client.LogQuery{Attempt: attempt, After: after, Wait: wait})
		var ce *client.Error
		switch {
		case err == nil:
			return lg, nil
		case errors.As(err, &ce) && (ce.Status == 404 || ce.Status == 400):
			return lg, failf("%s", strings.TrimSuffix(ce.Message, "."))
		case client.IsUnauthorized(err) || client.IsForbidden(err):
			return lg, envf("the control plane at %s refused the token: %v", o.connect, err)
		}
		return lg, envf("read the log from %s: %v", o.connect, err)
	})
}

// printTaskLog prints the log read by read, following it with o.follow until the attempt
// ends. What the agent printed goes to stdout, made safe for a terminal; notes go to stderr.
func (a *app) printTaskLog(ctx context.Context, o taskLogOptions, read logReader) error {
	attempt, after := o.attempt, int64(0)
	var wait time.Duration
	for first := true; ; first = false {
		lg, err := read(ctx, attempt, after, wait)
		if err != nil {
			return quietCancel(ctx, err)
		}
		if first {
			attempt = lg.Attempt // follow the attempt that was latest at the start
		}
		if o.asJSON {
			if err := a.printLogJSON(lg, first); err != nil {
				return err
			}
			after = lg.NextOffset
			if !o.follow || !lg.Running {
				return nil
			}
			wait = logFollowWait
			continue
		}
		if first {
			fmt.Fprintf(a.io.Err, "attempt %d of task %s of plan %s (%s)\n", lg.Attempt, termLine(lg.TaskID), termLine(lg.PlanID), lg.TaskStatus)
		}
		if lg.Offset > after {
			fmt.Fprintf(a.io.Err, "[%d bytes of the log are not kept: only its last 1 MiB is]\n", lg.Offset-after)
		}
		if lg.Text != "" {
			if _, err := fmt.Fprint(a.io.Out, termText(lg.Text)); err != nil {
				return err
			}
		}
		after = lg.NextOffset
		if !o.follow {
			return nil
		}
		if !lg.Running {
			fmt.Fprintf(a.io.Err, "attempt %d has ended; the task is %s\n", attempt, lg.TaskStatus)
			return nil
		}
		wait = logFollowWait
	}
}

// printLogJSON prints one read as a JSON line: the first one, and every one with text or
// that says the attempt ended.
func (a *app) printLogJSON(lg client.AttemptLog, first bool) error {
	if !first && lg.Text == "" && lg.Running {
		return nil
	}
	b, err := json.Marshal(lg)
	if err != nil {
		return fmt.Errorf("encode the log: %w", err)
	}
	_, err = fmt.Fprintf(a.io.Out, "%s\n", b)
	return err
}
