package agent

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
)

// commandAgent runs any executable named by WHILLY_AGENT_CMD. The prompt is on its stdin,
// the task is in its environment (WHILLY_TASK_ID, WHILLY_PLAN_ID, WHILLY_ATTEMPT … from
// Request.Env), and it prints one JSON object line:
//
//	{"result": "… <promise>COMPLETE</promise>", "total_cost_usd": 0.01, "is_error": false}
//
// The last line of stdout that is a JSON object wins, so the command may log freely before
// it; session_id, num_turns, subtype and errors are read as Claude Code writes them, so a
// wrapper can pass Claude's own result line through. Output without such an object, or
// whose object lacks "result" (unless is_error is true), is malformed.
//
// The command line is split on spaces and run directly, unless it has shell syntax in it
// (quotes, $, pipes, redirections, globs, ~, a leading VAR=value …): then it runs as
// `sh -c CMD`, so quoting and expansion behave as the operator wrote them. Either way it
// runs in its own process group. In the shell form a missing program shows as sh's exit
// status 127 with no output; Run reports that as ErrNotFound.
type commandAgent struct{ r runner }

func (a *commandAgent) Name() string { return NameCommand }

func (a *commandAgent) Run(ctx context.Context, req Request) (Result, error) {
	bin, args, shell := commandArgv(a.r.cfg.Command)
	prompt := req.Prompt
	res, err := a.r.run(ctx, req, bin, args, &prompt, parseCommand)
	if err == nil && shell && res.ExitCode == 127 && res.Reason == ReasonExitCode && res.Text == "" && !res.CostReported {
		return Result{}, fmt.Errorf("run command agent: %w: sh: %s", ErrNotFound, res.Detail)
	}
	return res, err
}

// shellSyntax are the characters that make a command line need a shell.
const shellSyntax = "|&;<>()$`\\\"'*?[]#~{}\n"

// commandArgv splits a WHILLY_AGENT_CMD into an executable and its arguments, or into
// sh -c CMD when it uses shell syntax.
func commandArgv(cmd string) (bin string, args []string, shell bool) {
	fields := strings.Fields(cmd)
	if len(fields) == 0 {
		return "sh", []string{"-c", cmd}, true
	}
	if strings.ContainsAny(cmd, shellSyntax) || strings.Contains(fields[0], "=") {
		return "sh", []string{"-c", cmd}, true
	}
	return fields[0], fields[1:], false
}

// parseCommand reads a command agent's result object, see commandAgent.
func parseCommand(stdout []byte) (output, error) {
	raw, err := lastJSONObject(stdout)
	if err != nil {
		return output{}, err
	}
	var m claudeResult
	if err := json.Unmarshal(raw, &m); err != nil {
		return output{}, fmt.Errorf("decode result object: %w", err)
	}
	if m.Result == nil && !m.IsError {
		return output{}, errors.New(`result object has no "result" field`)
	}
	return resultOutput(m)
}

var errNoJSONObject = errors.New("no JSON object line in output")

// lastJSONObject returns the last line of stdout that is a JSON object, or all of stdout
// when it is one object spread over several lines.
func lastJSONObject(stdout []byte) ([]byte, error) {
	for line := range lastLines(stdout) {
		if len(line) > 0 && line[0] == '{' && json.Valid(line) {
			return line, nil
		}
	}
	if t := bytes.TrimSpace(stdout); len(t) > 0 && t[0] == '{' && json.Valid(t) {
		return t, nil
	}
	return nil, errNoJSONObject
}
