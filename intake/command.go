package intake

import (
	"strings"
)

// Command is a /whilly comment command.
type Command struct {
	Name string   // status, retry, cancel, budget, help, pause, resume, approve, or unknown
	Args []string // at most maxArgs
}

// Command names.
const (
	CmdStatus  = "status"
	CmdRetry   = "retry"
	CmdCancel  = "cancel"
	CmdBudget  = "budget"
	CmdHelp    = "help"
	CmdPause   = "pause"
	CmdResume  = "resume"
	CmdApprove = "approve"
	CmdStop    = "stop"    // ends the pull request's review/CI loop
	CmdUnknown = "unknown" // Args[0] is what was typed
)

const (
	maxArgs        = 3
	maxCommandLine = 300
)

// ParseCommand finds the command in a comment: the first line that starts with /whilly
// (any case) outside fenced code and quotes. A bare /whilly is help. One comment runs at
// most one command.
func ParseCommand(body string) (Command, bool) {
	var code codeFences
	for _, line := range strings.Split(body, "\n") {
		line = strings.TrimRight(line, "\r")
		if code.skip(line) {
			continue
		}
		t := strings.TrimSpace(line)
		if len(t) < len("/whilly") || !strings.EqualFold(t[:len("/whilly")], "/whilly") {
			continue
		}
		rest := t[len("/whilly"):]
		if rest != "" && rest[0] != ' ' && rest[0] != '\t' {
			continue // /whillyx is not ours
		}
		if len(t) > maxCommandLine {
			return Command{Name: CmdUnknown, Args: []string{"(a line too long)"}}, true
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return Command{Name: CmdHelp}, true
		}
		name := strings.ToLower(f[0])
		args := f[1:]
		if len(args) > maxArgs {
			args = args[:maxArgs]
		}
		switch name {
		case CmdStatus, CmdRetry, CmdCancel, CmdBudget, CmdHelp, CmdPause, CmdResume, CmdApprove, CmdStop:
			return Command{Name: name, Args: args}, true
		}
		return Command{Name: CmdUnknown, Args: []string{f[0]}}, true
	}
	return Command{}, false
}
