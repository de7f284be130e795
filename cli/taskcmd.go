package cli

import (
	"context"
	"os/user"
	"strings"

	"github.com/spf13/cobra"

	"github.com/whilly-go/whilly/queue"
)

func (a *app) planTask() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "task",
		Short: "Add, edit, remove or reset one task of a plan",
		Long: `Change one task of a stored plan. A task file holds one task in the plan-file format
({"id", "priority", "description", "dependencies", ...}); it is checked with the rest of the
plan like an import (ids, dependencies, cycles), and nothing is written when it is invalid.
Each change is an event (task.created, task.updated, task.removed, RESET) whose "by" names
the local user (local:USER). The API does the same for admin tokens:
POST /v1/plans/ID/tasks, PATCH and DELETE /v1/plans/ID/tasks/TASK, POST …/TASK/reset.`,
		Example: `  whilly plan task add demo task.json
  whilly plan task edit demo AUTH-2 task.json
  whilly plan task rm demo CLEANUP-1
  whilly plan task reset demo AUTH-1 --cascade`,
	}
	cmd.AddCommand(a.planTaskAdd(), a.planTaskEdit(), a.planTaskRemove(), a.planTaskReset())
	return cmd
}

func (a *app) planTaskAdd() *cobra.Command {
	return &cobra.Command{
		Use:     "add ID FILE",
		Short:   "Add a task to a plan (a finished plan is ACTIVE again); - reads standard input",
		Example: `  whilly plan task add demo task.json`,
		Args:    exactArgs(2, "a plan id and a task file"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.changeTask(cmd.Context(), args[0], "", args[1])
		},
	}
}

func (a *app) planTaskEdit() *cobra.Command {
	return &cobra.Command{
		Use:   "edit ID TASK FILE",
		Short: "Replace the definition of a task that has not run yet",
		Long: `Replace the definition of TASK with the one in FILE (same id). Only a task that has not
run — PENDING, or SKIPPED by the decision gate — may change; the gate judges it again.`,
		Example: `  whilly plan task edit demo AUTH-2 task.json`,
		Args:    exactArgs(3, "a plan id, a task id and a task file"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.changeTask(cmd.Context(), args[0], args[1], args[2])
		},
	}
}

// changeTask adds the task in file to the plan (edit "") or replaces task edit with it
// (queue AddTask, EditTask: the checks, events and status rules of an import).
func (a *app) changeTask(ctx context.Context, planID, edit, file string) error {
	raw, err := a.readInputFile("task file", file, "-")
	if err != nil {
		return err
	}
	return a.withStore(ctx, func(st *queue.Store) error {
		var (
			ch  queue.TaskChange
			err error
		)
		if edit == "" {
			ch, err = st.AddTask(ctx, planID, raw, localUser())
		} else {
			ch, err = st.EditTask(ctx, planID, edit, raw, localUser())
		}
		if err != nil {
			return err
		}
		switch {
		case edit == "":
			a.printf("plan %s: task %s added%s\n", planID, ch.Task.ID, statusText(ch.Import))
		case !ch.Changed:
			a.printf("plan %s: task %s unchanged\n", planID, ch.Task.ID)
		default:
			a.printf("plan %s: task %s changed (%s, gate %s)%s\n", planID, ch.Task.ID, ch.Task.Status, ch.Task.Gate.Decision, statusText(ch.Import))
		}
		return nil
	})
}

// localUser names who runs the command, for the events of the changes it makes.
func localUser() string {
	if u, err := user.Current(); err == nil && u.Username != "" {
		return "local:" + u.Username
	}
	return "local"
}

func (a *app) planTaskRemove() *cobra.Command {
	return &cobra.Command{
		Use:     "rm ID TASK",
		Short:   "Remove a task that no other task depends on and that is not running",
		Example: `  whilly plan task rm demo CLEANUP-1`,
		Args:    exactArgs(2, "a plan id and a task id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withStore(cmd.Context(), func(st *queue.Store) error {
				if err := st.RemoveTask(cmd.Context(), args[0], args[1], localUser()); err != nil {
					return err
				}
				a.printf("plan %s: task %s removed; its events stay in the audit log\n", args[0], args[1])
				return nil
			})
		},
	}
}

func (a *app) planTaskReset() *cobra.Command {
	var cascade bool
	cmd := &cobra.Command{
		Use:   "reset ID TASK [--cascade]",
		Short: "Return one finished task to PENDING (--cascade: and the finished tasks that depend on it)",
		Long: `Return one DONE, FAILED, SKIPPED or CANCELLED task to PENDING (event RESET, attempts and
errors cleared); a plan that had ended is ACTIVE again. With --cascade every task that
depends on it, directly or not, and has finished is reset too.`,
		Example: `  whilly plan task reset demo AUTH-1 --cascade`,
		Args:    exactArgs(2, "a plan id and a task id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withStore(cmd.Context(), func(st *queue.Store) error {
				ids, err := st.ResetTask(cmd.Context(), args[0], args[1], cascade, localUser())
				if err != nil {
					return err
				}
				a.printf("plan %s: %d %s back to PENDING: %s\n", args[0], len(ids), pluralize(len(ids), "task", "tasks"), strings.Join(ids, ", "))
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&cascade, "cascade", false, "also reset the finished tasks that depend on it")
	return cmd
}
