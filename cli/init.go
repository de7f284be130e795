package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/spf13/cobra"

	"github.com/whilly-go/whilly/agent"
	"github.com/whilly-go/whilly/internal/config"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/queue"
)

// maxIdea bounds an idea read from standard input.
const maxIdea = 256 << 10

// plannerChargeSource names the planner in plan.charged events.
const plannerChargeSource = "planner"

// fileSlug is what --slug may be: a plan id that is also a plain file-name part.
var fileSlug = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

type initOptions struct {
	slug, outputDir, planner, model, budget string
	noImport, strict, yes, asJSON           bool
}

// initCommand builds `whilly init "IDEA"`: the PRD wizard.
func (a *app) initCommand() *cobra.Command {
	var o initOptions
	cmd := &cobra.Command{
		Use: `init "IDEA" [--slug S] [--no-import] [--output-dir DIR] [--planner NAME]`,
		Example: `  whilly init "Rate-limit the login endpoint" --slug rate-limit --budget 5
  echo "Add a dark mode" | whilly init - --no-import --output-dir plans
  whilly init "Try whilly without a model" --planner sim`,
		Short: "Turn an idea into a PRD and a plan with the planner agent, and import the plan",
		Long: `Ask the planner agent to turn an idea into a PRD (product requirements document) and a
plan of small tasks with dependencies, key files, acceptance criteria and test steps.

whilly writes PRD-<slug>.md and <slug>.tasks.json into the output directory, imports the
plan, runs the decision gate on every task (like 'whilly plan apply'), charges what the
planner cost to the new plan's budget, and shows the plan. With --no-import it only
writes the files.

The planner's answer is checked like a plan file. An invalid plan is sent back to the
planner once with its problems; if the second answer is invalid too, nothing is written
and the command exits 1. IDEA "-" reads the idea from standard input.

The planner is --planner, else WHILLY_PLANNER, else claude (Claude Code, installed and
logged in); it may read the current directory but not change it. Each call is bounded by
WHILLY_PLANNER_TIMEOUT (default 10m). --planner sim runs no model: it answers a fixed
three-task plan named after a hash of the idea, to try whilly (then 'whilly run --agent
sim'). Existing files are overwritten only after a yes on a terminal, or with --yes.`,
		Args: exactArgs(1, `one idea in quotes, or - to read it from standard input`),
		RunE: func(cmd *cobra.Command, args []string) error {
			return a.runInit(cmd, args[0], o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.slug, "slug", "", "plan id and file-name part (default: from the project name the planner picks)")
	f.StringVar(&o.outputDir, "output-dir", ".", "directory for PRD-<slug>.md and <slug>.tasks.json")
	f.StringVar(&o.planner, "planner", "", "planner agent: "+strings.Join(agent.Names(), ", ")+" (default $WHILLY_PLANNER or claude)")
	f.StringVar(&o.model, "model", "", "model passed to the planner (default $WHILLY_MODEL)")
	f.StringVar(&o.budget, "budget", "", "budget cap of the new plan in USD (default: unlimited)")
	f.BoolVar(&o.noImport, "no-import", false, "only write the files; do not import the plan")
	f.BoolVar(&o.strict, "strict", false, "skip every task the gate rejects and make the plan strict")
	f.BoolVarP(&o.yes, "yes", "y", false, "overwrite existing files without asking")
	f.BoolVar(&o.asJSON, "json", false, "print the result as JSON")
	a.colorFlag(cmd)
	return cmd
}

// initResult is what `whilly init --json` prints.
type initResult struct {
	PlanID   string             `json:"plan_id"`
	PRDFile  string             `json:"prd_file"`
	PlanFile string             `json:"plan_file"`
	Planner  string             `json:"planner"`
	Attempts int                `json:"attempts"`
	Cost     plan.USD           `json:"cost_usd"`
	Imported bool               `json:"imported"`
	Apply    *queue.ApplyResult `json:"apply,omitempty"`
}

func (a *app) runInit(cmd *cobra.Command, ideaArg string, o initOptions) error {
	ctx := cmd.Context()
	idea, err := a.readIdea(ideaArg)
	if err != nil {
		return err
	}
	if o.slug != "" && (!fileSlug.MatchString(o.slug) || strings.Contains(o.slug, "..")) {
		return failf("--slug %q must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", o.slug)
	}
	budget, err := parseBudget(o.budget)
	if err != nil {
		return err
	}
	name, fromEnv := o.planner, false
	if name == "" {
		name, fromEnv = a.cfg.Raw(config.Planner), true
	}
	if name == "" {
		name = agent.NameClaude
	}
	planner, err := a.questionAgent(name)
	if err != nil {
		if fromEnv {
			return envf("WHILLY_PLANNER: %w", err)
		}
		return failf("--planner: %w", err)
	}
	timeout, err := a.cfg.Duration(config.PlannerTimeout)
	if err != nil {
		return envErr(err)
	}
	attempts, err := a.maxAttempts()
	if err != nil {
		return err
	}
	if o.model == "" {
		o.model = a.cfg.Raw(config.Model)
	}

	// Everything that can refuse without the planner refuses before it is paid.
	var st *queue.Store
	if !o.noImport {
		s, closeDB, err := a.openStore(ctx)
		if err != nil {
			return err
		}
		defer closeDB()
		st = s
	}
	if o.slug != "" {
		if err := a.initPreflight(ctx, st, o, o.slug); err != nil {
			return err
		}
	}

	prog := a.startProgress(fmt.Sprintf("asking the planner (%s)…", planner.Name()))
	cwd, err := os.Getwd()
	if err != nil {
		return envf("find the current directory: %w", err)
	}
	res, err := agent.Plan(ctx, planner, agent.PlanRequest{
		Idea: idea, Slug: o.slug, Model: o.model, WorkDir: cwd, MaxAttempts: attempts,
		Retrying: func(problems []string) {
			prog.set(fmt.Sprintf("the plan had %d %s; asking the planner again…", len(problems), pluralize(len(problems), "problem", "problems")))
		},
	}, timeout)
	prog.stop()
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return a.plannerErr(err, planner.Name(), res)
	}
	p := res.Plan
	p.Budget = budget
	if o.slug == "" {
		if err := a.initPreflight(ctx, st, o, p.ID); err != nil {
			return fmt.Errorf("%w (the planner's answer, which cost $%s, was not saved)", err, res.Cost)
		}
	}

	out := initResult{PlanID: p.ID, Planner: planner.Name(), Attempts: res.Attempts, Cost: res.Cost}
	out.PRDFile, out.PlanFile = initPaths(o.outputDir, p.ID)
	data, err := plan.Encode(p)
	if err != nil {
		return fmt.Errorf("encode plan %s: %w", p.ID, err)
	}
	if err := writeFiles(o.outputDir, map[string][]byte{out.PRDFile: []byte(strings.TrimRight(res.PRD, "\n") + "\n"), out.PlanFile: data}); err != nil {
		return failf("write the plan files: %w", err)
	}
	if o.noImport {
		if o.asJSON {
			return a.writeJSON(out)
		}
		a.printf("wrote %s and %s\n", out.PRDFile, out.PlanFile)
		a.printf("planner: %s, %d %s, $%s (not charged: no plan was imported)\n", out.Planner, out.Attempts, pluralize(out.Attempts, "call", "calls"), out.Cost)
		a.printf("import it with: whilly plan apply %s\n", out.PlanFile)
		return nil
	}

	applied, err := st.Apply(ctx, p, o.strict, queue.ImportOptions{})
	if err != nil {
		return storeErr(fmt.Errorf("import plan %s (its files are written; 'whilly plan apply %s' tries again): %w", p.ID, out.PlanFile, err))
	}
	out.Imported, out.Apply = true, &applied
	if res.Cost > 0 {
		detail := map[string]any{"planner": planner.Name(), "attempts": res.Attempts, "prd_file": out.PRDFile}
		if err := st.Charge(ctx, p.ID, res.Cost, plannerChargeSource, detail); err != nil {
			return storeErr(fmt.Errorf("plan %s is imported, but the planner's cost of $%s was not charged to it: %w", p.ID, res.Cost, err))
		}
	}
	if o.asJSON {
		return a.writeJSON(out)
	}
	sty := a.styles(cmd)
	a.printf("wrote %s and %s\n", out.PRDFile, out.PlanFile)
	for _, v := range applied.Verdicts {
		a.printf("%s %s\n", sty.decision(v.Verdict.Decision), v.TaskID)
		for _, r := range v.Verdict.Reasons {
			a.printf("    %s: %s\n", r.Code, r.Message)
		}
	}
	a.printf("plan %s: %d new %s; gate: %d allowed, %d warned, %d rejected", p.ID, applied.Import.TasksCreated,
		pluralize(applied.Import.TasksCreated, "task", "tasks"),
		applied.Allowed, applied.Warned, applied.Rejected)
	if o.strict {
		a.printf(", %d skipped (strict)", applied.Skipped)
	}
	a.printf("\nplanner: %s, %d %s, $%s charged to the plan\n\n", out.Planner, out.Attempts, pluralize(out.Attempts, "call", "calls"), out.Cost)
	pi, err := st.GetPlan(ctx, p.ID)
	if err != nil {
		return storeErr(err)
	}
	tasks, err := st.Tasks(ctx, p.ID)
	if err != nil {
		return storeErr(err)
	}
	a.renderPlan(sty, pi, tasks)
	a.printf("\nrun it with: whilly run --plan %s\n", p.ID)
	return nil
}

// readIdea returns the idea argument, or standard input for "-".
func (a *app) readIdea(arg string) (string, error) {
	idea := arg
	if arg == "-" {
		b, err := io.ReadAll(io.LimitReader(a.io.In, maxIdea+1))
		if err != nil {
			return "", envf("read the idea from standard input: %w", err)
		}
		if len(b) > maxIdea {
			return "", failf("the idea is longer than %d KiB", maxIdea>>10)
		}
		idea = string(b)
	}
	if strings.TrimSpace(idea) == "" {
		return "", failf("the idea is empty: say what to build, e.g. whilly init \"Rate-limit the login endpoint\"")
	}
	return idea, nil
}

// initPaths are the PRD and plan files of a slug.
func initPaths(dir, slug string) (prd, planFile string) {
	return filepath.Join(dir, "PRD-"+slug+".md"), filepath.Join(dir, slug+".tasks.json")
}

// initPreflight refuses a plan id already in the store and, unless the user agrees to it,
// overwriting files.
func (a *app) initPreflight(ctx context.Context, st *queue.Store, o initOptions, slug string) error {
	if st != nil {
		_, err := st.GetPlan(ctx, slug)
		switch {
		case err == nil:
			return failf("plan %s already exists; choose another id with --slug, or import the files with 'whilly plan apply'", slug)
		case !errors.Is(err, queue.ErrNotFound):
			return storeErr(err)
		}
	}
	prd, planFile := initPaths(o.outputDir, slug)
	var existing []string
	for _, p := range []string{prd, planFile} {
		if _, err := os.Stat(p); err == nil {
			existing = append(existing, p)
		}
	}
	if len(existing) == 0 || o.yes {
		return nil
	}
	ok, err := a.confirm(fmt.Sprintf("%s already %s. Overwrite?", strings.Join(existing, " and "), pluralize(len(existing), "exists", "exist")))
	if err != nil {
		return err
	}
	if !ok {
		return failf("nothing written: %s %s", strings.Join(existing, " and "), pluralize(len(existing), "exists", "exist"))
	}
	return nil
}

// plannerErr maps a planner failure to an exit code, saying what was spent.
func (a *app) plannerErr(err error, name string, res agent.PlanResult) error {
	spent := ""
	if res.Cost > 0 {
		spent = fmt.Sprintf(" (the planner cost $%s)", res.Cost)
	}
	var ipe *agent.InvalidPlanError
	switch {
	case errors.As(err, &ipe):
		return failf("nothing written%s: %w", spent, err)
	case errors.Is(err, agent.ErrNotFound):
		return envf("the %s planner is not installed: %w; install it, or choose another with --planner or WHILLY_PLANNER", name, err)
	case errors.Is(err, agent.ErrPromptInjection):
		return failf("the idea was refused: %w", err)
	}
	return failf("nothing written%s: %w", spent, err)
}

// writeFiles writes each file (path → content) through a temporary file and a rename, so
// that a crash leaves the old file or the new one, never half of one; when one fails,
// those already written are removed.
func writeFiles(dir string, files map[string][]byte) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var done []string
	for path, data := range files {
		if err := writeAtomic(path, data); err != nil {
			for _, d := range done {
				_ = os.Remove(d)
			}
			return err
		}
		done = append(done, path)
	}
	return nil
}

func writeAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, werr := f.Write(data)
	cerr := f.Close()
	if err := errors.Join(werr, cerr); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Chmod(tmp, 0o644); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}

// progress is a one-line status with the elapsed time, redrawn every second on stderr
// when it is a terminal; elsewhere it prints nothing.
type progress struct {
	mu    sync.Mutex
	label string
	done  chan struct{}
	wg    sync.WaitGroup
}

func (a *app) startProgress(label string) *progress {
	p := &progress{label: label, done: make(chan struct{})}
	if !isTerminal(a.io.Err) {
		return p
	}
	start := time.Now()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(time.Second)
		defer t.Stop()
		for {
			p.mu.Lock()
			fmt.Fprintf(a.io.Err, "\r\033[K%s %s", p.label, time.Since(start).Round(time.Second))
			p.mu.Unlock()
			select {
			case <-p.done:
				fmt.Fprint(a.io.Err, "\r\033[K")
				return
			case <-t.C:
			}
		}
	}()
	return p
}

func (p *progress) set(label string) {
	p.mu.Lock()
	p.label = label
	p.mu.Unlock()
}

func (p *progress) stop() {
	close(p.done)
	p.wg.Wait()
}
