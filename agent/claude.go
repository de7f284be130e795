package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"github.com/whilly-go/whilly/plan"
)

// claudeAgent runs Claude Code in print mode:
//
//	claude -p --output-format json --permission-mode acceptEdits [--model M] [--max-budget-usd X] < prompt
//
// The prompt goes on stdin, not in argv, so it never shows in ps and has no size limit.
// --permission-mode acceptEdits lets the agent edit files in the workspace (the Python
// system's default denied every editing tool, so its agent could not do its job); other
// tools keep Claude Code's own permission rules (Config.PermissionMode changes the mode).
// --max-budget-usd is the plan's remaining budget, so one attempt cannot spend much past it.
type claudeAgent struct{ r runner }

func (a *claudeAgent) Name() string { return NameClaude }

func (a *claudeAgent) Run(ctx context.Context, req Request) (Result, error) {
	prompt := req.Prompt
	return a.r.run(ctx, req, a.r.cfg.ClaudeBin, claudeArgs(a.r.cfg, req), &prompt, parseClaude)
}

func claudeArgs(cfg Config, req Request) []string {
	args := []string{"-p", "--output-format", "json", "--permission-mode", claudePermissionMode(cfg)}
	if req.Model != "" {
		args = append(args, "--model", req.Model)
	}
	if req.BudgetCap != nil && *req.BudgetCap > 0 {
		args = append(args, "--max-budget-usd", req.BudgetCap.String())
	}
	return args
}

// claudePermissionMode is Config.PermissionMode, else bypassPermissions inside a box
// (a full shell, so the agent can build and run its tests) and acceptEdits
// outside one.
func claudePermissionMode(cfg Config) string {
	switch {
	case cfg.PermissionMode != "":
		return cfg.PermissionMode
	case cfg.Sandbox.Boxed():
		return "bypassPermissions"
	}
	return "acceptEdits"
}

// claudeResult is Claude Code's result message, the last message of every run, in all
// three output formats.
type claudeResult struct {
	Type         string            `json:"type"`
	Subtype      string            `json:"subtype"`
	IsError      bool              `json:"is_error"`
	Result       *string           `json:"result"`
	Errors       []json.RawMessage `json:"errors"`
	SessionID    string            `json:"session_id"`
	NumTurns     int               `json:"num_turns"`
	TotalCostUSD *float64          `json:"total_cost_usd"`
	Usage        *Usage            `json:"usage"`
	// PermissionDenials are the tool calls Claude Code refused itself.
	PermissionDenials []json.RawMessage `json:"permission_denials"`
}

// parseClaude reads the result message from `--output-format json` (one object, or with
// --verbose an array of every message) or `stream-json` (one message per line, the result
// last). Lines that are not JSON, such as warnings, are skipped.
func parseClaude(stdout []byte) (output, error) {
	raw, ok := lastResultMessage(stdout)
	if !ok {
		return output{}, fmt.Errorf("no claude result message in %d bytes of output", len(stdout))
	}
	var m claudeResult
	if err := json.Unmarshal(raw, &m); err != nil {
		return output{}, fmt.Errorf("decode claude result message: %w", err)
	}
	return resultOutput(m)
}

// resultOutput maps a Claude-shaped result object (also what command agents print) to an
// output.
func resultOutput(m claudeResult) (output, error) {
	out := output{
		isError:      m.IsError,
		sessionID:    m.SessionID,
		turns:        m.NumTurns,
		costReported: m.TotalCostUSD != nil,
	}
	if m.TotalCostUSD != nil {
		c, err := plan.USDFromFloat(*m.TotalCostUSD)
		if err != nil {
			return output{}, fmt.Errorf("total_cost_usd: %w", err)
		}
		out.cost = c
	}
	if m.Usage != nil {
		out.usage = *m.Usage
	}
	out.denials = m.PermissionDenials
	errs := make([]string, 0, len(m.Errors))
	for _, e := range m.Errors {
		var s string
		if json.Unmarshal(e, &s) != nil {
			s = string(e)
		}
		if s = strings.TrimSpace(s); s != "" {
			errs = append(errs, s)
		}
	}
	if m.Result != nil {
		out.text = *m.Result
	}
	if out.text == "" {
		out.text = strings.Join(errs, "\n")
	}
	switch {
	case m.Subtype == "error_max_budget_usd":
		out.reason = ReasonBudgetExceeded
	case m.Subtype == "error_max_turns":
		out.reason = ReasonMaxTurns
	case strings.HasPrefix(m.Subtype, "error"):
		out.reason = ReasonAgentError
	}
	if out.reason != "" {
		out.isError = true
	}
	if out.isError {
		msg := out.text
		if len(errs) > 0 {
			msg = strings.Join(errs, "; ")
		}
		if m.Subtype != "" && m.Subtype != "success" {
			msg = m.Subtype + ": " + msg
		}
		out.detail = strings.TrimSpace(msg)
		if out.detail == "" {
			out.detail = "the agent reported an error without a message"
		}
	}
	return out, nil
}

// lastResultMessage finds the last {"type":"result",…} in stdout: the whole output as one
// object or array, else the last such line.
func lastResultMessage(stdout []byte) ([]byte, bool) {
	trimmed := bytes.TrimSpace(stdout)
	if len(trimmed) == 0 {
		return nil, false
	}
	switch trimmed[0] {
	case '{':
		if messageType(trimmed) == "result" {
			return trimmed, true
		}
	case '[':
		var msgs []json.RawMessage
		if json.Unmarshal(trimmed, &msgs) == nil {
			for i := len(msgs) - 1; i >= 0; i-- {
				if messageType(msgs[i]) == "result" {
					return msgs[i], true
				}
			}
		}
	}
	for line := range lastLines(trimmed) {
		if len(line) > 0 && line[0] == '{' && messageType(line) == "result" {
			return line, true
		}
	}
	return nil, false
}

// lastLines yields the trimmed lines of b, last first.
func lastLines(b []byte) func(yield func([]byte) bool) {
	return func(yield func([]byte) bool) {
		for len(b) > 0 {
			line := b
			if i := bytes.LastIndexByte(b, '\n'); i >= 0 {
				line, b = b[i+1:], b[:i]
			} else {
				b = nil
			}
			if !yield(bytes.TrimSpace(line)) {
				return
			}
		}
	}
}

// messageType is the "type" of a JSON object, or "" when b is not one.
func messageType(b []byte) string {
	var v struct {
		Type json.RawMessage `json:"type"`
	}
	if json.Unmarshal(b, &v) != nil || len(v.Type) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(v.Type, &s) != nil {
		return ""
	}
	return s
}
