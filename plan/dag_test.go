package plan

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
)

// tasks builds pending tasks from "id:dep,dep" specs.
func tasks(specs ...string) []Task {
	out := make([]Task, 0, len(specs))
	for _, s := range specs {
		id, deps, _ := strings.Cut(s, ":")
		var d []string
		if deps != "" {
			d = strings.Split(deps, ",")
		}
		out = append(out, task(id, StatusPending, d...))
	}
	return out
}

func TestFindCycles(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		tasks []Task
		want  []string // formatted
	}{
		{"none", tasks("a", "b:a", "c:a,b"), nil},
		{"empty", nil, nil},
		{"self-loop", tasks("a:a"), []string{"a → a"}},
		{"two", tasks("A:B", "B:A"), []string{"A → B → A"}},
		{"starts at first in file, not smallest string", tasks("z:y", "y:z"), []string{"z → y → z"}},
		{"three", tasks("a:c", "b:a", "c:b"), []string{"a → c → b → a"}},
		{"two separate cycles in file order", tasks("x", "p:q", "q:p", "m:m"), []string{"p → q → p", "m → m"}},
		{"cycle downstream of acyclic", tasks("a", "b:a,c", "c:b"), []string{"b → c → b"}},
		{"unknown dependency ignored", tasks("a:ghost", "b:a"), nil},
		{"shortest cycle through start", tasks("a:b,c", "b:c", "c:a"), []string{"a → c → a"}},
		{"dependency order breaks ties", tasks("a:b,c", "b:a", "c:a"), []string{"a → b → a"}},
		{"self-loop inside a bigger group", tasks("a:b", "b:a,b"), []string{"a → b → a"}},
		{"ids with unicode and slashes", tasks("gh:o/r#1", "o/r#1:gh"), []string{"gh → o/r#1 → gh"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var got []string
			for _, c := range FindCycles(tt.tasks) {
				if c[0] != c[len(c)-1] {
					t.Errorf("cycle %v is not closed", c)
				}
				got = append(got, FormatCycle(c))
			}
			if !slices.Equal(got, tt.want) {
				t.Fatalf("FindCycles = %q, want %q", got, tt.want)
			}
		})
	}
}

func TestFindCyclesLongChain(t *testing.T) {
	t.Parallel()
	// A 100,000-task ring: the iterative Tarjan must not blow the stack.
	const n = 100_000
	ts := make([]Task, n)
	for i := range ts {
		ts[i] = task(fmt.Sprint(i), StatusPending, fmt.Sprint((i+1)%n))
	}
	c := FindCycles(ts)
	if len(c) != 1 || len(c[0]) != n+1 || c[0][0] != "0" || c[0][1] != "1" {
		t.Fatalf("FindCycles on a ring: %d cycles", len(c))
	}
	ts[n-1].Dependencies = nil
	if _, err := TopoOrder(ts); err != nil {
		t.Fatal(err)
	}
}

func TestTopoOrder(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		tasks   []Task
		want    []string
		wantErr string
	}{
		{"empty", nil, []string{}, ""},
		{"no dependencies keeps file order", tasks("c", "a", "b"), []string{"c", "a", "b"}, ""},
		{"dependency first", tasks("b:a", "a"), []string{"a", "b"}, ""},
		{"stable among ready", tasks("d:a", "c", "a", "b:a"), []string{"c", "a", "d", "b"}, ""},
		{"diamond", tasks("d:b,c", "c:a", "b:a", "a"), []string{"a", "c", "b", "d"}, ""},
		{"duplicate dependency", tasks("b:a,a", "a"), []string{"a", "b"}, ""},
		{"unknown dependency ignored", tasks("b:ghost", "a"), []string{"b", "a"}, ""},
		{"repeated id once", tasks("a", "b", "a"), []string{"a", "b"}, ""},
		{"cycle", tasks("x", "a:b", "b:a"), nil, "dependency cycle: a → b → a"},
		{"self-loop", tasks("a:a", "b"), nil, "dependency cycle: a → a"},
		{"two cycles", tasks("a:a", "b:c", "c:b"), nil, "dependency cycle: a → a; b → c → b"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			got, err := TopoOrder(tt.tasks)
			if tt.wantErr != "" {
				if !errors.Is(err, ErrCycle) || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("TopoOrder = %v, %v; want ErrCycle %q", got, err, tt.wantErr)
				}
				return
			}
			if err != nil || !reflect.DeepEqual(got, tt.want) {
				t.Fatalf("TopoOrder = %q, %v; want %q", got, err, tt.want)
			}
		})
	}
}

func TestDependents(t *testing.T) {
	t.Parallel()
	ts := tasks("a", "b:a", "c:b,a", "d:b", "e:a,a")
	tests := []struct {
		id   string
		want []string
	}{
		{"a", []string{"b", "c", "e"}},
		{"b", []string{"c", "d"}},
		{"d", nil},
		{"ghost", nil},
	}
	for _, tt := range tests {
		if got := Dependents(ts, tt.id); !slices.Equal(got, tt.want) {
			t.Errorf("Dependents(%s) = %q, want %q", tt.id, got, tt.want)
		}
	}
}

func TestBlocked(t *testing.T) {
	t.Parallel()
	ts := []Task{
		task("a", StatusFailed),
		task("b", StatusPending, "a"),
		task("c", StatusPending, "b"),
		task("d", StatusCancelled),
		task("e", StatusPending, "d"),
		task("f", StatusPending),
		task("g", StatusPending, "f"),
		task("h", StatusDone),
		task("i", StatusPending, "h", "a"),
		task("j", StatusPending, "j"),
		task("k", StatusPending, "ghost"),
		task("l", StatusClaimed, "a"),
		task("m", StatusPending, "l"),
	}
	want := []string{"b", "c", "e", "i", "j", "k"}
	if got := Blocked(ts); !slices.Equal(got, want) {
		t.Fatalf("Blocked = %q, want %q", got, want)
	}
}
