package cli

import (
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/charmbracelet/lipgloss"
	"github.com/mattn/go-isatty"
	"github.com/muesli/termenv"
	"github.com/spf13/cobra"

	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// isTerminal reports whether v is a file attached to a terminal.
func isTerminal(v any) bool {
	f, ok := v.(*os.File)
	return ok && (isatty.IsTerminal(f.Fd()) || isatty.IsCygwinTerminal(f.Fd()))
}

func (a *app) colorFlag(cmd *cobra.Command) {
	cmd.Flags().Bool("no-color", false, "never colour the output (colour is used only on a terminal)")
}

// styles colours output only when stdout is a terminal and --no-color and NO_COLOR are unset.
type styles struct{ r *lipgloss.Renderer }

func (a *app) styles(cmd *cobra.Command) styles {
	r := lipgloss.NewRenderer(a.io.Out)
	noColor, _ := cmd.Flags().GetBool("no-color")
	if noColor || a.io.Getenv("NO_COLOR") != "" || !isTerminal(a.io.Out) {
		r.SetColorProfile(termenv.Ascii)
	}
	return styles{r: r}
}

func (s styles) paint(color, text string) string {
	return s.r.NewStyle().Foreground(lipgloss.Color(color)).Render(text)
}

func statusColor(st string) string {
	switch st {
	case string(plan.StatusDone), string(plan.DecisionAllow):
		return "2" // green
	case string(plan.StatusFailed), string(plan.DecisionReject):
		return "1" // red
	case string(plan.StatusClaimed), string(plan.StatusInProgress), string(plan.PlanActive):
		return "6" // cyan
	case string(plan.StatusSkipped), string(plan.StatusCancelled), string(plan.PlanPaused), string(plan.DecisionWarn):
		return "3" // yellow
	}
	return "7"
}

func (s styles) badge(st plan.Status) string {
	return s.paint(statusColor(string(st)), fmt.Sprintf("%-13s", "["+string(st)+"]"))
}

func (s styles) planStatus(st plan.PlanStatus) string {
	return s.paint(statusColor(string(st)), string(st))
}

func (s styles) decision(d plan.Decision) string {
	return s.paint(statusColor(string(d)), fmt.Sprintf("%-6s", d))
}

// table writes aligned columns.
type table struct{ tw *tabwriter.Writer }

func newTable(w io.Writer) *table { return &table{tw: tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)} }

func (t *table) row(cols ...string) { fmt.Fprintln(t.tw, strings.Join(cols, "\t")) }

func (t *table) flush() error { return t.tw.Flush() }

func (a *app) planShow() *cobra.Command {
	var asJSON bool
	cmd := &cobra.Command{
		Use: "show ID",
		Example: `  whilly plan show demo
  whilly plan show demo --json | jq '.tasks[] | select(.status == "FAILED")'`,
		Short: "Show a plan: status, budget and its dependency graph with task states",
		Args:  exactArgs(1, "one plan id"),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.withStore(cmd.Context(), func(st *queue.Store) error {
				pi, err := st.GetPlan(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				tasks, err := st.Tasks(cmd.Context(), args[0])
				if err != nil {
					return err
				}
				if asJSON {
					out := map[string]any{"plan": pi, "tasks": tasks}
					if pi.Status == plan.PlanPaused && pi.PauseReason == queue.PauseApproval {
						out["digest"] = queue.DigestOf(pi, tasks)
					}
					return a.writeJSON(out)
				}
				a.renderPlan(a.styles(cmd), pi, tasks)
				return nil
			})
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the plan and its tasks as JSON")
	a.colorFlag(cmd)
	return cmd
}

// The tree plan show draws is bounded: deeper than maxShowDepth it stops indenting, and
// a task shows at most maxShowWidth of the tasks under it.
const (
	maxShowDepth = 16
	maxShowWidth = 100
)

// renderPlan prints the plan header and its tasks as a dependency forest: each task
// under the first of its dependencies, with the others named after an arrow.
func (a *app) renderPlan(s styles, pi queue.PlanInfo, tasks []queue.TaskInfo) {
	a.printf("%s  %s  %s\n", termLine(pi.ID), termLine(pi.Name), s.planStatus(pi.Status))
	if pi.PauseReason != "" {
		a.printf("paused: %s\n", termLine(pi.PauseReason))
	}
	if pi.Status == plan.PlanPaused && pi.PauseReason == queue.PauseApproval {
		a.printf("approve after review: whilly plan approve %s --digest %s\n", termLine(pi.ID), queue.DigestOf(pi, tasks))
	}
	a.printf("budget: $%s spent of %s", pi.Spent, budgetText(pi.Budget))
	if pi.Strict {
		a.printf(" · strict gate")
	}
	a.printf("\n")
	var counts []string
	for _, st := range plan.Statuses() {
		if n := pi.Counts[st]; n > 0 {
			counts = append(counts, fmt.Sprintf("%d %s", n, strings.ToLower(string(st))))
		}
	}
	a.printf("tasks: %d (%s)\n\n", pi.Total, strings.Join(counts, ", "))

	children := map[string][]int{}
	var roots []int
	for i, t := range tasks {
		if len(t.Dependencies) == 0 {
			roots = append(roots, i)
			continue
		}
		children[t.Dependencies[0]] = append(children[t.Dependencies[0]], i)
	}
	var walk func(i int, prefix string, last bool, depth int)
	walk = func(i int, prefix string, last bool, depth int) {
		t := tasks[i]
		branch, next := "├─ ", "│  "
		if last {
			branch, next = "└─ ", "   "
		}
		if depth == 0 {
			branch, next = "", ""
		}
		if depth >= maxShowDepth {
			// Deeper levels keep this indentation, marked with their depth: a long chain
			// prints one line per task, not a staircase whose width grows with it.
			branch, next = fmt.Sprintf("↳%d ", depth), ""
		}
		line := fmt.Sprintf("%s %s%s%s", s.badge(t.Status), prefix, branch, termLine(t.ID))
		if len(t.Dependencies) > 1 {
			line += "  ← " + termLine(strings.Join(t.Dependencies[1:], ", "))
		}
		line += "  " + truncate(termLine(firstLine(termText(t.Description))), 60)
		if t.Attempts > 0 {
			line += fmt.Sprintf("  (attempts %d/%d)", t.Attempts, t.MaxAttempts)
		}
		if pi.Strict && t.Gate.Decision == plan.DecisionReject {
			line += "  [gate: REJECT]"
		}
		if t.Status == plan.StatusPending && t.NotBefore != nil && time.Until(*t.NotBefore) > 0 {
			line += "  [retry in " + time.Until(*t.NotBefore).Round(time.Second).String() + "]"
		}
		if t.LastError != "" {
			line += "  last error: " + truncate(termLine(firstLine(termText(t.LastError))), 60)
		}
		a.printf("%s\n", line)
		kids := children[t.ID]
		shown := kids[:min(len(kids), maxShowWidth)]
		for k, c := range shown {
			walk(c, prefix+next, k == len(kids)-1, depth+1)
		}
		if more := len(kids) - len(shown); more > 0 {
			a.printf("%s %s%s… and %d more tasks under %s (see --json)\n", strings.Repeat(" ", 11), prefix, next, more, termLine(t.ID))
		}
	}
	for _, r := range roots {
		walk(r, "", true, 0)
	}
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(strings.TrimSpace(s), "\n")
	return s
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}
