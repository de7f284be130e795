package cli

import (
	"fmt"

	"github.com/whilly-go/whilly/internal/termsafe"
)

// warnTokenFlag warns that a secret was given as a flag: every user of the machine reads
// a process's arguments (ps, /proc/PID/cmdline), and shells keep them in history.
func (a *app) warnTokenFlag(flag, env string) {
	fmt.Fprintf(a.io.Err, "warning: %s is visible to every user of this machine (ps) and kept in shell history; set %s instead\n", flag, env)
}

// termText and termLine are termsafe.Text and termsafe.Line: every text that others
// wrote goes through one of them before it is printed.
func termText(s string) string { return termsafe.Text(s) }

func termLine(s string) string { return termsafe.Line(s) }
