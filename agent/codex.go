package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"

	"github.com/whilly-go/whilly/internal/prices"
)

// codexAgent runs the OpenAI Codex CLI:
//
//	codex exec --json --skip-git-repo-check -s workspace-write [-m M] - < prompt
//
// "-" makes codex read the prompt from stdin. The workspace is the process's working
// directory; --skip-git-repo-check lets it run in a workspace that is not (yet) a git
// checkout, and workspace-write confines its shell commands to that workspace.
//
// Codex reports tokens, not dollars, and has no spending cap: whilly prices the tokens it
// reports with the per-model table (package prices, WHILLY_PRICES_FILE) and charges that,
// marked CostEstimated; Request.BudgetCap only stops it from starting when nothing is left.
type codexAgent struct {
	r      runner
	prices prices.Table
}

func (a *codexAgent) Name() string { return NameCodex }

func (a *codexAgent) Run(ctx context.Context, req Request) (Result, error) {
	prompt := req.Prompt
	res, err := a.r.run(ctx, req, a.r.cfg.CodexBin, codexArgs(a.r.cfg, req), &prompt, parseCodex)
	if err == nil {
		a.price(&res, req.Model)
	}
	return res, err
}

// price charges the tokens a run reported at model's price. A run that reported none
// (killed before its first turn ended) stays unpriced: CostReported false. A run with no
// model named (codex picks its own) or an unknown one is charged the table's default
// (PricedAs says so; an unknown name is logged too).
func (a *codexAgent) price(res *Result, model string) {
	u := res.Usage
	if u.InputTokens == 0 && u.CacheReadInputTokens == 0 && u.OutputTokens == 0 {
		return
	}
	e := a.prices.Cost(model, u.InputTokens, u.CacheReadInputTokens, u.OutputTokens)
	res.Cost, res.CostReported, res.CostEstimated, res.PricedAs = e.Cost, true, true, e.PricedAs
	if e.Fallback && model != "" {
		a.r.cfg.Logger.Warn("codex model has no price in the table; charged at the default model's",
			"model", model, "priced_as", e.PricedAs, "cost_usd", e.Cost.String())
	}
}

// codexArgs runs codex with its own sandbox (-s workspace-write) only outside ours:
// inside a box it is told to bypass it (--dangerously-bypass-approvals-and-sandbox, "for
// running in environments that are externally sandboxed"), since a nested sandbox that
// whilly does not control breaks (its apply_patch fails to write once bubblewrap is
// installed) and adds nothing.
func codexArgs(cfg Config, req Request) []string {
	args := []string{"exec", "--json", "--skip-git-repo-check", "-s", "workspace-write"}
	if cfg.Sandbox.Boxed() {
		args = []string{"exec", "--json", "--skip-git-repo-check", "--dangerously-bypass-approvals-and-sandbox"}
	}
	if req.Model != "" {
		args = append(args, "-m", req.Model)
	}
	return append(args, "-")
}

// codexEvent is one line of `codex exec --json`.
type codexEvent struct {
	Type     string `json:"type"`
	ThreadID string `json:"thread_id"`
	Message  string `json:"message"`
	Usage    *struct {
		InputTokens       int64 `json:"input_tokens"`
		CachedInputTokens int64 `json:"cached_input_tokens"`
		OutputTokens      int64 `json:"output_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
	} `json:"error"`
	Item *struct {
		Type    string `json:"type"`
		Text    string `json:"text"`
		Message string `json:"message"`
	} `json:"item"`
}

// parseCodex reads codex's JSONL events: thread.started (the session id), turn.completed
// (usage), turn.failed, error, and item.completed whose last agent_message is the result
// text. Lines that are not JSON objects are skipped; no event at all is malformed output.
func parseCodex(stdout []byte) (output, error) {
	var (
		out       output
		events    int
		completed bool
		failed    string
		lastErr   string
	)
	for _, line := range bytes.Split(stdout, []byte{'\n'}) {
		line = bytes.TrimSpace(line)
		if len(line) == 0 || line[0] != '{' {
			continue
		}
		var ev codexEvent
		if json.Unmarshal(line, &ev) != nil || ev.Type == "" {
			continue
		}
		events++
		switch ev.Type {
		case "thread.started":
			out.sessionID = ev.ThreadID
		case "turn.completed":
			completed = true
			out.turns++
			if ev.Usage != nil {
				out.usage.InputTokens += ev.Usage.InputTokens
				out.usage.CacheReadInputTokens += ev.Usage.CachedInputTokens
				out.usage.OutputTokens += ev.Usage.OutputTokens
			}
		case "turn.failed":
			failed = "turn failed"
			if ev.Error != nil && ev.Error.Message != "" {
				failed = "turn failed: " + ev.Error.Message
			}
		case "error":
			lastErr = ev.Message
		case "item.completed":
			switch {
			case ev.Item == nil:
			case ev.Item.Type == "agent_message":
				out.text = ev.Item.Text
			case ev.Item.Type == "error":
				lastErr = ev.Item.Message
			}
		}
	}
	if events == 0 {
		return output{}, fmt.Errorf("no codex events in %d bytes of output", len(stdout))
	}
	switch {
	case failed != "":
		out.isError, out.detail = true, failed
	case !completed:
		out.isError = true
		out.detail = "codex ended without completing a turn"
		if lastErr != "" {
			out.detail += ": " + lastErr
		}
	}
	return out, nil
}
