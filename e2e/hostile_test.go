//go:build linux

package e2e_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/whilly-go/whilly/control/client"
)

// digest is a fingerprint of what hostile input must never change: every plan and task
// row and the event log.
func (c *cluster) digest() string {
	c.t.Helper()
	var d string
	err := c.pool.QueryRow(context.Background(), `SELECT
		coalesce((SELECT md5(string_agg(p::text, '|' ORDER BY p.id)) FROM plans p), '') || '/' ||
		coalesce((SELECT md5(string_agg(t::text, '|' ORDER BY t.plan_id, t.id)) FROM tasks t), '') || '/' ||
		(SELECT count(*) || ':' || coalesce(max(id), 0) FROM events)`).Scan(&d)
	if err != nil {
		c.t.Fatalf("digest the database: %v", err)
	}
	return d
}

// hostilePlan is a valid plan file with raw spliced into its first task.
func hostilePlan(raw string) []byte {
	return []byte(`{"plan_id": "evil", "project": "Evil", "tasks": [{"id": "E1", "priority": "high",
		"description": "A task that is described at length", ` + raw + `}]}`)
}

// Every kind of hostile input of issue 14 (items 4 to 9), over HTTP against a real
// `whilly serve` and through the real `whilly` CLI: each is refused with a 4xx or exit 1
// and one plain sentence naming what to fix, and the database is unchanged.
func TestHostileInputIsRefusedAndWritesNothing(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	base := c.serveOne()
	c.importPlan(base, planDoc("hostile", 2, 0))
	_, token := c.register(base)
	ctx := context.Background()
	cl, err := c.api(base, token).Claim(ctx, client.ClaimRequest{PlanID: "hostile"})
	if err != nil || cl == nil {
		t.Fatalf("claim: %v, %v", cl, err)
	}
	admin := c.adminToken()
	lease := cl.Lease.ID
	task := "/v1/plans/hostile/tasks/" + cl.Task.ID
	dir := t.TempDir()

	type httpCase struct {
		method, path, token string
		body                []byte
	}
	type cliCase struct {
		args []string
		file []byte // written to a file whose path replaces FILE in args
	}
	for _, tc := range []struct {
		name   string
		http   *httpCase
		cli    *cliCase
		status int
		want   string
	}{
		{name: "NUL in fail reason", http: &httpCase{"POST", task + "/fail", token,
			[]byte(`{"lease_id":"` + lease + `","reason":"bad\u0000reason"}`)}, status: 400, want: "Field reason must not contain a NUL byte"},
		{name: "NUL in fail detail", http: &httpCase{"POST", task + "/fail", token,
			[]byte(`{"lease_id":"` + lease + `","reason":"agent_error","detail":{"x":"a\u0000b"}}`)}, status: 400, want: "Field detail must not contain a NUL byte"},
		{name: "NUL in release reason", http: &httpCase{"POST", task + "/release", token,
			[]byte(`{"lease_id":"` + lease + `","reason":"\u0000"}`)}, status: 400, want: "Field reason must not contain a NUL byte"},
		{name: "NUL in a task event's payload", http: &httpCase{"POST", task + "/events", token,
			[]byte(`{"lease_id":"` + lease + `","type":"log.x","payload":{"\u0000":1}}`)}, status: 400, want: "Field payload must not contain a NUL byte"},
		{name: "NUL in a path id", http: &httpCase{"POST", "/v1/plans/hostile/tasks/T%00/start", token,
			[]byte(`{"lease_id":"` + lease + `"}`)}, status: 400, want: "the task id in the path must not contain a NUL byte"},
		{name: "NUL in a plan_id filter", http: &httpCase{"GET", "/v1/events?plan_id=a%00b", admin, nil}, status: 400, want: "Field plan_id must not contain a NUL byte"},
		{name: "NUL in a claim's plan_id", http: &httpCase{"POST", "/v1/tasks/claim", token,
			[]byte(`{"plan_id":"a\u0000"}`)}, status: 400, want: "Field plan_id must not contain a NUL byte"},
		{name: "bytes that are not UTF-8 in a report", http: &httpCase{"POST", task + "/fail", token,
			[]byte("{\"lease_id\":\"" + lease + "\",\"reason\":\"bad \xff\"}")}, status: 400, want: "The body must be valid UTF-8"},
		{name: "cost of 1e8", http: &httpCase{"POST", task + "/complete", token,
			[]byte(`{"lease_id":"` + lease + `","cost_usd":100000000}`)}, status: 400, want: "amounts must be less than 100000000 USD"},
		{name: "budget of 1e9 by PATCH", http: &httpCase{"PATCH", "/v1/plans/hostile", admin,
			[]byte(`{"budget_usd":1000000000}`)}, status: 400, want: "amounts must be less than 100000000 USD"},
		{name: "NUL in a plan's description (POST /v1/plans)", http: &httpCase{"POST", "/v1/plans", admin,
			[]byte(`{"plan_id":"evil","project":"Evil","tasks":[{"id":"E1","priority":"high","description":"nul \u0000 here"}]}`)},
			status: 422, want: `task "E1": field "description": must not contain a NUL byte`},
		{name: "not UTF-8 in a plan (POST /v1/plans)", http: &httpCase{"POST", "/v1/plans", admin, hostilePlan("\"key_files\": [\"a\xc3\"]")},
			status: 422, want: `field "key_files": must be valid UTF-8`},
		{name: "a plan key given twice (POST /v1/plans)", http: &httpCase{"POST", "/v1/plans", admin,
			[]byte(`{"plan_id":"evil","plan_id":"other","project":"Evil","tasks":[]}`)}, status: 422, want: `field "plan_id": key "plan_id" appears twice`},
		{name: "a misspelt key (POST /v1/plans)", http: &httpCase{"POST", "/v1/plans", admin, hostilePlan(`"dependncies": ["X"]`)},
			status: 422, want: `unknown key "dependncies"; did you mean "dependencies"?`},
		{name: "a budget of 1e8 (POST /v1/plans)", http: &httpCase{"POST", "/v1/plans", admin,
			[]byte(`{"plan_id":"evil","project":"Evil","budget_usd":1e8,"tasks":[]}`)}, status: 422, want: "amounts must be less than 100000000 USD"},
		{name: "an id with .. (POST /v1/plans)", http: &httpCase{"POST", "/v1/plans", admin,
			[]byte(`{"plan_id":"evil","project":"Evil","tasks":[{"id":"a..b","priority":"high","description":"A task that is described at length"}]}`)},
			status: 422, want: `field "id": "a..b" must not contain ".."`},

		{name: "CLI: NUL in a plan file", cli: &cliCase{[]string{"plan", "import", "FILE"}, hostilePlan(`"test_steps": ["a\u0000"]`)},
			want: `task "E1": field "test_steps": must not contain a NUL byte`},
		{name: "CLI: not UTF-8 in a plan file", cli: &cliCase{[]string{"plan", "import", "FILE"},
			[]byte("{\"plan_id\": \"evil\", \"project\": \"Ev\xffil\", \"tasks\": []}")}, want: `field "project": must be valid UTF-8`},
		{name: "CLI: a task key given twice", cli: &cliCase{[]string{"plan", "import", "FILE"}, hostilePlan(`"priority": "low"`)},
			want: `key "priority" appears twice; keep one`},
		{name: "CLI: a misspelt key", cli: &cliCase{[]string{"plan", "import", "FILE"}, hostilePlan(`"acceptance_criterion": ["x"]`)},
			want: `unknown key "acceptance_criterion"; did you mean "acceptance_criteria"?`},
		{name: "CLI: a budget of 1e8 in a file", cli: &cliCase{[]string{"plan", "import", "FILE"},
			[]byte(`{"plan_id": "evil", "project": "Evil", "budget_usd": 100000000, "tasks": []}`)}, want: "amounts must be less than 100000000 USD"},
		{name: "CLI: plan budget 1e9", cli: &cliCase{[]string{"plan", "budget", "hostile", "1000000000"}, nil}, want: "amounts must be less than 100000000 USD"},
		{name: "CLI: an id with ..", cli: &cliCase{[]string{"plan", "import", "FILE"},
			[]byte(`{"plan_id": "evil", "project": "Evil", "tasks": [{"id": "../x", "priority": "high", "description": "A task that is described at length"}]}`)},
			want: `"../x" must not contain ".."`},
	} {
		before := c.digest()
		var msg string
		if tc.http != nil {
			status, body := rawRequest(t, base, tc.http.method, tc.http.path, tc.http.token, tc.http.body)
			var e client.ErrorBody
			if err := json.Unmarshal(body, &e); err != nil || e.Error == "" {
				t.Errorf("%s: body %q is not {\"error\", \"message\"}", tc.name, body)
			}
			if status != tc.status {
				t.Errorf("%s: status %d, want %d (%s)", tc.name, status, tc.status, e.Message)
			}
			msg = e.Message
		} else {
			args := append([]string(nil), tc.cli.args...)
			for i, a := range args {
				if a == "FILE" {
					args[i] = filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".json")
					if err := os.WriteFile(args[i], tc.cli.file, 0o600); err != nil {
						t.Fatal(err)
					}
				}
			}
			p := start(t, tc.name, bins.whilly, []string{"WHILLY_DATABASE_URL=" + c.dsn}, args...)
			if code := p.wait(t, 60*time.Second); code != 1 {
				t.Errorf("%s: exit %d, want 1", tc.name, code)
			}
			msg = strings.TrimSpace(p.stderr.String())
		}
		if !strings.Contains(msg, tc.want) {
			t.Errorf("%s: message %q, want it to say %q", tc.name, msg, tc.want)
		}
		if strings.Count(strings.TrimSpace(msg), "\n") > 0 {
			t.Errorf("%s: message %q is more than one line", tc.name, msg)
		}
		if after := c.digest(); after != before {
			t.Errorf("%s: the database changed", tc.name)
		}
	}

	// Agent output is kept, not refused: a NUL is removed and the result marked repaired.
	status, body := rawRequest(t, base, "POST", task+"/complete", token,
		[]byte(`{"lease_id":"`+lease+`","cost_usd":0.25,"result":"done\u0000 <promise>COMPLETE</promise>"}`))
	if status != 200 {
		t.Fatalf("complete with NUL in the agent's result: %d %s", status, body)
	}
	var result string
	var repaired bool
	if err := c.pool.QueryRow(ctx, `SELECT t.result, coalesce((e.payload->>'result_repaired')::bool, false)
		FROM tasks t JOIN events e ON e.plan_id = t.plan_id AND e.task_id = t.id AND e.type = 'COMPLETE'
		WHERE t.plan_id = 'hostile' AND t.id = $1`, cl.Task.ID).Scan(&result, &repaired); err != nil {
		t.Fatal(err)
	}
	if result != "done <promise>COMPLETE</promise>" || !repaired {
		t.Errorf("stored result %q, repaired %v; want the NUL removed and result_repaired", result, repaired)
	}

	// The Python system's keys: verification_commands is read as verify, the others are
	// ignored, and the import says so.
	py := filepath.Join(dir, "python.json")
	if err := os.WriteFile(py, []byte(`{"plan_id": "py", "project": "Py", "origin": {"system": "jira", "ref": "X-1"},
		"repo_targets": [{"id": "github:a/b", "provider": "github", "repo_full_name": "a/b"}],
		"verification_commands": [{"name": "unit", "command": "go test ./...", "source": "profile"}],
		"tasks": [{"id": "P1", "status": "pending", "priority": "high", "description": "A task that is described at length",
		"repo_target_id": "github:a/b"}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	p := start(t, "import python plan", bins.whilly, []string{"WHILLY_DATABASE_URL=" + c.dsn}, "plan", "import", py)
	if code := p.wait(t, 60*time.Second); code != 0 {
		t.Fatalf("import of a Python plan file exited %d: %s", code, p.stderr.String())
	}
	for _, want := range []string{`key "repo_targets" ignored`, `key "origin" ignored`, `"verification_commands" read as "verify"`, `key "repo_target_id" ignored`} {
		if !strings.Contains(p.stderr.String(), want) {
			t.Errorf("import notes %q, want %q", p.stderr.String(), want)
		}
	}
	var verify string
	if err := c.pool.QueryRow(ctx, `SELECT verify::text FROM plans WHERE id = 'py'`).Scan(&verify); err != nil || !strings.Contains(verify, "go test ./...") {
		t.Errorf("plan py verify = %s, %v; want the verification command", verify, err)
	}
}

// rawRequest sends body as it is (bytes that are not UTF-8 included) and returns the
// status and the answer's body.
func rawRequest(t *testing.T, base, method, path, token string, body []byte) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, base+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, out
}
