package plan

import (
	"bytes"
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// specExample is the example plan file of the plan format.
const specExample = `{
  "plan_id": "shop-auth",
  "project": "Shop auth hardening",
  "budget_usd": 5.0,
  "tasks": [
    {"id": "AUTH-1", "priority": "high", "status": "pending",
     "description": "Add rate limiting to the /login handler (5 attempts per minute per IP)",
     "dependencies": [], "key_files": ["app/login.go"],
     "acceptance_criteria": ["the 6th attempt within 60 s returns 429"],
     "test_steps": ["go test ./app -run TestLoginRateLimit"],
     "prd_requirement": "F1.2", "max_attempts": 3}
  ]
}`

// pythonExample is the Python reference's example, with its extra keys.
const pythonExample = `{
  "plan_id": "shop-auth",
  "project": "Shop auth hardening",
  "repo_targets": [{"id": "github:acme/shop", "provider": "github", "repo_full_name": "acme/shop"}],
  "verification_commands": [{"name": "unit", "command": "pytest -q", "required": true}],
  "tasks": [
    {"id": "AUTH-1", "status": "pending", "priority": "high",
     "description": "Add rate limiting to the /login handler (5 attempts/min per IP)",
     "dependencies": [], "key_files": ["app/login.py"],
     "acceptance_criteria": ["6th attempt within 60s returns 429"],
     "test_steps": ["pytest tests/test_login_rate.py -q"],
     "prd_requirement": "F1.2", "repo_target_id": "github:acme/shop"},
    {"id": "AUTH-2", "status": "pending", "priority": "medium",
     "description": "Document the login rate limit in docs/security.md",
     "dependencies": ["AUTH-1"], "key_files": ["docs/security.md"],
     "acceptance_criteria": ["section 'Rate limits' exists"], "test_steps": ["grep -q 'Rate limits' docs/security.md"]}
  ]
}`

// fullExample uses every field, unicode, HTML-ish text and ids with / : and .
const fullExample = `{
  "project": "Ünïcødé — façade <refactor> & friends ✨",
  "budget_usd": 0.25,
  "strict": true,
  "repo": "acme/shop.web",
  "verify": [
    {"name": "unit", "command": "go test ./..."},
    {"name": "lint", "command": "golangci-lint run", "required": false}
  ],
  "tasks": [
    {"id": "gh:acme/shop/12/part.1", "priority": "CRITICAL", "status": "Done",
     "description": "Réécrire le module de paiement — 日本語のテキスト & <b>tags</b>",
     "key_files": ["pay/ü.go"], "acceptance_criteria": ["ça marche"], "test_steps": ["go test ./pay"],
     "max_attempts": 1, "labels": ["gpu", "linux"]},
    {"id": "T.2", "priority": "low", "description": "",
     "dependencies": ["gh:acme/shop/12/part.1"], "prd_requirement": null,
     "key_files": null, "max_attempts": 100},
    {"id": "t-3_x", "priority": "Medium", "status": "IN_PROGRESS",
     "description": "line one\nline two\t\"quoted\" \\ backslash \u2028 sep",
     "dependencies": ["T.2", "gh:acme/shop/12/part.1"]}
  ]
}`

func mustParse(t *testing.T, data string) *Plan {
	t.Helper()
	p, err := Parse([]byte(data))
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return p
}

func mustEncode(t *testing.T, p *Plan) []byte {
	t.Helper()
	b, err := Encode(p)
	if err != nil {
		t.Fatalf("Encode: %v", err)
	}
	return b
}

func TestParseSpecExample(t *testing.T) {
	t.Parallel()
	got := mustParse(t, specExample)
	want := &Plan{
		ID:     "shop-auth",
		Name:   "Shop auth hardening",
		Budget: usd(5 * MicrosPerUSD),
		Tasks: []Task{{
			ID:                 "AUTH-1",
			Status:             StatusPending,
			Priority:           PriorityHigh,
			Description:        "Add rate limiting to the /login handler (5 attempts per minute per IP)",
			Dependencies:       []string{},
			KeyFiles:           []string{"app/login.go"},
			AcceptanceCriteria: []string{"the 6th attempt within 60 s returns 429"},
			TestSteps:          []string{"go test ./app -run TestLoginRateLimit"},
			PRDRequirement:     "F1.2",
			MaxAttempts:        3,
			Labels:             []string{},
		}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("Parse =\n%+v\nwant\n%+v", got, want)
	}
}

func TestParseDefaults(t *testing.T) {
	t.Parallel()
	p := mustParse(t, fullExample)
	if p.ID != "n-c-d-fa-ade-refactor-friends" {
		t.Errorf("ID = %q, want the slug of the project", p.ID)
	}
	if p.Budget == nil || *p.Budget != 250_000 || !p.Strict || p.Repo != "acme/shop.web" {
		t.Errorf("plan fields = %v %v %q", p.Budget, p.Strict, p.Repo)
	}
	wantVerify := []Verify{{"unit", "go test ./...", true}, {"lint", "golangci-lint run", false}}
	if !reflect.DeepEqual(p.Verify, wantVerify) {
		t.Errorf("Verify = %+v, want %+v", p.Verify, wantVerify)
	}
	t0, t1, t2 := p.Tasks[0], p.Tasks[1], p.Tasks[2]
	if t0.Status != StatusDone || t0.Priority != PriorityCritical || t0.MaxAttempts != 1 || !reflect.DeepEqual(t0.Labels, []string{"gpu", "linux"}) {
		t.Errorf("task 0 = %+v", t0)
	}
	if t1.Status != StatusPending || t1.MaxAttempts != 100 || t1.KeyFiles == nil || len(t1.KeyFiles) != 0 || t1.Description != "" {
		t.Errorf("task 1 = %+v", t1)
	}
	if t2.Status != StatusInProgress || t2.Priority != PriorityMedium || t2.MaxAttempts != DefaultMaxAttempts {
		t.Errorf("task 2 = %+v", t2)
	}
	if p := mustParse(t, `{"project": "x", "tasks": []}`); p.Budget != nil || p.Tasks == nil || len(p.Tasks) != 0 || p.Verify != nil {
		t.Errorf("minimal plan = %+v", p)
	}
}

func TestParseBudgetIsExact(t *testing.T) {
	t.Parallel()
	const refused = -1
	for in, want := range map[string]USD{
		"0": 0, "5": 5_000_000, "5.0": 5_000_000, "0.1": 100_000, "0.000001": 1,
		"1e2": 100_000_000, "12.345678": 12_345_678,
		"0.30000000000000004": refused, // what float formatting drift looks like
	} {
		p, err := Parse([]byte(`{"project": "x", "tasks": [], "budget_usd": ` + in + `}`))
		if want == refused {
			if err == nil {
				t.Errorf("budget %s accepted as %v", in, p.Budget)
			}
			continue
		}
		if err != nil || p.Budget == nil || *p.Budget != want {
			t.Errorf("budget %s = %v, %v; want %d", in, p, err, want)
		}
	}
}

// problemLines runs Parse and returns its error lines, failing unless it is a
// *ValidationError.
func problemLines(t *testing.T, data string) []string {
	t.Helper()
	p, err := Parse([]byte(data))
	if err == nil {
		t.Fatalf("Parse accepted %s as %+v", data, p)
	}
	var verr *ValidationError
	if !errors.As(err, &verr) || len(verr.Problems) == 0 {
		t.Fatalf("Parse error %T %v is not a ValidationError with problems", err, err)
	}
	if p != nil {
		t.Fatalf("Parse returned a plan with an error")
	}
	return strings.Split(err.Error(), "\n")
}

// taskJSON is a valid task with fields overridden by extra ("key": value pairs).
// taskJSON is a task object with id, priority and description; extra adds keys, and a
// priority or description in it replaces the default one (a key may appear once).
func taskJSON(id string, extra string) string {
	s := `{"id": "` + id + `"`
	if !strings.Contains(extra, `"priority"`) {
		s += `, "priority": "high"`
	}
	if !strings.Contains(extra, `"description"`) {
		s += `, "description": "a task described at length"`
	}
	if extra != "" {
		s += ", " + extra
	}
	return s + "}"
}

func planJSON(tasks ...string) string {
	return `{"project": "p", "tasks": [` + strings.Join(tasks, ", ") + `]}`
}

func TestParseProblems(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		in   string
		want []string
	}{
		{"empty", "", []string{"the plan file is empty"}},
		{"spaces", " \n\t", []string{"the plan file is empty"}},
		{"array", "[]", []string{"a plan file must be a JSON object, not an array"}},
		{"null", "null", []string{"a plan file must be a JSON object, not null"}},
		{"syntax error position", "{\n  \"project\": \"x\",\n  \"tasks\": [}\n", []string{
			"invalid JSON at line 3, column 13: invalid character '}' looking for beginning of value"}},
		{"truncated", "{\"project\": \"x\",\n \"tasks\": [", []string{"invalid JSON at line 2, column 12: unexpected end of input"}},
		{"trailing data", "{\"project\": \"x\", \"tasks\": []}\n  {}", []string{
			"invalid JSON at line 2, column 3: unexpected data after the plan object"}},
		{"trailing garbage", `{"project": "x", "tasks": []} x`, []string{
			"invalid JSON at line 1, column 31: invalid character 'x' looking for beginning of value"}},
		{"nothing", "{}", []string{`field "project": is required`, `field "tasks": is required`}},
		{"plan-level types", `{"project": 7, "plan_id": true, "budget_usd": "5", "strict": "yes", "repo": 1, "verify": {}, "tasks": {}}`, []string{
			`field "plan_id": must be a string, not a boolean`,
			`field "project": must be a string, not a number`,
			`field "budget_usd": must be a number, not a string`,
			`field "strict": must be true or false, not a string`,
			`field "repo": must be a string, not a number`,
			`field "verify": must be an array, not an object`,
			`field "tasks": must be an array, not an object`,
		}},
		{"plan-level values", `{"project": "  ", "plan_id": "a..b", "budget_usd": -1, "repo": "acme", "verify": [{"name": "", "command": "x"}, {"command": 3}, 4], "tasks": []}`, []string{
			`field "plan_id": "a..b" must not contain ".."`,
			`field "project": is required`,
			`field "budget_usd": -1 must not be negative`,
			`field "repo": must be "owner/name", got "acme"`,
			`field "verify": entry 1: name is required`,
			`field "verify": entry 2: name is required`,
			`field "verify": entry 2: command must be a string, not a number`,
			`field "verify": entry 3 must be an object, not a number`,
		}},
		{"budget precision", `{"project": "p", "budget_usd": 0.1234567, "tasks": []}`, []string{
			`field "budget_usd": 0.1234567 has more than 6 decimal places`}},
		{"plan id alphabet", `{"project": "p", "plan_id": "my plan", "tasks": []}`, []string{
			`field "plan_id": "my plan" contains ' '; use only letters, digits and . _ : / -`}},
		{"plan id too long", `{"project": "p", "plan_id": "` + strings.Repeat("a", 201) + `", "tasks": []}`, []string{
			`field "plan_id": must be at most 200 characters`}},
		{"bad priority", planJSON(taskJSON("AUTH-1", `"priority": "urgent"`)), []string{
			`task "AUTH-1": field "priority": must be one of critical, high, medium, low`}},
		{"missing fields", planJSON(`{"id": "A"}`), []string{
			`task "A": field "priority": is required`,
			`task "A": field "description": is required`,
		}},
		{"no id", planJSON(taskJSON("A", ""), `{"priority": "low", "description": "d"}`, taskJSON("C", "")), []string{
			`task #2: field "id": is required`}},
		{"bad ids", planJSON(taskJSON("a b", ""), taskJSON("../etc", ""), taskJSON("ü", ""), taskJSON(strings.Repeat("x", 201), "")), []string{
			`task #1: field "id": "a b" contains ' '; use only letters, digits and . _ : / -`,
			`task #2: field "id": "../etc" must not contain ".."`,
			`task #3: field "id": "ü" contains 'ü'; use only letters, digits and . _ : / -`,
			`task #4: field "id": must be at most 200 characters`,
		}},
		{"id of wrong type", planJSON(`{"id": 5, "priority": 1, "description": "d"}`), []string{
			`task #1: field "id": must be a string, not a number`,
			`task #1: field "priority": must be a string, not a number`,
		}},
		{"duplicate id", planJSON(taskJSON("A", ""), taskJSON("B", ""), taskJSON("A", `"priority": "x"`)), []string{
			`task #3: field "id": duplicate id "A", first used by task #1`,
			`task #3: field "priority": must be one of critical, high, medium, low`,
		}},
		{"task not an object", planJSON(`"A"`, `null`, taskJSON("C", "")), []string{
			`task #1: must be an object, not a string`,
			`task #2: must be an object, not null`,
		}},
		{"status", planJSON(taskJSON("A", `"status": "finished"`), taskJSON("B", `"status": ""`), taskJSON("C", `"status": false`)), []string{
			`task "A": field "status": must be one of PENDING, CLAIMED, IN_PROGRESS, DONE, FAILED, SKIPPED, CANCELLED`,
			`task "B": field "status": is required`,
			`task "C": field "status": must be a string, not a boolean`,
		}},
		{"unicode look-alike status", planJSON(taskJSON("A", `"status": "\u017fkipped"`)), []string{
			`task "A": field "status": must be one of PENDING, CLAIMED, IN_PROGRESS, DONE, FAILED, SKIPPED, CANCELLED`}},
		{"lists", planJSON(taskJSON("A", `"dependencies": "B", "key_files": [1], "acceptance_criteria": ["ok", null], "test_steps": {}, "labels": [true]`)), []string{
			`task "A": field "dependencies": must be an array of strings, not a string`,
			`task "A": field "key_files": element 1 must be a string, not a number`,
			`task "A": field "acceptance_criteria": element 2 must be a string, not null`,
			`task "A": field "test_steps": must be an array of strings, not an object`,
			`task "A": field "labels": element 1 must be a string, not a boolean`,
		}},
		{"strings", planJSON(taskJSON("A", `"description": ["x"], "prd_requirement": 1.2`)), []string{
			`task "A": field "description": must be a string, not an array`,
			`task "A": field "prd_requirement": must be a string, not a number`,
		}},
		{"max_attempts", planJSON(
			taskJSON("A", `"max_attempts": 0`), taskJSON("B", `"max_attempts": 101`), taskJSON("C", `"max_attempts": 2.0`),
			taskJSON("D", `"max_attempts": true`), taskJSON("E", `"max_attempts": "3"`), taskJSON("F", `"max_attempts": -1`),
			taskJSON("G", `"max_attempts": 99999999999999999999999`), taskJSON("H", `"max_attempts": 1e1`)), []string{
			`task "A": field "max_attempts": must be between 1 and 100`,
			`task "B": field "max_attempts": must be between 1 and 100`,
			`task "C": field "max_attempts": must be an integer, not 2.0`,
			`task "D": field "max_attempts": must be an integer, not a boolean`,
			`task "E": field "max_attempts": must be an integer, not a string`,
			`task "F": field "max_attempts": must be between 1 and 100`,
			`task "G": field "max_attempts": must be between 1 and 100`,
			`task "H": field "max_attempts": must be an integer, not 1e1`,
		}},
		{"unknown dependency", planJSON(taskJSON("A", `"dependencies": ["B", "ghost", "ghost", "spook"]`), taskJSON("B", "")), []string{
			`task "A": field "dependencies": unknown task "ghost"`,
			`task "A": field "dependencies": unknown task "spook"`,
		}},
		{"self-loop", planJSON(taskJSON("A", `"dependencies": ["A"]`)), []string{
			`task "A": field "dependencies": cycle A → A`}},
		{"cycle", planJSON(taskJSON("X", ""), taskJSON("B", `"dependencies": ["C"]`), taskJSON("A", `"dependencies": ["B"]`), taskJSON("C", `"dependencies": ["A", "X"]`)), []string{
			`task "B": field "dependencies": cycle B → C → A → B`}},
		{"two cycles", planJSON(taskJSON("A", `"dependencies": ["B"]`), taskJSON("B", `"dependencies": ["A"]`), taskJSON("C", `"dependencies": ["C"]`)), []string{
			`task "A": field "dependencies": cycle A → B → A`,
			`task "C": field "dependencies": cycle C → C`,
		}},
		{"everything at once, in order", `{"project": "", "budget_usd": true, "tasks": [` +
			taskJSON("A", `"priority": "p", "dependencies": ["A", "Z"], "max_attempts": 0`) + `, 3, ` +
			`{"id": "a b", "description": 1}]}`, []string{
			`field "project": is required`,
			`field "budget_usd": must be a number, not a boolean`,
			`task "A": field "priority": must be one of critical, high, medium, low`,
			`task "A": field "dependencies": unknown task "Z"`,
			`task "A": field "dependencies": cycle A → A`,
			`task "A": field "max_attempts": must be between 1 and 100`,
			`task #2: must be an object, not a number`,
			`task #3: field "id": "a b" contains ' '; use only letters, digits and . _ : / -`,
			`task #3: field "priority": is required`,
			`task #3: field "description": must be a string, not a number`,
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got := problemLines(t, tt.in)
			if !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("problems:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(tt.want, "\n"))
			}
		})
	}
}

func TestProblemFields(t *testing.T) {
	t.Parallel()
	_, err := Parse([]byte(planJSON(taskJSON("A", ""), taskJSON("b c", `"priority": "?"`))))
	var verr *ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("err = %v", err)
	}
	want := []Problem{
		{Task: "", Index: 1, Field: "id", Message: "\"b c\" contains ' '; use only letters, digits and . _ : / -"},
		{Task: "", Index: 1, Field: "priority", Message: "must be one of critical, high, medium, low"},
	}
	if !reflect.DeepEqual(verr.Problems, want) {
		t.Fatalf("Problems = %+v, want %+v", verr.Problems, want)
	}
	_, err = Parse([]byte(`{"tasks": []}`))
	if !errors.As(err, &verr) || !reflect.DeepEqual(verr.Problems, []Problem{{Index: -1, Field: "project", Message: "is required"}}) {
		t.Fatalf("plan-level problem = %#v", err)
	}
}

func TestValidatePlanBuiltInCode(t *testing.T) {
	t.Parallel()
	p := &Plan{
		Name: "Built by the planner",
		Tasks: []Task{
			{ID: "T1", Priority: "High", Description: "first task, long enough"},
			{ID: "T2", Priority: PriorityLow, Description: "second task, long enough", Dependencies: []string{"T1"}},
		},
	}
	if err := Validate(p); err == nil {
		t.Fatal("Validate accepted a plan without ids defaults and with mixed-case priority")
	}
	Normalize(p)
	if err := Validate(p); err != nil {
		t.Fatalf("Validate after Normalize: %v", err)
	}
	if p.ID != "built-by-the-planner" || p.Tasks[0].Status != StatusPending || p.Tasks[0].Priority != PriorityHigh ||
		p.Tasks[0].MaxAttempts != DefaultMaxAttempts || p.Tasks[0].Labels == nil {
		t.Fatalf("Normalize left %+v", p)
	}
	p.Tasks[1].Dependencies = []string{"T2"}
	p.Budget = usd(-1)
	err := Validate(p)
	want := "field \"budget_usd\": must not be negative\ntask \"T2\": field \"dependencies\": cycle T2 → T2"
	if err == nil || err.Error() != want {
		t.Fatalf("Validate = %v, want\n%s", err, want)
	}
}

const wantEncodedFull = `{
  "plan_id": "n-c-d-fa-ade-refactor-friends",
  "project": "Ünïcødé — façade <refactor> & friends ✨",
  "budget_usd": 0.25,
  "strict": true,
  "repo": "acme/shop.web",
  "verify": [
    {
      "name": "unit",
      "command": "go test ./...",
      "required": true
    },
    {
      "name": "lint",
      "command": "golangci-lint run",
      "required": false
    }
  ],
  "tasks": [
    {
      "id": "gh:acme/shop/12/part.1",
      "status": "DONE",
      "priority": "critical",
      "description": "Réécrire le module de paiement — 日本語のテキスト & <b>tags</b>",
      "dependencies": [],
      "key_files": [
        "pay/ü.go"
      ],
      "acceptance_criteria": [
        "ça marche"
      ],
      "test_steps": [
        "go test ./pay"
      ],
      "prd_requirement": "",
      "max_attempts": 1,
      "labels": [
        "gpu",
        "linux"
      ]
    },
    {
      "id": "T.2",
      "status": "PENDING",
      "priority": "low",
      "description": "",
      "dependencies": [
        "gh:acme/shop/12/part.1"
      ],
      "key_files": [],
      "acceptance_criteria": [],
      "test_steps": [],
      "prd_requirement": "",
      "max_attempts": 100,
      "labels": []
    },
    {
      "id": "t-3_x",
      "status": "IN_PROGRESS",
      "priority": "medium",
      "description": "line one\nline two\t\"quoted\" \\ backslash \u2028 sep",
      "dependencies": [
        "T.2",
        "gh:acme/shop/12/part.1"
      ],
      "key_files": [],
      "acceptance_criteria": [],
      "test_steps": [],
      "prd_requirement": "",
      "max_attempts": 3,
      "labels": []
    }
  ]
}
`

func TestEncodeCanonical(t *testing.T) {
	t.Parallel()
	got := string(mustEncode(t, mustParse(t, fullExample)))
	if got != wantEncodedFull {
		t.Fatalf("Encode =\n%s\nwant\n%s", got, wantEncodedFull)
	}
	minimal := string(mustEncode(t, &Plan{Name: "Only a name"}))
	if want := "{\n  \"plan_id\": \"only-a-name\",\n  \"project\": \"Only a name\",\n  \"tasks\": []\n}\n"; minimal != want {
		t.Fatalf("Encode(minimal) =\n%s\nwant\n%s", minimal, want)
	}
	zero := string(mustEncode(t, &Plan{ID: "z", Name: "z", Budget: usd(0)}))
	if !strings.Contains(zero, `"budget_usd": 0,`) {
		t.Fatalf("a zero budget must be written: %s", zero)
	}
}

func TestEncodeDoesNotModify(t *testing.T) {
	t.Parallel()
	p := &Plan{Name: "n", Tasks: []Task{{ID: "a", Priority: "HIGH"}}}
	mustEncode(t, p)
	if p.ID != "" || p.Tasks[0].Status != "" || p.Tasks[0].Priority != "HIGH" || p.Tasks[0].Labels != nil {
		t.Fatalf("Encode modified its input: %+v", p)
	}
}

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	for name, in := range map[string]string{
		"spec":   specExample,
		"python": pythonExample,
		"full":   fullExample,
		"budget exponent": `{"project": "Ω", "plan_id": "ns:plan/1.0", "budget_usd": 12.5e-1,
			"tasks": [{"id": "a/b:c.d", "priority": "LOW", "description": "\ud83d\ude00 emoji", "status": "cancelled"}]}`,
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			first := mustEncode(t, mustParse(t, in))
			second := mustEncode(t, mustParse(t, string(first)))
			if !bytes.Equal(first, second) {
				t.Fatalf("export is not byte-stable:\n%s\n---\n%s", first, second)
			}
			if !bytes.HasSuffix(first, []byte("}\n")) {
				t.Fatal("no trailing newline")
			}
			a, b := mustParse(t, in), mustParse(t, string(first))
			a.Notes, b.Notes = nil, nil // what the file had that an export leaves out, or says again
			if !reflect.DeepEqual(a, b) {
				t.Fatalf("Parse(Encode(p)) != p:\n%+v\n%+v", a, b)
			}
		})
	}
}

func TestSlug(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"Shop auth hardening", "shop-auth-hardening"},
		{"  --Hello,   World!--  ", "hello-world"},
		{"CamelCase2Go", "camelcase2go"},
		{"a_b.c/d:e", "a-b-c-d-e"},
		{"Ünïcødé café", "n-c-d-caf"},
		{"日本語", "plan"},
		{"", "plan"},
		{"---", "plan"},
		{strings.Repeat("ab ", 40), strings.TrimSuffix(strings.Repeat("ab-", 22), "-")[:64]},
		{strings.Repeat("x", 100), strings.Repeat("x", 64)},
		{strings.Repeat("a", 63) + " b", strings.Repeat("a", 63)},
	}
	for _, tt := range tests {
		got := Slug(tt.in)
		if got != tt.want {
			t.Errorf("Slug(%q) = %q, want %q", tt.in, got, tt.want)
		}
		if len(got) > 64 || checkID(got) != "" || strings.HasSuffix(got, "-") {
			t.Errorf("Slug(%q) = %q is not a valid plan id", tt.in, got)
		}
	}
}

func TestParseStatusAndPriority(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]Status{"pending": StatusPending, "In_Progress": StatusInProgress, "DONE": StatusDone, "cancelled": StatusCancelled} {
		if got, err := ParseStatus(in); err != nil || got != want {
			t.Errorf("ParseStatus(%q) = %q, %v", in, got, err)
		}
	}
	for _, in := range []string{"", "in progress", "ſkipped", "CANCELED"} {
		if _, err := ParseStatus(in); err == nil {
			t.Errorf("ParseStatus(%q) accepted", in)
		}
	}
	for i, p := range Priorities() {
		if p.Rank() != i {
			t.Errorf("%s.Rank() = %d, want %d", p, p.Rank(), i)
		}
		if got, err := ParsePriority(strings.ToUpper(string(p))); err != nil || got != p {
			t.Errorf("ParsePriority(%q) = %q, %v", strings.ToUpper(string(p)), got, err)
		}
	}
	if _, err := ParsePriority("urgent"); err == nil {
		t.Error("ParsePriority accepted urgent")
	}
	var names []string
	for _, s := range Statuses() {
		if !s.Valid() {
			t.Errorf("%s not valid", s)
		}
		names = append(names, string(s))
	}
	if got := strings.Join(names, ", "); got != statusList {
		t.Errorf("statusList = %q, want %q", statusList, got)
	}
	names = nil
	for _, p := range Priorities() {
		names = append(names, string(p))
	}
	if got := strings.Join(names, ", "); got != priorityList {
		t.Errorf("priorityList = %q, want %q", priorityList, got)
	}
}

func FuzzParse(f *testing.F) {
	for _, seed := range []string{
		specExample, pythonExample, fullExample, wantEncodedFull,
		"", "{}", "[]", "null", `{"project": "x", "tasks": []}`,
		planJSON(taskJSON("A", `"dependencies": ["B"]`), taskJSON("B", `"dependencies": ["A"]`)),
		planJSON(taskJSON("A", `"max_attempts": 1e2`), `7`),
		`{"project": "x", "budget_usd": 1e-6, "tasks": [{"id": "a..b"}]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		p, err := Parse(data)
		if err != nil {
			var verr *ValidationError
			if !errors.As(err, &verr) || len(verr.Problems) == 0 || p != nil {
				t.Fatalf("Parse error %T %v: want a ValidationError with problems and no plan", err, err)
			}
			return
		}
		first, err := Encode(p)
		if err != nil {
			t.Fatalf("Encode: %v", err)
		}
		again, err := Parse(first)
		if err != nil {
			t.Fatalf("Parse(Encode(p)): %v\n%s", err, first)
		}
		second, err := Encode(again)
		if err != nil {
			t.Fatalf("Encode again: %v", err)
		}
		if !bytes.Equal(first, second) {
			t.Fatalf("not byte-stable:\n%s\n---\n%s", first, second)
		}
		if _, err := TopoOrder(p.Tasks); err != nil {
			t.Fatalf("a parsed plan has no topological order: %v", err)
		}
		for _, task := range p.Tasks {
			Gate(task)
		}
		PlanOutcome(p.Tasks)
	})
}

// TestParseWithMaxAttempts: the option sets the limit of tasks that name none, only.
func TestParseWithMaxAttempts(t *testing.T) {
	doc := []byte(`{"project": "p", "tasks": [{"id": "A", "priority": "low", "description": "d"},
		{"id": "B", "priority": "low", "description": "d", "max_attempts": 1}]}`)
	for _, tc := range []struct{ option, wantA int }{{0, DefaultMaxAttempts}, {7, 7}} {
		p, err := ParseWith(doc, ParseOptions{MaxAttempts: tc.option})
		if err != nil {
			t.Fatal(err)
		}
		if a, b := p.Tasks[0].MaxAttempts, p.Tasks[1].MaxAttempts; a != tc.wantA || b != 1 {
			t.Errorf("MaxAttempts option %d: A=%d B=%d, want A=%d B=1", tc.option, a, b, tc.wantA)
		}
	}
}

// wizardExample is a plan file as the Python system's PRD wizard writes it: a phase and a
// category on each task, the PRD and the agent's instructions on the plan, and the
// Python system's origin and repository targets.
const wizardExample = `{
  "project": "Shop auth",
  "prd_file": "/home/me/PRD-shop.md",
  "agent_instructions": "Work in small commits.",
  "origin": {"system": "prd_wizard", "ref": "PRD-shop.md", "decomposition_mode": "wizard"},
  "repo_targets": [{"id": "github:acme/shop", "provider": "github", "repo_full_name": "acme/shop"}],
  "tasks": [
    {"id": "TASK-001", "phase": "1", "category": "infra", "priority": "high", "status": "pending",
     "description": "Set up the project", "agent_instructions": "Use make.", "prd_file": "PRD-shop.md"},
    {"id": "TASK-002", "phase": "1", "category": "test", "priority": "medium", "status": "pending",
     "description": "Integration test of phase 1", "dependencies": ["TASK-001"]}
  ]
}`

// A PRD wizard's file imports as it is, with a note for each key whilly reads past; its
// origin and repository targets come out of the export as they went in.
func TestParsePythonWizardFile(t *testing.T) {
	t.Parallel()
	p := mustParse(t, wizardExample)
	for _, want := range []string{`the plan: key "prd_file" ignored`, `the plan: key "agent_instructions" ignored`,
		`task #1: key "phase" ignored`, `task #1: key "category" ignored`, `task #1: key "agent_instructions" ignored`,
		`task #1: key "prd_file" ignored`, `task #2: key "phase" ignored`} {
		if !slices.ContainsFunc(p.Notes, func(n string) bool { return strings.HasPrefix(n, want) }) {
			t.Errorf("no note %q in %q", want, p.Notes)
		}
	}
	out := string(mustEncode(t, p))
	for _, want := range []string{`"origin": {`, `"decomposition_mode": "wizard"`, `"repo_targets": [`, `"repo_full_name": "acme/shop"`} {
		if !strings.Contains(out, want) {
			t.Errorf("export lacks %s:\n%s", want, out)
		}
	}
	if again := string(mustEncode(t, mustParse(t, out))); again != out {
		t.Errorf("export is not byte-stable:\n%s\n---\n%s", out, again)
	}
	for _, bad := range []string{`{"project": "x", "origin": "issue 12", "tasks": []}`, `{"project": "x", "repo_targets": {"id": "a"}, "tasks": []}`} {
		if _, err := Parse([]byte(bad)); err == nil {
			t.Errorf("Parse(%s) took an origin that is not an object or targets that are not a list", bad)
		}
	}
}
