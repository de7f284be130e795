package cli_test

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/spf13/cobra"

	"github.com/whilly-go/whilly/cli"
	"github.com/whilly-go/whilly/cmd/whilly-worker/workercli"
)

// TestEveryCommandHasAnExample walks the whole whilly command tree: every command a user
// can run shows an example in its --help, and every example calls that command.
func TestEveryCommandHasAnExample(t *testing.T) {
	t.Parallel()
	root := cli.NewRootCommand(cli.IO{})
	var walk func(c *cobra.Command)
	n := 0
	walk = func(c *cobra.Command) {
		for _, sub := range c.Commands() {
			walk(sub)
		}
		// A group (whilly plan) only prints its help, which lists its commands.
		if !c.Runnable() || c.HasSubCommands() || c.Hidden || c.Name() == "help" || c.Name() == "completion" {
			return
		}
		n++
		if strings.TrimSpace(c.Example) == "" {
			t.Errorf("%q has no Example in its --help", c.CommandPath())
			return
		}
		if !strings.Contains(c.Example, c.CommandPath()) {
			t.Errorf("the Example of %q never runs it:\n%s", c.CommandPath(), c.Example)
		}
		var out bytes.Buffer
		c.SetOut(&out)
		if err := c.Help(); err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(out.String(), "Examples:") {
			t.Errorf("%q --help shows no Examples section", c.CommandPath())
		}
	}
	walk(root)
	if n < 20 {
		t.Fatalf("walked only %d runnable commands", n)
	}
}

// TestWorkerHelpHasExamples: whilly-worker (no cobra) shows an example of each of its
// commands in its --help, and --help exits 0.
func TestWorkerHelpHasExamples(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"gc", "--help"}} {
		var out, errb bytes.Buffer
		code := workercli.Main(context.Background(), args, &out, &errb, func(string) string { return "" })
		help := out.String() + errb.String()
		if code != 0 || !strings.Contains(help, "Examples:") {
			t.Errorf("whilly-worker %q: exit %d, no Examples section:\n%s", args, code, help)
		}
		want := "whilly-worker --connect"
		if args[0] == "gc" {
			want = "whilly-worker gc --"
		}
		if !strings.Contains(help, want) {
			t.Errorf("whilly-worker %q: the examples never run %q:\n%s", args, want, help)
		}
	}
}

// TestWorkerUsageErrorsExitTwo: whilly-worker's usage errors exit 2, like whilly's.
func TestWorkerUsageErrorsExitTwo(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"--bogus"},
		{"--connect", "http://127.0.0.1:1", "extra"},
		{"--max-tasks", "many"},
		{"gc", "--bogus"},
		{"gc", "extra"},
		{"gc", "--dry-run=maybe"},
	} {
		var out, errb bytes.Buffer
		code := workercli.Main(context.Background(), args, &out, &errb, func(string) string { return "" })
		if code != 2 || errb.Len() == 0 {
			t.Errorf("whilly-worker %q: exit %d, stderr %q; want exit 2", args, code, errb.String())
		}
	}
}
