//go:build unix

package agent

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/plan"
)

func TestRunVerify(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	writeFile(t, dir, "go.mod", "module x\n")
	cmds := []plan.Verify{
		{Name: "in workspace", Command: "test -f go.mod && echo found", Required: true},
		{Name: "lint", Command: "echo 'warning: x' >&2; exit 1", Required: false},
		{Name: "tests", Command: "echo 'password=hunter22'; echo FAIL >&2; exit 3", Required: true},
		{Name: "hang", Command: "sleep 1000 & wait", Required: true},
	}
	rs := RunVerify(testCtx(t), nil, dir, cmds, 300*time.Millisecond)
	if len(rs) != 4 {
		t.Fatalf("%d results", len(rs))
	}
	if !rs[0].Passed || rs[0].ExitCode != 0 || !strings.Contains(rs[0].Output, "found") {
		t.Errorf("in workspace: %+v", rs[0])
	}
	if rs[1].Passed || rs[1].Required || !strings.Contains(rs[1].Output, "warning: x") {
		t.Errorf("lint: %+v", rs[1])
	}
	if rs[2].Passed || rs[2].ExitCode != 3 || strings.Contains(rs[2].Output, "hunter22") || !strings.Contains(rs[2].Output, "FAIL") {
		t.Errorf("tests: %+v", rs[2])
	}
	if rs[3].Passed || !rs[3].TimedOut {
		t.Errorf("hang: %+v", rs[3])
	}
	f, failed := VerifyFailure(rs)
	if !failed || f.Name != "tests" {
		t.Errorf("VerifyFailure = %+v %v, want tests (the optional lint does not count)", f, failed)
	}

	ok := Result{ExitCode: 0, Complete: true, Cost: 5}
	ok.ApplyVerify(rs)
	if ok.Succeeded() || ok.Reason != ReasonVerifyFailed || !strings.Contains(ok.Detail, `"tests" failed: exit status 3: FAIL`) || ok.Cost != 5 {
		t.Errorf("ApplyVerify on success: %+v", ok)
	}
	bad := Result{ExitCode: 1, Reason: ReasonExitCode, Detail: "x"}
	bad.ApplyVerify(rs)
	if bad.Reason != ReasonExitCode || bad.Detail != "x" {
		t.Errorf("ApplyVerify replaced an earlier reason: %+v", bad)
	}
	fine := Result{ExitCode: 0, Complete: true}
	fine.ApplyVerify(rs[:2])
	if !fine.Succeeded() {
		t.Errorf("an optional failure failed the attempt: %+v", fine)
	}
}

func TestRunVerifyCancelled(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	rs := RunVerify(ctx, nil, t.TempDir(), []plan.Verify{{Name: "a", Command: "true", Required: true}}, 0)
	if len(rs) != 1 || !rs[0].Skipped || rs[0].Passed {
		t.Fatalf("%+v", rs)
	}
}
