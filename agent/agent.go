package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sort"
	"strings"
	"time"

	"github.com/whilly-go/whilly/internal/prices"
	"github.com/whilly-go/whilly/plan"
	"github.com/whilly-go/whilly/sandbox"
)

// CompletionMarker is what an agent prints in its final message when, and only when, the
// task is done. Its absence makes a run a failure (ReasonNoCompletionMarker).
const CompletionMarker = "<promise>COMPLETE</promise>"

// Defaults used when a Config or Request leaves a value at zero.
const (
	DefaultTimeout        = 30 * time.Minute // per attempt (WHILLY_AGENT_TIMEOUT)
	DefaultKillGrace      = 2 * time.Second  // SIGTERM → SIGKILL
	DefaultMaxOutputBytes = 8 << 20          // stdout kept for parsing (its tail)
	DefaultVerifyTimeout  = 10 * time.Minute // per verification command
	MaxExcerptBytes       = 4 << 10          // Result.Excerpt, VerifyResult.Output
	maxTextBytes          = 64 << 10         // Result.Text
	maxDetailBytes        = 1 << 10          // Result.Detail
	maxStderrBytes        = 1 << 20          // stderr kept for the excerpt
)

// Reasons a run failed. They are bounded classes, persisted in task events and shown on
// GitHub: never rename one.
const (
	ReasonTimeout            = "timeout"              // the attempt's timeout killed the agent
	ReasonCancelled          = "cancelled"            // ctx was cancelled (shutdown, lost lease, plan cancelled)
	ReasonExitCode           = "exit_code"            // non-zero exit without an error report the adapter understands
	ReasonNoCompletionMarker = "no_completion_marker" // ran fine but never printed CompletionMarker
	ReasonAgentError         = "agent_error"          // the agent reported an error (is_error, turn.failed …)
	ReasonMalformedOutput    = "malformed_output"     // exit 0 but output the adapter cannot parse
	ReasonBudgetExceeded     = "budget_exceeded"      // the agent hit its spending cap, or there was none left
	ReasonMaxTurns           = "max_turns"            // the agent hit its turn limit
	ReasonVerifyFailed       = "verify_failed"        // a required verification command failed
	ReasonPromptInjection    = "prompt_injection_blocked"
	ReasonResourceLimit      = "resource_limit" // the box went over its memory, process or disk limit
)

// ErrNotFound means the agent's executable does not exist or is not executable. Run
// returns it (wrapped) instead of a Result: nothing ran and nothing was spent.
var ErrNotFound = errors.New("agent executable not found")

// Agent runs one attempt of one task.
//
// Run returns an error only when the agent could not be run at all (ErrNotFound, a pipe
// that could not be made); a run that fails for any other reason is a Result with a
// Reason, and still reports what it cost.
type Agent interface {
	Name() string
	Run(ctx context.Context, req Request) (Result, error)
}

// Request is one attempt.
type Request struct {
	Prompt  string
	WorkDir string   // the workspace; "" means the worker's current directory
	Env     []string // extra KEY=VALUE pairs on top of the worker's environment (WHILLY_TASK_ID …)
	Model   string   // "" lets the agent pick
	// BudgetCap is what is left of the plan's budget; adapters whose agent supports a
	// spending cap pass it on. nil means unlimited; zero or less means nothing is left and
	// the agent is not started (ReasonBudgetExceeded).
	BudgetCap *plan.USD
	Timeout   time.Duration // 0 means DefaultTimeout
	Log       io.Writer     // receives the agent's whole stdout and stderr, secrets redacted line by line; may be nil
	// Secrets are values the worker knows are secret (its own token, the claim's push
	// token): masked wherever they appear in Log, on top of Redact's patterns, which a
	// value glued to other text can slip past.
	Secrets []string
	// OnEgressDenied, when set, is told about each host the sandbox's proxy refused the
	// agent (once per host and port). It is called from another goroutine.
	OnEgressDenied func(sandbox.Denial)
	// Binds are more of the worker's paths in the box (the repository store's objects, the
	// plan's caches); unboxed runs ignore them.
	Binds []sandbox.Bind
}

// Usage is the token count an agent reported, summed over its turns.
type Usage struct {
	InputTokens              int64 `json:"input_tokens"`
	OutputTokens             int64 `json:"output_tokens"`
	CacheReadInputTokens     int64 `json:"cache_read_input_tokens"`
	CacheCreationInputTokens int64 `json:"cache_creation_input_tokens"`
}

// Result is what one attempt did. Text, Detail and Excerpt have secrets redacted.
type Result struct {
	ExitCode int      `json:"exit_code"` // -1 when killed by a signal or never started
	Text     string   `json:"text"`      // the agent's final message (its tail if longer than 64 KiB)
	Cost     plan.USD `json:"cost_usd"`
	// CostReported is false when the agent says nothing about cost (a command agent that
	// omits total_cost_usd, a codex run that reported no tokens, a run killed before it
	// printed its result): Cost is then 0 and the budget cannot see what the run spent.
	CostReported bool `json:"cost_reported"`
	// CostEstimated says Cost is whilly's price of the tokens the agent reported (codex,
	// priced with the per-model table of package prices), not a figure the agent gave;
	// PricedAs is the table's model whose price was charged.
	CostEstimated bool          `json:"cost_estimated,omitempty"`
	PricedAs      string        `json:"priced_as,omitempty"`
	Complete      bool          `json:"complete"` // CompletionMarker is in Text
	IsError       bool          `json:"is_error"` // the agent itself reported an error
	Reason        string        `json:"reason,omitempty"`
	Detail        string        `json:"detail,omitempty"`  // one bounded human sentence about Reason
	Excerpt       string        `json:"excerpt,omitempty"` // tail of stdout/stderr, ≤ MaxExcerptBytes
	SessionID     string        `json:"session_id,omitempty"`
	Turns         int           `json:"turns,omitempty"`
	Usage         Usage         `json:"usage"`
	Duration      time.Duration `json:"duration"`
	// Sandbox is how the agent's process ran: sandbox.ModeBwrap or sandbox.ModeNone; ""
	// when no process ran (sim, or nothing started).
	Sandbox string `json:"sandbox,omitempty"`
	// PermissionDenials are the tool calls the agent's CLI refused itself (Claude Code's
	// permission_denials), as it reported them.
	PermissionDenials []json.RawMessage `json:"permission_denials,omitempty"`
}

// Succeeded reports whether the attempt counts as done: exit code 0, the completion marker,
// no error reported by the agent, and no failure reason (verification included, see
// ApplyVerify).
func (r Result) Succeeded() bool {
	return r.ExitCode == 0 && r.Complete && !r.IsError && r.Reason == ""
}

// Config configures the built-in adapters. The zero value works: binaries come from PATH.
type Config struct {
	Logger    *slog.Logger // nil discards
	ClaudeBin string       // CLAUDE_BIN; default "claude"
	CodexBin  string       // CODEX_BIN; default "codex"
	Command   string       // WHILLY_AGENT_CMD, required by the command adapter
	// PermissionMode is claude's --permission-mode; "" is bypassPermissions in a sandbox
	// (the agent has a full shell inside the box) and acceptEdits without one.
	PermissionMode string
	KillGrace      time.Duration // SIGTERM → SIGKILL of the process group; default DefaultKillGrace
	MaxOutputBytes int           // stdout tail kept for parsing; default DefaultMaxOutputBytes
	// BaseEnv is the worker's environment, from which the sandbox's allow-list takes
	// what an agent gets (sandbox.Spec.Environ); nil means os.Environ(). whilly's own
	// secrets never pass.
	BaseEnv []string
	// Sandbox is the box agent processes run in; nil runs them unboxed (sim, tests).
	Sandbox *sandbox.Sandbox
	Sim     SimConfig
	// PricesFile extends and overrides the built-in token prices codex runs are charged
	// at (WHILLY_PRICES_FILE); "" uses the built-in table.
	PricesFile string
}

func (c Config) withDefaults() Config {
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ClaudeBin == "" {
		c.ClaudeBin = "claude"
	}
	if c.CodexBin == "" {
		c.CodexBin = "codex"
	}
	if c.KillGrace <= 0 {
		c.KillGrace = DefaultKillGrace
	}
	if c.MaxOutputBytes <= 0 {
		c.MaxOutputBytes = DefaultMaxOutputBytes
	}
	return c
}

// Adapter names accepted by New.
const (
	NameClaude  = "claude"
	NameCodex   = "codex"
	NameCommand = "command"
	NameSim     = "sim"
)

// Names lists the built-in adapters, sorted.
func Names() []string {
	n := []string{NameClaude, NameCodex, NameCommand, NameSim}
	sort.Strings(n)
	return n
}

// New returns the built-in adapter called name. It does not look for the executable:
// a missing one is reported by Run (ErrNotFound), so a worker can start and say so per task.
func New(name string, cfg Config) (Agent, error) {
	cfg = cfg.withDefaults()
	switch name {
	case NameClaude:
		return &claudeAgent{r: runner{cfg: cfg, name: NameClaude}}, nil
	case NameCodex:
		table, err := prices.Load(cfg.PricesFile)
		if err != nil {
			return nil, fmt.Errorf("new codex agent: %w", err)
		}
		return &codexAgent{r: runner{cfg: cfg, name: NameCodex}, prices: table}, nil
	case NameCommand:
		if strings.TrimSpace(cfg.Command) == "" {
			return nil, errors.New("new command agent: WHILLY_AGENT_CMD is empty")
		}
		return &commandAgent{r: runner{cfg: cfg, name: NameCommand}}, nil
	case NameSim:
		if err := cfg.Sim.validate(); err != nil {
			return nil, fmt.Errorf("new sim agent: %w", err)
		}
		return &simAgent{cfg: cfg.Sim}, nil
	}
	return nil, fmt.Errorf("unknown agent %q (valid: %s)", name, strings.Join(Names(), ", "))
}

// noBudgetLeft reports whether the cap leaves nothing to spend, and the Result to return
// without starting the agent.
func noBudgetLeft(req Request) (Result, bool) {
	if req.BudgetCap == nil || *req.BudgetCap > 0 {
		return Result{}, false
	}
	return Result{
		ExitCode:     -1,
		CostReported: true,
		Reason:       ReasonBudgetExceeded,
		Detail:       "the plan has no budget left; the agent was not started",
	}, true
}
