//go:build linux

package e2e_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/whilly-go/whilly/control/client"
	"github.com/whilly-go/whilly/queue"
	"github.com/whilly-go/whilly/sandbox"
	"github.com/whilly-go/whilly/testkit"
)

// bins holds the paths of the binaries TestMain built.
var bins struct {
	whilly, worker string
}

// TestMain builds bin/whilly and bin/whilly-worker once for every test of the package.
// The tests run the binaries exactly as an operator would.
// It is also the init of the sandbox that sandbox.Check tries.
func TestMain(m *testing.M) {
	sandbox.HandleInit()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	dir, err := os.MkdirTemp("", "whilly-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "e2e: temp dir:", err)
		return 1
	}
	defer os.RemoveAll(dir)
	if err := build(dir); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		return 1
	}
	bins.whilly, bins.worker = filepath.Join(dir, "whilly"), filepath.Join(dir, "whilly-worker")
	return m.Run()
}

func build(dir string) error {
	goBin, err := exec.LookPath("go")
	if err != nil {
		return fmt.Errorf("find the go command to build the binaries: %w", err)
	}
	args := []string{"build", "-o", dir + string(filepath.Separator)}
	if raceEnabled {
		args = append(args, "-race")
	}
	cmd := exec.Command(goBin, append(args, "./cmd/whilly", "./cmd/whilly-worker")...)
	cmd.Dir = ".." // the module root
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("go build the binaries: %w\n%s", err, out)
	}
	return nil
}

const bootstrapToken = "e2e-bootstrap-token-0123456789abcdef"

// lockedBuffer collects a process's output.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// proc is a child process of the test.
type proc struct {
	name   string
	cmd    *exec.Cmd
	stdout lockedBuffer
	stderr lockedBuffer
	done   chan struct{}
	state  *os.ProcessState
}

// start runs bin with args and env (on top of a clean environment). The process is
// SIGKILLed when the test ends, and dies with the test binary (Pdeathsig); its output is
// logged when the test failed.
func start(t *testing.T, name, bin string, env []string, args ...string) *proc {
	t.Helper()
	p := &proc{name: name, done: make(chan struct{})}
	p.cmd = exec.Command(bin, args...)
	p.cmd.Env = append(baseEnv(t), env...)
	p.cmd.Stdout, p.cmd.Stderr = &p.stdout, &p.stderr
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	go func() {
		_ = p.cmd.Wait() // the exit status is read from ProcessState
		p.state = p.cmd.ProcessState
		close(p.done)
	}()
	t.Cleanup(func() {
		p.kill(syscall.SIGKILL)
		<-p.done
		if strings.Contains(p.stderr.String(), "WARNING: DATA RACE") {
			t.Errorf("%s ran into a data race", p.name)
		}
		if t.Failed() {
			t.Logf("--- %s (pid %d) %v\nstdout:\n%s\nstderr:\n%s", p.name, p.cmd.Process.Pid, p.state, tail(p.stdout.String()), tail(p.stderr.String()))
		}
	})
	return p
}

func tail(s string) string {
	const n = 6000
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

func (p *proc) kill(sig syscall.Signal) {
	select {
	case <-p.done:
	default:
		_ = p.cmd.Process.Signal(sig) // it may have exited meanwhile
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// wait waits for the process to exit and returns its exit code (-1 when a signal killed it).
func (p *proc) wait(t *testing.T, timeout time.Duration) int {
	t.Helper()
	select {
	case <-p.done:
		return p.state.ExitCode()
	case <-time.After(timeout):
		t.Fatalf("%s did not exit within %v", p.name, timeout)
		return 0
	}
}

// baseEnv is the test's environment without any WHILLY_ variable (a developer's own
// settings must not leak in), with a data directory of the test's own.
func baseEnv(t *testing.T) []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "WHILLY_") {
			env = append(env, kv)
		}
	}
	return append(env, "WHILLY_DATA_DIR="+t.TempDir())
}

// freeAddr returns a loopback address with a port nobody listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	return addr
}

// cluster is one test's database with the control planes and workers running on it.
type cluster struct {
	t    *testing.T
	dsn  string
	pool *pgxpool.Pool
	env  []string // extra environment of every control plane
}

func newCluster(t *testing.T, env ...string) *cluster {
	t.Helper()
	if testing.Short() {
		t.Skip("end-to-end test: skipped with -short")
	}
	dsn := testkit.DSN(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	return &cluster{t: t, dsn: dsn, pool: pool, env: env}
}

// serve starts `whilly serve` on addr and waits until it is ready.
// serveOne starts one `whilly serve` on a free loopback port and returns its base URL.
func (c *cluster) serveOne() string {
	c.t.Helper()
	addr := freeAddr(c.t)
	c.serve("serve", addr)
	return "http://" + addr
}

func (c *cluster) serve(name, addr string) *proc {
	c.t.Helper()
	env := append([]string{"WHILLY_DATABASE_URL=" + c.dsn, "WHILLY_BOOTSTRAP_TOKEN=" + bootstrapToken}, c.env...)
	p := start(c.t, name, bins.whilly, env, "serve", "--listen", addr)
	api := c.api("http://"+addr, bootstrapToken)
	testkit.Eventually(c.t, 60*time.Second, name+" to be ready", func() bool {
		if p.exited() {
			c.t.Fatalf("%s exited: %v\n%s", name, p.state, p.stderr.String())
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		return api.Readyz(ctx) == nil
	})
	return p
}

// api returns a client of the control plane at base; it keeps no idle connection, so
// that it never shows among the workers' connections.
func (c *cluster) api(base, token string) *client.Client {
	c.t.Helper()
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DisableKeepAlives = true
	api, err := client.New(base, token, client.Options{HTTPClient: &http.Client{Transport: tr}})
	if err != nil {
		c.t.Fatal(err)
	}
	return api
}

// adminToken mints an admin API token: the bootstrap token only registers workers.
func (c *cluster) adminToken() string {
	c.t.Helper()
	tok, _, err := queue.NewStore(c.pool, nil, queue.Config{}).MintToken(context.Background(), "e2e", true, nil)
	if err != nil {
		c.t.Fatal(err)
	}
	return tok
}

// importPlan imports a plan file through the API.
func (c *cluster) importPlan(base string, doc []byte) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.api(base, c.adminToken()).ImportPlan(ctx, doc, false); err != nil {
		c.t.Fatalf("import plan: %v", err)
	}
}

// register registers a worker through the API and returns its id and token.
func (c *cluster) register(base string, labels ...string) (id, token string) {
	c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	r, err := c.api(base, bootstrapToken).Register(ctx, client.RegisterRequest{Hostname: "e2e", Labels: labels})
	if err != nil {
		c.t.Fatalf("register worker: %v", err)
	}
	return r.WorkerID, r.Token
}

// workerProc is a whilly-worker process and the id it was registered under.
type workerProc struct {
	*proc
	id string
}

// worker registers a worker and starts whilly-worker with it against base; env adds to
// (or overrides) its environment, args are extra flags.
func (c *cluster) worker(name, base string, env []string, args ...string) workerProc {
	c.t.Helper()
	id, token := c.register(base)
	return c.startWorker(name, base, id, token, env, args...)
}

// startWorker starts whilly-worker as the registered worker id (again, for a restart).
func (c *cluster) startWorker(name, base, id, token string, env []string, args ...string) workerProc {
	c.t.Helper()
	e := append([]string{"WHILLY_CONTROL_URL=" + base, "WHILLY_WORKER_TOKEN=" + token, "WHILLY_WORKER_ID=" + id}, env...)
	return workerProc{proc: start(c.t, name, bins.worker, e, args...), id: id}
}

// taskSpec is one task of a generated plan file.
type taskSpec struct {
	ID                 string   `json:"id"`
	Priority           string   `json:"priority"`
	Description        string   `json:"description"`
	Dependencies       []string `json:"dependencies,omitempty"`
	Labels             []string `json:"labels,omitempty"`
	AcceptanceCriteria []string `json:"acceptance_criteria"`
	TestSteps          []string `json:"test_steps"`
	MaxAttempts        int      `json:"max_attempts,omitempty"`
}

// tasks returns n independent tasks T001…; maxAttempts 0 keeps the default.
func tasks(n, maxAttempts int) []taskSpec {
	out := make([]taskSpec, 0, n)
	for i := range n {
		out = append(out, taskSpec{
			ID: fmt.Sprintf("T%03d", i+1), Priority: "medium",
			Description:        fmt.Sprintf("End-to-end task number %d of its plan", i+1),
			AcceptanceCriteria: []string{"the agent prints the completion marker"},
			TestSteps:          []string{"true"}, MaxAttempts: maxAttempts,
		})
	}
	return out
}

// planFile is the plan file of ts.
func planFile(planID string, ts []taskSpec) []byte {
	doc := struct {
		PlanID  string     `json:"plan_id"`
		Project string     `json:"project"`
		Tasks   []taskSpec `json:"tasks"`
	}{PlanID: planID, Project: "e2e " + planID, Tasks: ts}
	b, _ := json.Marshal(doc) // plain structs: cannot fail
	return b
}

// planDoc is a plan file of n independent tasks T001…; maxAttempts 0 keeps the default.
func planDoc(planID string, n, maxAttempts int) []byte {
	return planFile(planID, tasks(n, maxAttempts))
}

// eventCounts returns, per task of the plan, how many events of type typ it has.
func (c *cluster) eventCounts(planID, typ string) map[string]int {
	c.t.Helper()
	rows, err := c.pool.Query(context.Background(),
		`SELECT task_id, count(*) FROM events WHERE plan_id = $1 AND type = $2 AND task_id IS NOT NULL GROUP BY task_id`, planID, typ)
	if err != nil {
		c.t.Fatalf("count %s events: %v", typ, err)
	}
	defer rows.Close()
	out := map[string]int{}
	for rows.Next() {
		var id string
		var n int
		if err := rows.Scan(&id, &n); err != nil {
			c.t.Fatal(err)
		}
		out[id] = n
	}
	if err := rows.Err(); err != nil {
		c.t.Fatal(err)
	}
	return out
}

// planStatus reads the plan's status from the database.
func (c *cluster) planStatus(planID string) string {
	c.t.Helper()
	var st string
	if err := c.pool.QueryRow(context.Background(), `SELECT status FROM plans WHERE id = $1`, planID).Scan(&st); err != nil {
		c.t.Fatalf("read status of plan %s: %v", planID, err)
	}
	return st
}

// taskRow is the runtime state of one task.
type taskRow struct {
	status, claimedBy string
	attempts          int
}

func (c *cluster) task(planID, taskID string) taskRow {
	c.t.Helper()
	var r taskRow
	err := c.pool.QueryRow(context.Background(),
		`SELECT status, coalesce(claimed_by, ''), attempts FROM tasks WHERE plan_id = $1 AND id = $2`, planID, taskID).
		Scan(&r.status, &r.claimedBy, &r.attempts)
	if err != nil {
		c.t.Fatalf("read task %s: %v", taskID, err)
	}
	return r
}

// assertDoneOnce checks that the plan is DONE and each of its n tasks was completed by
// exactly one COMPLETE event.
func (c *cluster) assertDoneOnce(planID string, n int) {
	c.t.Helper()
	if st := c.planStatus(planID); st != "DONE" {
		c.t.Errorf("plan %s is %s, want DONE", planID, st)
	}
	counts := c.eventCounts(planID, "COMPLETE")
	if len(counts) != n {
		c.t.Errorf("%d tasks have a COMPLETE event, want %d", len(counts), n)
	}
	for id, k := range counts {
		if k != 1 {
			c.t.Errorf("task %s was completed %d times", id, k)
		}
	}
	var notDone int
	if err := c.pool.QueryRow(context.Background(),
		`SELECT count(*) FROM tasks WHERE plan_id = $1 AND status <> 'DONE'`, planID).Scan(&notDone); err != nil {
		c.t.Fatal(err)
	}
	if notDone != 0 {
		c.t.Errorf("%d tasks of %s are not DONE", notDone, planID)
	}
}

// agentScript writes an executable command agent into dir. It records its pid in
// $E2E_DIR/<task>.<attempt>.pid, runs body, then prints a successful result.
func agentScript(t *testing.T, dir, body string) string {
	t.Helper()
	path := filepath.Join(dir, "agent.sh")
	script := "#!/bin/sh\n" +
		`echo $$ > "$E2E_DIR/$WHILLY_TASK_ID.$WHILLY_ATTEMPT.pid"` + "\n" +
		body + "\n" +
		`echo '{"result":"ok <promise>COMPLETE</promise>","total_cost_usd":0.001,"is_error":false}'` + "\n"
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return path
}

// readPID reads a pid file the agent script wrote, or 0 when it is not there (yet).
func readPID(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0
	}
	return n
}

// alive reports whether pid names a live process: one that exists and is not a zombie
// (an orphan whose new parent has not reaped it yet is dead for our purposes).
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	// pid (comm) state …: comm may hold spaces and parentheses, the state follows the last ")".
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return false
	}
	st := s[i+2]
	return st != 'Z' && st != 'X'
}

// groupMembers returns the live processes whose process group is pgid.
func groupMembers(pgid int) []int {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if g, err := syscall.Getpgid(pid); err == nil && g == pgid && alive(pid) {
			out = append(out, pid)
		}
	}
	return out
}

// killLeftovers SIGKILLs, when the test ends, the processes named by pids that are still
// alive then (a failed test must not leave agents behind).
func killLeftovers(t *testing.T, pids func() []int) {
	t.Cleanup(func() {
		for _, pid := range pids() {
			if alive(pid) {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
}

// established counts the TCP connections in state ESTABLISHED whose local port is port:
// the clients connected to a control plane listening there.
func established(port int) int {
	n := 0
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		file, err := os.Open(f)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(file)
		sc.Scan() // header
		for sc.Scan() {
			fields := strings.Fields(sc.Text())
			if len(fields) < 4 || fields[3] != "01" { // 01 = ESTABLISHED
				continue
			}
			_, hexPort, ok := strings.Cut(fields[1], ":")
			if !ok {
				continue
			}
			if p, err := strconv.ParseUint(hexPort, 16, 16); err == nil && int(p) == port {
				n++
			}
		}
		_ = file.Close()
	}
	return n
}

func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := strconv.Atoi(p)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

var errNoEvent = errors.New("no such event")

// releaseEvent returns the payload reason and the creation time of the task's latest
// RELEASE event.
func (c *cluster) releaseEvent(planID, taskID string) (string, time.Time, error) {
	var reason string
	var at time.Time
	err := c.pool.QueryRow(context.Background(), `SELECT coalesce(payload->>'reason', ''), created_at FROM events
		WHERE plan_id = $1 AND task_id = $2 AND type = 'RELEASE' ORDER BY id DESC LIMIT 1`, planID, taskID).Scan(&reason, &at)
	if err != nil {
		return "", at, errNoEvent
	}
	return reason, at, nil
}

// emptyClaims reads whilly_http_requests_total for claims answered 204 from the control
// plane's /metrics.
func (c *cluster) emptyClaims(base string) int {
	c.t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, base+"/metrics", nil)
	if err != nil {
		c.t.Fatal(err)
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.DisableKeepAlives = true
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		c.t.Fatalf("scrape metrics: %v", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "whilly_http_requests_total{") && strings.Contains(line, `code="204"`) &&
			strings.Contains(line, `route="/v1/tasks/claim"`) {
			f := strings.Fields(line)
			n, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				c.t.Fatalf("metrics line %q: %v", line, err)
			}
			return int(n)
		}
	}
	return 0
}
