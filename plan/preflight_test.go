package plan

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// ptask is a task the gate allows, with a key file of its own.
func ptask(id, desc string, deps ...string) Task {
	return Task{
		ID:                 id,
		Status:             StatusPending,
		Priority:           PriorityMedium,
		Description:        desc,
		Dependencies:       deps,
		KeyFiles:           []string{"internal/" + strings.ToLower(id) + ".go"},
		AcceptanceCriteria: []string{"the behaviour described works end to end"},
		TestSteps:          []string{"go test ./..."},
		MaxAttempts:        DefaultMaxAttempts,
	}
}

// with edits a task in place and returns it, to keep table rows short.
func with(t Task, edit func(*Task)) Task {
	edit(&t)
	return t
}

// summary renders a finding without its message: "kind severity [tasks] code files".
func summary(f Finding) string {
	s := fmt.Sprintf("%s %s %v", f.Kind, f.Severity, f.Tasks)
	if f.Code != "" {
		s += " " + f.Code
	}
	if len(f.Files) > 0 {
		s += fmt.Sprintf(" %v", f.Files)
	}
	return s
}

const (
	descLogin   = "Add rate limiting to the login handler: five attempts per minute per IP address"
	descExport  = "Export invoices as CSV from the billing page, one row per invoice line"
	descMigrate = "Write the migration that adds a nullable archived_at column to projects"
	descDocs    = "Document the new webhook retry policy in the operator guide"
)

func TestPreflight(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		tasks    []Task
		verdict  string
		ideality float64
		findings []string // summaries, in order
		messages []string // each must appear in the finding with the same index
	}{
		{
			name: "clean plan",
			tasks: []Task{
				with(ptask("A", descLogin), func(t *Task) { t.KeyFiles = []string{"app/main.go", "app/login.go"} }),
				with(ptask("B", descExport, "A"), func(t *Task) { t.KeyFiles = []string{"app/main.go"} }),
				// C reaches A through B only: sharing a file with A is fine.
				with(ptask("C", descMigrate, "B"), func(t *Task) { t.KeyFiles = []string{"./app//main.go"} }),
			},
			verdict:  VerdictApprove,
			ideality: 1,
		},
		{
			name:     "empty plan",
			verdict:  VerdictApprove,
			ideality: 1,
		},
		{
			name: "weak task: no acceptance criteria",
			tasks: []Task{
				ptask("A", descLogin),
				with(ptask("B", descExport), func(t *Task) { t.AcceptanceCriteria = []string{" "} }),
			},
			verdict:  VerdictRevise,
			ideality: 1 - 1.0/6,
			findings: []string{"weak_task warning [B] no_acceptance_criteria"},
			messages: []string{"no acceptance criteria"},
		},
		{
			name: "weak task: every gate reject reason, in gate order",
			tasks: []Task{
				with(ptask("A", "fix it"), func(t *Task) { t.AcceptanceCriteria, t.TestSteps = nil, nil }),
			},
			verdict:  VerdictRevise,
			ideality: 0,
			findings: []string{
				"weak_task warning [A] description_too_short",
				"weak_task warning [A] no_acceptance_criteria",
				"weak_task warning [A] no_test_steps",
			},
		},
		{
			name: "weak task: no key files is only info",
			tasks: []Task{
				with(ptask("A", descLogin), func(t *Task) { t.KeyFiles = nil }),
				ptask("B", descExport),
			},
			verdict:  VerdictApprove,
			ideality: 1 - 0.25/6,
			findings: []string{"weak_task info [A] no_key_files"},
		},
		{
			name: "weak task: destructive command is a warning",
			tasks: []Task{
				with(ptask("A", descLogin), func(t *Task) { t.TestSteps = []string{"git push --force origin main"} }),
			},
			verdict:  VerdictRevise,
			ideality: 1 - 1.0/3,
			findings: []string{"weak_task warning [A] destructive_command"},
			messages: []string{"git push --force"},
		},
		{
			name: "weak task: settled tasks are not checked",
			tasks: []Task{
				with(ptask("A", "tiny"), func(t *Task) { t.Status = StatusDone }),
				with(ptask("B", "tiny too"), func(t *Task) { t.Status = StatusSkipped; t.TestSteps = nil }),
				with(ptask("C", "x"), func(t *Task) { t.Status = StatusCancelled }),
				with(ptask("D", "short"), func(t *Task) { t.Status = StatusFailed }),
			},
			verdict:  VerdictRevise,
			ideality: 1 - 1.0/12,
			findings: []string{"weak_task warning [D] description_too_short"},
		},
		{
			name: "dependency cycle",
			tasks: []Task{
				ptask("A", descLogin, "B"),
				ptask("B", descExport, "A"),
				ptask("C", descMigrate),
			},
			verdict:  VerdictReject,
			ideality: 1 - 4.0/9,
			findings: []string{"dependency_cycle error [A B]"},
			messages: []string{"dependency cycle A → B → A"},
		},
		{
			name: "dependency cycles: self-loop and a longer one, in file order",
			tasks: []Task{
				ptask("A", descLogin),
				ptask("B", descExport, "D"),
				ptask("C", descMigrate, "C"),
				ptask("D", descDocs, "E"),
				ptask("E", "Rotate the signing keys of the staging environment", "B", "A"),
			},
			verdict:  VerdictReject,
			ideality: 1 - 8.0/15,
			findings: []string{"dependency_cycle error [B D E]", "dependency_cycle error [C]"},
			messages: []string{"B → D → E → B", "C → C"},
		},
		{
			name: "missing dependency, reported once per id",
			tasks: []Task{
				ptask("A", descLogin, "GHOST", "GHOST", ""),
				ptask("B", descExport, "A"),
			},
			verdict:  VerdictReject,
			ideality: 0,
			findings: []string{"missing_dependency error [A]", "missing_dependency error [A]"},
			messages: []string{`"GHOST"`, `""`},
		},
		{
			name: "missing dependency of a done task still counts",
			tasks: []Task{
				with(ptask("A", descLogin, "GONE"), func(t *Task) { t.Status = StatusDone }),
				ptask("B", descExport),
			},
			verdict:  VerdictReject,
			ideality: 1 - 4.0/6,
			findings: []string{"missing_dependency error [A]"},
		},
		{
			name: "duplicate work: identical and near-identical grouped under the first",
			tasks: []Task{
				ptask("A", descLogin),
				ptask("B", descExport),
				ptask("C", "  add RATE limiting to the login handler -- five attempts per minute, per IP address!"),
				ptask("D", descLogin+" (v4)"),
				ptask("E", descMigrate),
			},
			verdict:  VerdictRevise,
			ideality: 1 - 1.0/15,
			findings: []string{"duplicate_work warning [A C D]"},
			messages: []string{"C (same words), D (92% of words shared) describe the same work as A; merge them into A or remove them"},
		},
		{
			name: "duplicate work: a task matching only a grouped task starts no group",
			tasks: []Task{
				ptask("A", "w1 w2 w3 w4 w5 w6 w7 w8 w9 w10"),
				ptask("B", "w1 w2 w3 w4 w5 w6 w7 w8 w9 w10 w11"),      // 90% like A
				ptask("C", "w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12"),     // 83% like B, 69% like A
				ptask("D", "w2 w3 w4 w5 w6 w7 w8 w9 w10 w11 w12 w13"), // 91% like C
			},
			verdict:  VerdictRevise,
			ideality: 1 - 2.0/12,
			findings: []string{"duplicate_work warning [A B]", "duplicate_work warning [C D]"},
			messages: []string{"B (90% of words shared) describes the same work as A; merge it into A or remove it"},
		},
		{
			name: "duplicate work: every copy grouped under the first",
			tasks: []Task{
				ptask("A", "one two three four five six seven eight nine ten"),
				ptask("B", "one two three four five six seven eight nine ten eleven"),
				ptask("C", "one two three four five six seven eight nine ten eleven"),
			},
			verdict:  VerdictRevise,
			ideality: 1 - 1.0/9,
			findings: []string{"duplicate_work warning [A B C]"},
			messages: []string{"B (90% of words shared), C (90% of words shared) describe the same work as A"},
		},
		{
			name: "duplicate work: a pending copy of done work",
			tasks: []Task{
				with(ptask("A", descLogin), func(t *Task) { t.Status = StatusDone }),
				ptask("B", descLogin),
			},
			verdict:  VerdictRevise,
			ideality: 1 - 1.0/6,
			findings: []string{"duplicate_work warning [A B]"},
			messages: []string{"B (same words) describes the same work as A; A is already done: remove it"},
		},
		{
			name: "duplicate work: done pairs and skipped or cancelled copies are ignored",
			tasks: []Task{
				with(ptask("A", descLogin), func(t *Task) { t.Status = StatusDone }),
				with(ptask("B", descLogin), func(t *Task) { t.Status = StatusDone }),
				with(ptask("C", descExport), func(t *Task) { t.Status = StatusSkipped }),
				ptask("D", descExport),
				with(ptask("E", descExport), func(t *Task) { t.Status = StatusCancelled }),
			},
			verdict:  VerdictApprove,
			ideality: 1,
		},
		{
			name: "duplicate work: 70% is not a duplicate",
			tasks: []Task{
				ptask("A", "alpha beta gamma delta epsilon zeta eta"),
				ptask("B", "alpha beta gamma delta epsilon zeta eta theta iota kappa"),
			},
			verdict:  VerdictApprove,
			ideality: 1,
		},
		{
			name: "shared key files without a dependency path",
			tasks: []Task{
				with(ptask("A", descLogin), func(t *Task) { t.KeyFiles = []string{"app/x.go", "app/y.go", "app/a.go"} }),
				with(ptask("B", descExport), func(t *Task) { t.KeyFiles = []string{"./app/y.go", "app/x.go", " app/x.go "} }),
				ptask("D", descDocs, "A"),
				with(ptask("C", descMigrate, "D"), func(t *Task) { t.KeyFiles = []string{"app/x.go"} }),
			},
			verdict:  VerdictRevise,
			ideality: 1 - 2.0/12,
			findings: []string{
				"shared_key_files warning [A B] [app/x.go app/y.go]",
				"shared_key_files warning [B C] [app/x.go]",
			},
			messages: []string{"A and B both list app/x.go, app/y.go and neither depends on the other"},
		},
		{
			name: "shared key files: done and running tasks",
			tasks: []Task{
				with(ptask("A", descLogin), func(t *Task) { t.KeyFiles = []string{"go.mod"}; t.Status = StatusDone }),
				with(ptask("B", descExport), func(t *Task) { t.KeyFiles = []string{"go.mod"}; t.Status = StatusInProgress }),
				with(ptask("C", descMigrate), func(t *Task) { t.KeyFiles = []string{"go.mod"} }),
			},
			verdict:  VerdictRevise,
			ideality: 1 - 1.0/9,
			findings: []string{"shared_key_files warning [B C] [go.mod]"},
		},
		{
			name: "over-engineering words on a task without criteria",
			tasks: []Task{
				with(ptask("A", "Build a Generic, future-proof plugin system with pluggable Frameworks"), func(t *Task) {
					t.AcceptanceCriteria = nil
				}),
				// Criteria bound the work: no finding.
				ptask("B", "Introduce a small framework-free abstraction over the mail sender"),
				// Terms match at a word start only.
				with(ptask("C", "Remove the nongeneric ultrascalable handler from the mail queue"), func(t *Task) {
					t.AcceptanceCriteria = []string{}
				}),
				with(ptask("D", "Сделать универсальный фреймворк для отчётов"), func(t *Task) { t.AcceptanceCriteria = nil }),
			},
			verdict:  VerdictRevise,
			ideality: 1 - 3.5/12,
			findings: []string{
				"weak_task warning [A] no_acceptance_criteria",
				"weak_task warning [C] no_acceptance_criteria",
				"weak_task warning [D] no_acceptance_criteria",
				"over_engineering info [A]",
				"over_engineering info [D]",
			},
			messages: []string{"", "", "", `"framework", "generic", "future proof", "plugin system", "pluggable"`, `"фреймворк", "универсальн"`},
		},
		{
			name: "every kind at once, in kind order",
			tasks: []Task{
				with(ptask("A", "Create a scalable microservice for thumbnails", "B"), func(t *Task) {
					t.AcceptanceCriteria = nil
					t.KeyFiles = []string{"img/thumb.go"}
				}),
				ptask("B", descLogin, "A", "NOPE"),
				with(ptask("C", descLogin), func(t *Task) { t.KeyFiles = []string{"img/thumb.go"} }),
			},
			verdict:  VerdictReject,
			ideality: 0,
			findings: []string{
				"weak_task warning [A] no_acceptance_criteria",
				"dependency_cycle error [A B]",
				"missing_dependency error [B]",
				"duplicate_work warning [B C]",
				"shared_key_files warning [A C] [img/thumb.go]",
				"over_engineering info [A]",
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := &Plan{ID: "demo", Name: "Demo", Tasks: tt.tasks}
			r := Preflight(p)
			got := []string{}
			for _, f := range r.Findings {
				got = append(got, summary(f))
			}
			if want := append([]string{}, tt.findings...); !slices.Equal(got, want) {
				t.Fatalf("findings:\n  got  %q\n  want %q\n%+v", got, want, r.Findings)
			}
			for i, m := range tt.messages {
				if !strings.Contains(r.Findings[i].Message, m) {
					t.Errorf("finding %d message %q does not contain %q", i, r.Findings[i].Message, m)
				}
			}
			for _, f := range r.Findings {
				if f.Message == "" {
					t.Errorf("finding %s has no message", summary(f))
				}
			}
			if r.Verdict != tt.verdict {
				t.Errorf("verdict = %s, want %s", r.Verdict, tt.verdict)
			}
			if want := float64(int(tt.ideality*1000+0.5)) / 1000; r.Ideality != want {
				t.Errorf("ideality = %v, want %v", r.Ideality, want)
			}
			if r.PlanID != "demo" || r.Findings == nil {
				t.Errorf("plan id %q, findings nil: %v", r.PlanID, r.Findings == nil)
			}
			if again := Preflight(p); !reflect.DeepEqual(again, r) {
				t.Errorf("second run differs:\n%+v\n%+v", again, r)
			}
		})
	}
}

func TestPreflightDoesNotChangePlan(t *testing.T) {
	t.Parallel()
	p := &Plan{ID: "p", Tasks: []Task{ptask("A", descLogin, "B"), ptask("B", descLogin, "A")}}
	before := fmt.Sprintf("%#v", p)
	r := Preflight(p)
	r.Findings[0].Tasks[0] = "changed"
	if after := fmt.Sprintf("%#v", p); after != before {
		t.Fatalf("Preflight changed the plan:\n%s\n%s", before, after)
	}
}

func TestPreflightNil(t *testing.T) {
	t.Parallel()
	r := Preflight(nil)
	if r.Verdict != VerdictApprove || r.Ideality != 1 || r.Findings == nil || len(r.Findings) != 0 {
		t.Fatalf("Preflight(nil) = %+v", r)
	}
}

func TestPreflightJSON(t *testing.T) {
	t.Parallel()
	r := Preflight(&Plan{ID: "p", Tasks: []Task{ptask("A", descLogin)}})
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(b), `{"plan_id":"p","verdict":"approve","ideality":1,"findings":[]}`; got != want {
		t.Fatalf("Marshal = %s, want %s", got, want)
	}
	r = Preflight(&Plan{ID: "p", Tasks: []Task{
		with(ptask("A", descLogin), func(t *Task) { t.KeyFiles = []string{"x.go"} }),
		with(ptask("B", descExport), func(t *Task) { t.KeyFiles = []string{"x.go"} }),
	}})
	b, err = json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"plan_id":"p","verdict":"revise","ideality":0.833,"findings":[{"kind":"shared_key_files","severity":"warning","tasks":["A","B"],"files":["x.go"],"message":`
	if !strings.HasPrefix(string(b), want) {
		t.Fatalf("Marshal = %s, want prefix %s", b, want)
	}
}

func TestSimilar(t *testing.T) {
	t.Parallel()
	tests := []struct {
		a, b string
		ok   bool
		pct  int
	}{
		{"a b c d", "a b c d", true, 100},
		{"a b c d", "d c b a", true, 100},
		{"a b c d", "a b c d e", true, 80}, // exactly at the threshold
		{"a b c d e f g h", "a b c d e f g h i j", true, 80},
		{"a b c d e f g h i j k", "a b c d e f g h i j k l m n", false, 0}, // 78%: sizes alone rule it out
		{"a b c d x", "a b c d y", false, 66},
		{"a b c", "a b c d e", false, 0},
		{"", "", false, 0},
		{"a", "", false, 0},
	}
	for _, tt := range tests {
		dict := map[string]int{}
		ok, pct := similar(wordSet(tt.a, dict), wordSet(tt.b, dict))
		if ok != tt.ok || pct != tt.pct {
			t.Errorf("similar(%q, %q) = %v %d, want %v %d", tt.a, tt.b, ok, pct, tt.ok, tt.pct)
		}
	}
}

func TestPreflightLargePlan(t *testing.T) {
	t.Parallel()
	// A long chain where every task lists the same file: each pair is ordered by the
	// chain, so there is nothing to report, and the reachability sets stay cheap.
	var tasks []Task
	for i := range 1000 {
		tk := ptask(fmt.Sprintf("T%d", i), fmt.Sprintf("Step %d of the long migration: move table t%d to the new schema", i, i))
		tk.KeyFiles = []string{"schema.sql"}
		if i > 0 {
			tk.Dependencies = []string{fmt.Sprintf("T%d", i-1)}
		}
		tasks = append(tasks, tk)
	}
	r := Preflight(&Plan{ID: "big", Tasks: tasks})
	if len(r.Findings) != 0 || r.Verdict != VerdictApprove {
		t.Fatalf("Preflight = %s with %d findings, first %+v", r.Verdict, len(r.Findings), r.Findings[0])
	}
}
