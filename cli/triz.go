package cli

import (
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// planTriz builds `whilly plan triz ID`, the deterministic plan preflight (plan.Preflight):
// no agent is asked, so it is free, instant and gives the same answer every time.
func (a *app) planTriz() *cobra.Command {
	var asJSON, strict bool
	cmd := &cobra.Command{
		Use: "triz ID",
		Example: `  whilly plan triz demo
  whilly plan triz demo --strict --json`,
		Short: "Check a plan before it runs: weak tasks, cycles, missing dependencies, duplicates, file conflicts",
		Long: `Check a plan for what would make it fail or waste money, before any agent runs. The check
is deterministic: no agent is asked.

Findings and their severity:
  weak_task           each decision-gate reason: a short description, no acceptance
                      criteria, no test steps or a destructive command (warning); no key
                      files or a very long description (info)
  dependency_cycle    tasks that wait for each other and can never start (error)
  missing_dependency  a dependency on a task the plan does not have (error)
  duplicate_work      descriptions sharing at least 80% of their words (warning)
  shared_key_files    tasks listing the same file with no dependency between them, which
                      may run at the same time and conflict (warning)
  over_engineering    "framework", "generic", "future-proof", "scalable"… in a task
                      without acceptance criteria (info)
Tasks that are DONE, SKIPPED or CANCELLED are not checked on their own.

Verdict: reject with any error, revise with any warning, approve otherwise.
Ideality: 1 − (4·errors + warnings + 0.25·infos) / (3·tasks), between 0 and 1.
With --strict the command exits 1 unless the verdict is approve.`,
		Args: exactArgs(1, "one plan id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			var p *plan.Plan
			err := a.withStore(cmd.Context(), func(st *queue.Store) error {
				var err error
				p, err = st.Export(cmd.Context(), args[0])
				return err
			})
			if err != nil {
				return err
			}
			r := plan.Preflight(p)
			if asJSON {
				if err := a.writeJSON(r); err != nil {
					return err
				}
			} else {
				a.renderPreflight(a.styles(cmd), r, len(p.Tasks))
			}
			if strict && r.Verdict != plan.VerdictApprove {
				return failf("plan %s: the preflight verdict is %s and --strict accepts only approve", r.PlanID, r.Verdict)
			}
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	cmd.Flags().BoolVar(&strict, "strict", false, "exit 1 unless the verdict is approve")
	a.colorFlag(cmd)
	return cmd
}

// renderPreflight prints the verdict line, then the findings grouped by severity, worst
// first, each group in the report's order.
func (a *app) renderPreflight(s styles, r plan.Report, tasks int) {
	counts := map[plan.Severity]int{}
	for _, f := range r.Findings {
		counts[f.Severity]++
	}
	a.printf("plan %s: %s  (ideality %v, %d %s)\n", r.PlanID,
		s.paint(verdictColor(r.Verdict), strings.ToUpper(r.Verdict)), r.Ideality, tasks, pluralize(tasks, "task", "tasks"))
	if len(r.Findings) == 0 {
		a.printf("no findings\n")
		return
	}
	groups := []struct {
		sev        plan.Severity
		one, other string
	}{
		{plan.SeverityError, "error", "errors"},
		{plan.SeverityWarning, "warning", "warnings"},
		{plan.SeverityInfo, "info", "info"},
	}
	for _, g := range groups {
		n := counts[g.sev]
		if n == 0 {
			continue
		}
		a.printf("\n%s\n", s.paint(severityColor(g.sev), fmt.Sprintf("%d %s", n, pluralize(n, g.one, g.other))))
		for _, f := range r.Findings {
			if f.Severity != g.sev {
				continue
			}
			kind := f.Kind
			if f.Code != "" {
				kind += " (" + f.Code + ")"
			}
			a.printf("  %s  %s\n      %s\n", strings.Join(f.Tasks, ", "), kind, f.Message)
		}
	}
}

func verdictColor(v string) string {
	switch v {
	case plan.VerdictApprove:
		return "2" // green
	case plan.VerdictRevise:
		return "3" // yellow
	case plan.VerdictReject:
		return "1" // red
	}
	return "7"
}

func severityColor(s plan.Severity) string {
	switch s {
	case plan.SeverityError:
		return "1"
	case plan.SeverityWarning:
		return "3"
	case plan.SeverityInfo:
		return "6" // cyan
	}
	return "7"
}

func pluralize(n int, one, many string) string {
	if n == 1 {
		return one
	}
	return many
}
