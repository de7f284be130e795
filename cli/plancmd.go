package cli

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// maxPlanFile bounds what a plan file may weigh; a larger one is refused before parsing.
const maxPlanFile = 64 << 20

func (a *app) planCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "plan",
		Short: "Import, inspect, export and change plans",
		Long: `Plans are sets of tasks with dependencies, priorities and a budget.

A plan file is JSON: {"plan_id", "project", "budget_usd", "tasks": [{"id", "priority",
"description", "dependencies", "key_files", "acceptance_criteria", "test_steps", ...}]}.
The whole format is in docs/plans.md.`,
	}
	cmd.AddCommand(a.planImport(), a.planApply(), a.planCreate(), a.planExport(), a.planShow(),
		a.planList(), a.planReset(), a.planBudget(), a.planCancel(), a.planTriz(), a.planTask())
	cmd.AddCommand(a.planPause(), a.planResume(), a.planApprove())
	return cmd
}

// readPlanFile reads and validates a plan file ("-" is stdin).
func (a *app) readPlanFile(path string) (*plan.Plan, error) {
	data, err := a.readInputFile("plan file", path, "standard input")
	if err != nil {
		return nil, err
	}
	attempts, err := a.maxAttempts()
	if err != nil {
		return nil, err
	}
	p, err := plan.ParseWith(data, plan.ParseOptions{MaxAttempts: attempts})
	if err != nil {
		return nil, err
	}
	for _, n := range p.Notes {
		fmt.Fprintf(a.io.Err, "note: %s\n", n)
	}
	return p, nil
}

// readInputFile reads the file a command was given ("-" is standard input, named
// stdinName in messages), refusing one larger than maxPlanFile. kind names it ("plan
// file").
func (a *app) readInputFile(kind, path, stdinName string) ([]byte, error) {
	var (
		r    io.Reader
		name = path
	)
	if path == "-" {
		r, name = a.io.In, stdinName
	} else {
		f, err := os.Open(path)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, envf("%s %s does not exist", kind, path)
		}
		if err != nil {
			return nil, envf("open %s: %w", kind, err)
		}
		defer func() { _ = f.Close() }() // read only: nothing to lose on close
		r = f
	}
	data, err := io.ReadAll(io.LimitReader(r, maxPlanFile+1))
	if err != nil {
		return nil, envf("read %s %s: %w", kind, name, err)
	}
	if len(data) > maxPlanFile {
		return nil, failf("%s %s is larger than %d MiB", kind, name, maxPlanFile>>20)
	}
	return data, nil
}

// progress reports import progress on stderr when it is a terminal.
func (a *app) progress(label string) func(done, total int) {
	if !isTerminal(a.io.Err) {
		return nil
	}
	return func(done, total int) {
		fmt.Fprintf(a.io.Err, "\r%s %d/%d tasks", label, done, total)
		if done == total {
			fmt.Fprintln(a.io.Err)
		}
	}
}

func (a *app) planImport() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "import FILE",
		Short: "Import a plan file (idempotent; - reads standard input)",
		Long: `Import a plan file into the database in one transaction.

Re-importing the same file adds nothing and writes no event; a file that adds tasks to an
existing plan adds just those, and a finished plan that gets new work is ACTIVE again.
A task whose definition the file changes takes the new one if it has not run yet
(PENDING, or SKIPPED by the decision gate); a change to any other task is refused, naming
it, and nothing is written. An invalid file is refused as a whole: every problem is
listed with the task and field it concerns, and nothing is written.`,
		Example: `  whilly plan import tasks.json
  whilly plan export demo | jq '.tasks[0].description = "…"' | whilly plan import -`,
		Args: exactArgs(1, "one plan file"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.readPlanFile(args[0])
			if err != nil {
				return err
			}
			return a.withStore(cmd.Context(), func(st *queue.Store) error {
				res, err := st.Import(cmd.Context(), p, queue.ImportOptions{Progress: a.progress("importing"), By: localUser()})
				if err != nil {
					return err
				}
				if asJSON {
					return a.writeJSON(res)
				}
				verb := "imported"
				if !res.PlanCreated {
					verb = "updated"
				}
				if !res.Changed() {
					verb = "unchanged"
				}
				a.printf("plan %s %s: %d new %s, %s%d in the file%s\n", res.PlanID, verb, res.TasksCreated, pluralize(res.TasksCreated, "task", "tasks"),
					changedText(res), res.TasksTotal, statusText(res))
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

func (a *app) planApply() *cobra.Command {
	var strict, asJSON bool
	cmd := &cobra.Command{
		Use: "apply FILE",
		Example: `  whilly plan apply tasks.json
  whilly plan apply tasks.json --strict --json`,
		Short: "Import a plan file and run the decision gate on every task",
		Long: `Import a plan file, then run the decision gate on each of its tasks and print the verdicts.

REJECT: the description is shorter than 20 characters, or acceptance criteria or test steps
are missing. WARN: no key files, a destructive command, a very long description.
With --strict every rejected task that is still PENDING becomes SKIPPED (event task.skipped,
reason decision_gate) and the plan becomes strict: the control plane re-checks the gate at claim.`,
		Args: exactArgs(1, "one plan file"),
		RunE: func(cmd *cobra.Command, args []string) error {
			p, err := a.readPlanFile(args[0])
			if err != nil {
				return err
			}
			return a.withStore(cmd.Context(), func(st *queue.Store) error {
				res, err := st.Apply(cmd.Context(), p, strict, queue.ImportOptions{Progress: a.progress("importing")})
				if err != nil {
					return err
				}
				if asJSON {
					return a.writeJSON(res)
				}
				sty := a.styles(cmd)
				for _, v := range res.Verdicts {
					a.printf("%s %s\n", sty.decision(v.Verdict.Decision), v.TaskID)
					for _, r := range v.Verdict.Reasons {
						a.printf("    %s: %s\n", r.Code, r.Message)
					}
				}
				a.printf("plan %s: %d new %s, %s%d in the file; gate: %d allowed, %d warned, %d rejected", res.Import.PlanID,
					res.Import.TasksCreated, pluralize(res.Import.TasksCreated, "task", "tasks"), changedText(res.Import), res.Import.TasksTotal, res.Allowed, res.Warned, res.Rejected)
				if strict {
					a.printf(", %d skipped (strict)", res.Skipped)
				} else if res.Rejected > 0 {
					a.printf(" (use --strict to skip rejected tasks)")
				}
				a.printf("%s\n", statusText(res.Import))
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&strict, "strict", false, "skip every task the gate rejects and make the plan strict")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	a.colorFlag(cmd)
	return cmd
}

func (a *app) planCreate() *cobra.Command {
	var id, name, budget string
	var asJSON bool
	cmd := &cobra.Command{
		Use:     "create --id ID --name NAME [--budget USD]",
		Example: `  whilly plan create --id demo --name "Demo plan" --budget 5`,
		Short:   "Create an empty plan",
		Args:    noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if id == "" || name == "" {
				return failf("plan create needs --id and --name")
			}
			b, err := parseBudget(budget)
			if err != nil {
				return err
			}
			return a.withStore(cmd.Context(), func(st *queue.Store) error {
				pi, err := st.CreatePlan(cmd.Context(), id, name, b)
				if err != nil {
					return err
				}
				if asJSON {
					return a.writeJSON(pi)
				}
				a.printf("plan %s created\n", pi.ID)
				return nil
			})
		},
	}
	cmd.Flags().StringVar(&id, "id", "", "plan id (letters, digits and . _ : / -)")
	cmd.Flags().StringVar(&name, "name", "", "plan name")
	cmd.Flags().StringVar(&budget, "budget", "", "budget cap in USD (default: unlimited)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the plan as JSON")
	return cmd
}

// changedText names the existing tasks an import changed: "2 changed (A, B), ".
func changedText(res queue.ImportResult) string {
	if len(res.TasksUpdated) == 0 {
		return ""
	}
	return fmt.Sprintf("%d changed (%s), ", len(res.TasksUpdated), strings.Join(res.TasksUpdated, ", "))
}

// statusText says what became of the plan's status when an import moved it.
func statusText(res queue.ImportResult) string {
	switch {
	case res.Reopened:
		return "; the plan is " + string(res.Status) + " again"
	case res.Status == plan.PlanDone:
		return "; every task is done or skipped: the plan is DONE"
	}
	return ""
}

// parseBudget reads a USD amount; "" is unlimited.
func parseBudget(s string) (*plan.USD, error) {
	if s == "" {
		return nil, nil
	}
	if strings.HasPrefix(strings.TrimPrefix(s, "$"), "-") {
		return nil, negativeBudget(s)
	}
	u, err := plan.ParseUSD(strings.TrimPrefix(s, "$"))
	if err != nil {
		if errors.Is(err, plan.ErrTooLarge) {
			return nil, failf("budget %q %v", s, plan.ErrTooLarge)
		}
		return nil, failf("budget %q is not an amount of USD such as 5 or 2.50", s)
	}
	return &u, nil
}

func (a *app) planExport() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:     "export ID",
		Example: `  whilly plan export demo -o demo.tasks.json`,
		Short:   "Print a plan as a canonical plan file",
		Long: `Print a plan as a plan file. The output is canonical and byte-stable:
import → export → import → export gives identical bytes.`,
		Args: exactArgs(1, "one plan id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withStore(cmd.Context(), func(st *queue.Store) error {
				p, err := st.Export(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				data, err := plan.Encode(p)
				if err != nil {
					return fmt.Errorf("encode plan %s: %w", args[0], err)
				}
				if out == "" || out == "-" {
					_, err = a.io.Out.Write(data)
					return err
				}
				if err := os.WriteFile(out, data, 0o644); err != nil {
					return failf("write %s: %w", out, err)
				}
				return nil
			})
		},
	}
	cmd.Flags().StringVarP(&out, "output", "o", "", "write to this file instead of standard output")
	return cmd
}

func (a *app) planList() *cobra.Command {
	var asJSON bool
	var status string
	cmd := &cobra.Command{
		Use: "list",
		Example: `  whilly plan list
  whilly plan list --status PAUSED --json`,
		Short: "List plans with their progress and budget",
		Args:  noArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return a.withStore(cmd.Context(), func(st *queue.Store) error {
				all, err := st.AllPlans(cmd.Context(), queue.PlanPage{Status: plan.PlanStatus(strings.ToUpper(status)), Limit: 500})
				if err != nil {
					return err
				}
				if asJSON {
					return a.writeJSON(map[string]any{"plans": all})
				}
				if len(all) == 0 {
					a.printf("no plans yet: import one with 'whilly plan import FILE'\n")
					return nil
				}
				sty := a.styles(cmd)
				tw := newTable(a.io.Out)
				tw.row("PLAN", "STATUS", "DONE", "SKIPPED", "TASKS", "SPENT", "BUDGET", "NAME")
				for _, p := range all {
					tw.row(p.ID, sty.planStatus(p.Status), fmt.Sprint(p.Counts[plan.StatusDone]), fmt.Sprint(p.Counts[plan.StatusSkipped]),
						fmt.Sprint(p.Total), "$"+p.Spent.String(), budgetText(p.Budget), termLine(p.Name))
				}
				return tw.flush()
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print as JSON")
	cmd.Flags().StringVar(&status, "status", "", "only plans in this status (ACTIVE, PAUSED, DONE, FAILED, CANCELLED)")
	a.colorFlag(cmd)
	return cmd
}

func budgetText(b *plan.USD) string {
	if b == nil {
		return "unlimited"
	}
	return "$" + b.String()
}

func (a *app) planReset() *cobra.Command {
	var hard, yes, asJSON, includeSkipped bool
	cmd := &cobra.Command{
		Use: "reset ID",
		Example: `  whilly plan reset demo
  whilly plan reset demo --include-skipped --yes
  whilly plan reset demo --hard --yes`,
		Short: "Return finished tasks to PENDING, or delete the plan with --hard",
		Long: `Soft reset: every DONE, FAILED or CANCELLED task returns to PENDING (event RESET,
attempts and errors cleared) and the plan becomes ACTIVE; running tasks are left alone.
SKIPPED tasks stay skipped — the decision gate would reject them again — unless
--include-skipped is given.
Hard reset (--hard): the plan and its tasks are deleted; the audit log keeps every event
and records plan.deleted. A hard reset asks for confirmation unless --yes is given.`,
		Args: exactArgs(1, "one plan id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			if hard && !yes {
				ok, err := a.confirm(fmt.Sprintf("Delete plan %s and all its tasks?", args[0]))
				if err != nil {
					return err
				}
				if !ok {
					return failf("plan %s was not deleted", args[0])
				}
			}
			return a.withStore(cmd.Context(), func(st *queue.Store) error {
				res, err := st.ResetPlan(cmd.Context(), args[0], queue.ResetOptions{Hard: hard, IncludeSkipped: includeSkipped})
				if err != nil {
					return err
				}
				if asJSON {
					return a.writeJSON(res)
				}
				if hard {
					a.printf("plan %s deleted with its %d tasks; its events stay in the audit log\n", res.PlanID, res.Deleted)
				} else {
					a.printf("plan %s reset: %d %s back to PENDING\n", res.PlanID, res.Reset, pluralize(res.Reset, "task", "tasks"))
				}
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&hard, "hard", false, "delete the plan and its tasks")
	cmd.Flags().BoolVar(&includeSkipped, "include-skipped", false, "also return SKIPPED tasks to PENDING")
	cmd.Flags().BoolVarP(&yes, "yes", "y", false, "do not ask for confirmation")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	return cmd
}

// confirm asks a yes/no question on a terminal; elsewhere it refuses and says to use --yes.
func (a *app) confirm(question string) (bool, error) {
	if !isTerminal(a.io.In) {
		return false, failf("%s Refusing without a terminal to ask on: pass --yes", question)
	}
	fmt.Fprintf(a.io.Err, "%s [y/N] ", question)
	line, err := bufio.NewReader(a.io.In).ReadString('\n')
	if err != nil && !errors.Is(err, io.EOF) {
		return false, fmt.Errorf("read answer: %w", err)
	}
	answer := strings.ToLower(strings.TrimSpace(line))
	return answer == "y" || answer == "yes", nil
}

func (a *app) planBudget() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use: "budget ID USD",
		Example: `  whilly plan budget demo 10
  whilly plan budget demo 2.50 --json
  whilly plan budget demo unlimited`,
		Short: "Set a plan's budget cap (resumes a plan paused on budget)",
		Long: `Set a plan's budget cap in USD ("unlimited" removes the cap). Writes plan.budget_raised
(plan.budget_lowered for a lower cap); a plan paused because it reached its budget resumes
when the new cap is above what it spent, and a running plan that has already spent the new
cap pauses on its budget (plan.budget_exceeded), as when its spending reaches the cap.`,
		Args: exactArgs(2, "a plan id and an amount of USD"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var b *plan.USD
			if !strings.EqualFold(args[1], "unlimited") {
				var err error
				if b, err = parseBudget(args[1]); err != nil {
					return err
				}
			}
			return a.withStore(cmd.Context(), func(st *queue.Store) error {
				pi, err := st.SetBudget(cmd.Context(), args[0], b, localUser())
				if err != nil {
					return err
				}
				if asJSON {
					return a.writeJSON(pi)
				}
				a.printf("plan %s: budget %s, spent $%s, status %s\n", pi.ID, budgetText(pi.Budget), pi.Spent, pi.Status)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the plan as JSON")
	// "-1" reads as a shorthand flag to the flag parser: say what is wrong with the amount.
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error {
		if n, ok := negativeNumber(err); ok {
			return negativeBudget(n)
		}
		return usagef("%v (see --help)", err)
	})
	return cmd
}

func negativeBudget(s string) error {
	return failf("budget %q cannot be negative: give an amount of USD such as 5 or 2.50, or unlimited", s)
}

// negativeNumber reports whether err is the flag parser refusing a negative number such as
// -1 or -2.5 as an unknown shorthand flag, and returns the number.
func negativeNumber(err error) (string, bool) {
	var ne *pflag.NotExistError
	if !errors.As(err, &ne) || ne.GetSpecifiedShortnames() == "" {
		return "", false
	}
	n := "-" + ne.GetSpecifiedShortnames()
	_, perr := strconv.ParseFloat(n, 64)
	return n, perr == nil
}

func (a *app) writeJSON(v any) error {
	enc := json.NewEncoder(a.io.Out)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// withStore is for commands that only read or change the store.
func (a *app) withStore(ctx context.Context, fn func(*queue.Store) error) error {
	st, closeDB, err := a.openStore(ctx)
	if err != nil {
		return err
	}
	defer closeDB()
	return storeErr(fn(st))
}

func (a *app) planCancel() *cobra.Command {
	return &cobra.Command{
		Use:     "cancel ID",
		Example: `  whilly plan cancel demo`,
		Short:   "Cancel a plan and every open task (workers holding one stop at their next heartbeat)",
		Args:    exactArgs(1, "one plan id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withStore(cmd.Context(), func(st *queue.Store) error {
				n, err := st.CancelPlan(cmd.Context(), args[0], "cancelled from the CLI", localUser())
				if err != nil {
					return err
				}
				a.printf("plan %s cancelled: %d open tasks cancelled\n", args[0], n)
				return nil
			})
		},
	}
}
