package worker_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/sandbox"
	"github.com/whilly-go/whilly/worker"
)

// linkAgent plants symlinks in the checkout's .git, each pointing at $VICTIM, a file
// outside the workspace, then changes a file. It needs nothing but a shell, so it runs in
// the box as well as without it.
const linkAgent = `#!/bin/sh
cat >/dev/null
for f in $LINKS; do
  mkdir -p "$(dirname ".git/$f")"
  rm -rf ".git/$f"
  ln -s "$VICTIM" ".git/$f"
done
echo "$WHILLY_TASK_ID" >> notes.txt
printf '{"result": "did %s <promise>COMPLETE</promise>", "total_cost_usd": 0.01}\n' "$WHILLY_TASK_ID"
`

// victimMark is on each line of the file the agent's links point at: no line of it may
// reach an event, a prompt or a log.
const victimMark = "victim-7c1d9e"

// An agent plants symlinks in .git (COMMIT_EDITMSG, logs/HEAD, FETCH_HEAD, packed-refs,
// index, config, HEAD …) pointing at a file of the worker's outside the workspace, in the
// box and without it. After the task the file is unchanged, no line of it shows in any
// event or the worker's log, and the task's change is pushed: the worker's git never ran
// on the .git the agent could write. Before, the worker's commit wrote its message
// through COMMIT_EDITMSG into the file, and git echoed the file's first line from
// packed-refs into the FAIL event.
func TestPlantedGitLinksDoNotReachTheWorker(t *testing.T) {
	t.Parallel()
	sets := map[string]string{
		"writes": "COMMIT_EDITMSG logs/HEAD logs/refs/heads/whilly/issue-7 FETCH_HEAD ORIG_HEAD",
		"reads":  "packed-refs",
		"all": "COMMIT_EDITMSG logs/HEAD FETCH_HEAD ORIG_HEAD packed-refs index config HEAD description info/exclude " +
			"hooks/pre-commit refs/heads/whilly/issue-7 objects/info/alternates",
	}
	for _, mode := range []string{sandbox.ModeNone, sandbox.ModeBwrap} {
		for name, links := range sets {
			t.Run(mode+"/"+name, func(t *testing.T) {
				t.Parallel()
				if mode == sandbox.ModeBwrap {
					boxedT(t)
				}
				e := newRepoEnv(t)
				e.box, e.script = mode, linkAgent
				victim := filepath.Join(t.TempDir(), "CLAUDE.md")
				const content = "first line " + victimMark + "\nsecond line " + victimMark + "\n"
				writeFile(t, victim, content)
				e.importPlan(t, "links", 1, 1)
				sum, logs := e.run(t, "links", "", "LINKS="+links, "VICTIM="+victim)
				if b, err := os.ReadFile(victim); err != nil || string(b) != content {
					t.Errorf("the file the links point at changed: %q %v", b, err)
				}
				evs, err := e.st.Events(context.Background(), queue.EventFilter{PlanID: "links", Limit: 1000})
				if err != nil {
					t.Fatal(err)
				}
				for _, ev := range evs {
					if strings.Contains(string(ev.Payload)+string(ev.Detail), victimMark) {
						t.Errorf("event %s shows the file's line: %s %s", ev.Type, ev.Payload, ev.Detail)
					}
				}
				if strings.Contains(logs, victimMark) {
					t.Errorf("the worker's log shows the file's line")
				}
				if sum.Done != 1 {
					t.Fatalf("summary %+v, want the task done\n%s", sum, logs)
				}
				if notes := gitIn(t, e.remote, "show", "refs/heads/whilly/issue-7:notes.txt"); notes != "T00" {
					t.Errorf("notes.txt on the branch = %q", notes)
				}
				if files := gitIn(t, e.remote, "ls-tree", "-r", "--name-only", "refs/heads/whilly/issue-7"); files != "README.md\napp.txt\nnotes.txt" {
					t.Errorf("the pushed tree holds:\n%s", files)
				}
			})
		}
	}
}

// What is published is read from the work tree after the agent ended: a FIFO, a socket,
// a device or a .git below the top fails the attempt as a refused diff naming the path,
// and nothing is pushed. Before, git add skipped the FIFO and the socket silently and
// pushed the rest.
func TestSpecialFilesInTheWorkTreeAreRefused(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name, path, rule string
		make             func(t *testing.T, path string)
	}{
		{"fifo", "pipe", worker.RuleSpecial, func(t *testing.T, p string) {
			if err := syscall.Mkfifo(p, 0o600); err != nil {
				t.Fatal(err)
			}
		}},
		{"socket", "sub/agent.sock", worker.RuleSpecial, func(t *testing.T, p string) {
			if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("unix", p)
			if err != nil {
				t.Fatal(err)
			}
			ln.(*net.UnixListener).SetUnlinkOnClose(false)
			_ = ln.Close()
		}},
		{"device", "null", worker.RuleSpecial, func(t *testing.T, p string) {
			if os.Geteuid() != 0 {
				t.Skip("making a device needs root")
			}
			if err := syscall.Mknod(p, syscall.S_IFCHR|0o600, 1<<8|3); err != nil {
				t.Fatal(err)
			}
		}},
		{"nested git", "vendor/lib/.git", worker.RuleSubmodule, func(t *testing.T, p string) {
			writeFile(t, filepath.Join(p, "HEAD"), "ref: refs/heads/main\n")
			writeFile(t, filepath.Join(filepath.Dir(p), "lib.go"), "package lib\n")
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			remote := newRemote(t)
			ws := worker.NewWorkspaces(t.TempDir(), "", nil)
			co := openWorkspace(t, ws, "special", fileSpec(remote))
			defer co.Close()
			writeFile(t, filepath.Join(co.Dir, "feature.txt"), "new\n")
			c.make(t, filepath.Join(co.Dir, c.path))
			_, err := co.Publish(context.Background(), worker.CommitMessage("special", "T1", "Add it"))
			var rej *worker.DiffRejectedError
			if !errors.As(err, &rej) || len(rej.Reasons) != 1 || rej.Reasons[0].Rule != c.rule || rej.Reasons[0].Path != c.path {
				t.Fatalf("Publish = %v (%+v), want a refusal %s of %s", err, rej, c.rule, c.path)
			}
			if remoteHasBranch(t, remote, "whilly/issue-1") {
				t.Fatal("the branch was pushed")
			}
		})
	}
}
