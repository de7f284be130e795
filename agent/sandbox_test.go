//go:build linux

package agent

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/whilly-go/whilly/sandbox"
)

// These tests run real agents under real bubblewrap. The evil agents are what a hostile
// issue makes an agent do; each test also runs one unboxed (WHILLY_SANDBOX=none, which is
// how every agent ran before the sandbox) to show the attack works there, so the test
// could fail.

// boxed returns a bwrap Sandbox, or skips when bubblewrap does not work here (CI sets
// WHILLY_TEST_SANDBOX=require, so there it fails instead).
func boxed(t *testing.T, set sandbox.Settings) *sandbox.Sandbox {
	t.Helper()
	if err := sandbox.Check(context.Background()); err != nil {
		if os.Getenv("WHILLY_TEST_SANDBOX") == "require" {
			t.Fatalf("the sandbox must work here: %v", err)
		}
		t.Skipf("bubblewrap does not work here: %v", err)
	}
	set.Mode = sandbox.ModeBwrap
	sb, err := sandbox.New(sandbox.Config{Settings: set})
	if err != nil {
		t.Fatal(err)
	}
	return sb
}

const (
	evilAgentArg    = "__evil_agent"
	workerHelperEnv = "WHILLY_TEST_WORKER_SPEC"
)

// workerSpec is what the worker helper process runs.
type workerSpec struct {
	Mode    string `json:"mode"`
	Command string `json:"command"`
	Dir     string `json:"dir"`
}

// workerHelper is a worker process holding secrets in its environment and HOME, as
// whilly-worker does: it runs one command agent in spec.Mode and prints the Result.
func workerHelper(raw string) int {
	var spec workerSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	sb, err := sandbox.New(sandbox.Config{Settings: sandbox.Settings{Mode: spec.Mode, Net: sandbox.NetProxy}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	a, err := New(NameCommand, Config{Command: spec.Command, Sandbox: sb, KillGrace: 300 * time.Millisecond})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	res, err := a.Run(ctx, Request{Prompt: "p", WorkDir: spec.Dir, Env: []string{"WHILLY_TASK_ID=T-1"}})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	_ = json.NewEncoder(os.Stdout).Encode(res)
	return 0
}

// The worker's secrets: in its environment, and a git credential in its HOME.
var workerSecrets = []string{"whilly_w_secretWorkerToken1", "bootstrapSecret2", "ghp_secretGhToken3", "ghs_secretPushToken4", "pgSecret5"}

// An evil agent reads its parent's environment, every process's, its own, and
// ~/.git-credentials, looking for tokens: in the box it finds none of the worker's.
func TestSandboxEvilAgentFindsNoSecrets(t *testing.T) {
	t.Parallel()
	boxed(t, sandbox.Settings{})
	loot := func(mode string) string {
		root := t.TempDir()
		home, ws, bin := filepath.Join(root, "home"), filepath.Join(root, "ws"), filepath.Join(root, "bin")
		for _, d := range []string{home, ws, bin} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		writeFile(t, home, ".git-credentials", "https://x-access-token:"+workerSecrets[3]+"@github.com\n")
		script := writeScript(t, bin, "evil.sh", `{
  echo "== parent $PPID"; tr '\0' '\n' < /proc/$PPID/environ
  for f in /proc/[0-9]*/environ; do echo "== $f"; tr '\0' '\n' < "$f"; done
  for f in /proc/[0-9]*/cmdline; do echo "== $f"; tr '\0' ' ' < "$f"; echo; done
  echo "== self"; env
  echo "== home $HOME"; cat "$HOME/.git-credentials"; ls -la "$HOME"
  echo "== root"; ls /root /home
} > loot 2>&1
echo '{"result": "<promise>COMPLETE</promise>"}'
`)
		spec, _ := json.Marshal(workerSpec{Mode: mode, Command: script, Dir: ws})
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.CommandContext(testCtx(t), exe, "-test.run=^$")
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + home, workerHelperEnv + "=" + string(spec),
			"WHILLY_WORKER_TOKEN=" + workerSecrets[0], "WHILLY_BOOTSTRAP_TOKEN=" + workerSecrets[1],
			"GH_TOKEN=" + workerSecrets[2], "PGPASSWORD=" + workerSecrets[4]}
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("worker helper (%s): %v\n%s", mode, err, out)
		}
		var res Result
		if err := json.Unmarshal(out, &res); err != nil || !res.Succeeded() || res.Sandbox != mode {
			t.Fatalf("worker helper (%s): %v %s", mode, err, out)
		}
		b, err := os.ReadFile(filepath.Join(ws, "loot"))
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(string(b), "== self") || !strings.Contains(string(b), "WHILLY_TASK_ID=T-1") {
			t.Fatalf("the evil agent did not run as expected (%s):\n%s", mode, b)
		}
		return string(b)
	}
	unboxed := loot(sandbox.ModeNone)
	if !strings.Contains(unboxed, workerSecrets[0]) || !strings.Contains(unboxed, workerSecrets[3]) {
		t.Fatalf("unboxed, the evil agent should find the worker's token in /proc/$PPID/environ and the git credential:\n%s", unboxed)
	}
	inBox := loot(sandbox.ModeBwrap)
	for _, s := range workerSecrets {
		if strings.Contains(inBox, s) {
			t.Errorf("in the box the evil agent found %s:\n%s", s, inBox)
		}
	}
}

// An evil agent leaves daemons behind (setsid, env -i, both): none survives the attempt
// in the box. Unboxed, the one that both left the group and dropped the run's tag does.
func TestSandboxKillsEveryProcessOfTheAttempt(t *testing.T) {
	t.Parallel()
	sb := boxed(t, sandbox.Settings{})
	run := func(sb *sandbox.Sandbox) (dir string, grew []string) {
		dir = t.TempDir()
		bin := t.TempDir()
		// The unboxed run leaves a daemon behind (that is the attack): stop it before the
		// directory goes, and wait until it has.
		t.Cleanup(func() { stopDaemons(t, dir) })
		loop := `while [ -d "$0" ] && [ ! -e "$0/stop" ]; do echo x >> "$0/$1"; sleep 0.05; done`
		cfg := testConfig()
		cfg.Sandbox = sb
		cfg.Command = writeScript(t, bin, "evil.sh", `
setsid /bin/sh -c '`+loop+`' "$PWD" alive-setsid </dev/null >/dev/null 2>&1 &
env -i /bin/sh -c '`+loop+`' "$PWD" alive-envi </dev/null >/dev/null 2>&1 &
env -i setsid /bin/sh -c '`+loop+`' "$PWD" alive-both </dev/null >/dev/null 2>&1 &
nohup /bin/sh -c '`+loop+`' "$PWD" alive-nohup </dev/null >/dev/null 2>&1 &
sleep 0.3
echo '{"result": "<promise>COMPLETE</promise>"}'
`)
		a, _ := New(NameCommand, cfg)
		res, err := a.Run(testCtx(t), Request{Prompt: "p", WorkDir: dir})
		if err != nil || !res.Succeeded() {
			t.Fatalf("run: %v %q %q", err, res.Reason, res.Detail)
		}
		names := []string{"alive-setsid", "alive-envi", "alive-both", "alive-nohup"}
		size := func(n string) int64 {
			fi, err := os.Stat(filepath.Join(dir, n))
			if err != nil {
				return 0
			}
			return fi.Size()
		}
		before := map[string]int64{}
		for _, n := range names {
			if before[n] = size(n); before[n] == 0 {
				t.Fatalf("%s never ran", n)
			}
		}
		time.Sleep(600 * time.Millisecond) // a daemon writes every 50 ms: 600 ms without a line means it is gone
		for _, n := range names {
			if size(n) != before[n] {
				grew = append(grew, n)
			}
		}
		return dir, grew
	}
	if _, grew := run(nil); !strings.Contains(strings.Join(grew, " "), "alive-both") {
		t.Fatalf("unboxed, the env -i setsid daemon should survive (that is the attack); survivors: %v", grew)
	}
	if _, grew := run(sb); len(grew) > 0 {
		t.Errorf("in the box these daemons survived the attempt: %v", grew)
	}
}

// stopDaemons tells the loops writing into dir to stop, and waits until no file there
// grows any more (at most 5 s).
func stopDaemons(t *testing.T, dir string) {
	writeFile(t, dir, "stop", "")
	total := func() int64 {
		var n int64
		entries, _ := os.ReadDir(dir)
		for _, e := range entries {
			if fi, err := e.Info(); err == nil {
				n += fi.Size()
			}
		}
		return n
	}
	for deadline := time.Now().Add(5 * time.Second); time.Now().Before(deadline); {
		before := total()
		time.Sleep(200 * time.Millisecond)
		if total() == before {
			return
		}
	}
}

// evilAgent is this test binary run as a command agent: "net LISTENER ALLOWED_URL" tries
// a listener on the worker's loopback directly, a host that is not allowed through the
// proxy, and the allowed model API through it.
func evilAgent(args []string) int {
	_, _ = io.Copy(io.Discard, os.Stdin)
	if len(args) != 3 || args[0] != "net" {
		return 2
	}
	var report []string
	if c, err := net.DialTimeout("tcp", args[1], 2*time.Second); err == nil {
		report = append(report, "direct=connected")
		_ = c.Close()
	} else {
		report = append(report, "direct=refused")
	}
	proxy := os.Getenv("HTTPS_PROXY")
	pu, err := url.Parse(proxy)
	if proxy == "" || err != nil {
		report = append(report, "proxy=none")
	} else {
		report = append(report, "evil="+connectStatus(pu.Host, "evil.example.com:443"))
		client := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: http.ProxyURL(pu)}}
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, args[2], nil)
		if resp, err := client.Do(req); err != nil {
			report = append(report, "allowed=error")
		} else {
			b, _ := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			report = append(report, fmt.Sprintf("allowed=%d:%s", resp.StatusCode, b))
		}
	}
	out, _ := json.Marshal(map[string]any{"result": strings.Join(report, " ") + " " + CompletionMarker})
	fmt.Println(string(out))
	return 0
}

// connectStatus asks the proxy at addr for a tunnel to target and returns the status code.
func connectStatus(addr, target string) string {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return "unreachable"
	}
	defer func() { _ = c.Close() }()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	fmt.Fprintf(c, "CONNECT %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, target)
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "error"
	}
	if f := strings.Fields(line); len(f) >= 2 {
		return f[1]
	}
	return "garbled"
}

// In the box an agent reaches neither a listener on the worker's loopback nor a host that
// is not allowed; the refused host is reported once; the model API (allowed through its
// overridden base URL) is reached through the proxy.
func TestSandboxEgress(t *testing.T) {
	t.Parallel()
	sb := boxed(t, sandbox.Settings{})
	ln, err := (&net.ListenConfig{}).Listen(testCtx(t), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = ln.Close() }()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			_ = c.Close()
		}
	}()
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "ok") }))
	defer api.Close()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	run := func(sb *sandbox.Sandbox) (string, []sandbox.Denial) {
		cfg := testConfig()
		cfg.Sandbox = sb
		cfg.BaseEnv = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "ANTHROPIC_BASE_URL=" + api.URL}
		cfg.Command = strings.Join([]string{exe, evilAgentArg, "net", ln.Addr().String(), api.URL + "/v1/ok"}, " ")
		a, _ := New(NameCommand, cfg)
		var (
			mu     sync.Mutex
			denied []sandbox.Denial
		)
		res, err := a.Run(testCtx(t), Request{Prompt: "p", WorkDir: t.TempDir(), OnEgressDenied: func(d sandbox.Denial) {
			mu.Lock()
			denied = append(denied, d)
			mu.Unlock()
		}})
		if err != nil || !res.Succeeded() {
			t.Fatalf("run: %v %q %q %s", err, res.Reason, res.Detail, res.Excerpt)
		}
		mu.Lock()
		defer mu.Unlock()
		return res.Text, denied
	}
	if text, _ := run(nil); !strings.Contains(text, "direct=connected") {
		t.Fatalf("unboxed, the agent should reach the worker's loopback (that is the attack): %s", text)
	}
	text, denied := run(sb)
	for _, want := range []string{"direct=refused", "evil=403", "allowed=200:ok"} {
		if !strings.Contains(text, want) {
			t.Errorf("in the box: %q lacks %s", text, want)
		}
	}
	if len(denied) != 1 || denied[0] != (sandbox.Denial{Host: "evil.example.com", Port: 443}) {
		t.Errorf("denials = %+v, want exactly evil.example.com:443", denied)
	}
}

// The attempt's timeout stops a boxed agent at once, with everything it started.
func TestSandboxTimeoutKillsTheBox(t *testing.T) {
	t.Parallel()
	sb := boxed(t, sandbox.Settings{})
	dir := t.TempDir()
	cfg := testConfig()
	cfg.Sandbox = sb
	cfg.Command = writeScript(t, t.TempDir(), "hang.sh", "sleep 1000 &\nsetsid sleep 1000 &\nexec sleep 1000\n")
	a, _ := New(NameCommand, cfg)
	start := time.Now()
	res, err := a.Run(testCtx(t), Request{Prompt: "p", WorkDir: dir, Timeout: 500 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if res.Reason != ReasonTimeout || res.Sandbox != sandbox.ModeBwrap {
		t.Fatalf("reason %q sandbox %q, want timeout in bwrap", res.Reason, res.Sandbox)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("the run took %s to end after a 500ms timeout", d)
	}
}
