package plan

import (
	"container/heap"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ErrCycle marks a dependency cycle; TopoOrder wraps it with the cycles it found.
var ErrCycle = errors.New("dependency cycle")

// graph is the dependency graph of a task list, by index. Tasks sharing an id are all
// nodes, but a dependency names the first task with that id; dependencies on unknown
// ids are left out (validation reports them).
type graph struct {
	deps    [][]int // deps[i]: indices task i depends on, in listed order
	unknown []bool  // unknown[i]: task i names a dependency that is not in the list
	rdeps   [][]int // rdeps[i]: indices of the tasks that depend on i, in file order
}

func newGraph(tasks []Task) graph {
	first := make(map[string]int, len(tasks))
	for i, t := range tasks {
		if _, ok := first[t.ID]; !ok {
			first[t.ID] = i
		}
	}
	g := graph{
		deps:    make([][]int, len(tasks)),
		unknown: make([]bool, len(tasks)),
		rdeps:   make([][]int, len(tasks)),
	}
	for i, t := range tasks {
		for _, d := range t.Dependencies {
			j, ok := first[d]
			if !ok {
				g.unknown[i] = true
				continue
			}
			g.deps[i] = append(g.deps[i], j)
			g.rdeps[j] = append(g.rdeps[j], i)
		}
	}
	return g
}

// FindCycles returns every dependency cycle, self-loops included, as a closed path of
// ids: a task that depends on itself gives ["A", "A"], and A needing B needing A gives
// ["A", "B", "A"] (print it with FormatCycle). Each strongly connected group of tasks
// yields one cycle, the shortest one through its member that comes first in the file,
// which is where the cycle starts; cycles are ordered by that member's position. The
// result is deterministic. Dependencies on unknown ids are ignored.
func FindCycles(tasks []Task) [][]string {
	var out [][]string
	for _, c := range findCycles(tasks) {
		out = append(out, c.ids)
	}
	return out
}

// cycle is a closed path of ids starting and ending at the task at index start.
type cycle struct {
	start int
	ids   []string
}

func findCycles(tasks []Task) []cycle {
	g := newGraph(tasks)
	var all []cycle
	for _, scc := range g.components() {
		if len(scc) == 1 && !slices.Contains(g.deps[scc[0]], scc[0]) {
			continue // a single task without a self-loop: the common, acyclic case
		}
		start := slices.Min(scc)
		in := make(map[int]bool, len(scc))
		for _, v := range scc {
			in[v] = true
		}
		path := g.shortestCycle(start, in)
		if path == nil {
			continue // unreachable for a real component; never report an empty cycle
		}
		ids := make([]string, len(path))
		for k, v := range path {
			ids[k] = tasks[v].ID
		}
		all = append(all, cycle{start, ids})
	}
	// Tarjan emits components in reverse topological order; present them by file position.
	slices.SortFunc(all, func(a, b cycle) int { return a.start - b.start })
	return all
}

// FormatCycle renders a cycle from FindCycles as "A → B → A".
func FormatCycle(cycle []string) string { return strings.Join(cycle, " → ") }

// components returns the strongly connected components (Tarjan), iteratively so that
// long dependency chains cannot exhaust the stack.
func (g graph) components() [][]int {
	n := len(g.deps)
	index := make([]int, n)
	low := make([]int, n)
	onStack := make([]bool, n)
	for i := range index {
		index[i] = -1
	}
	var (
		stack  []int
		sccs   [][]int
		next   int
		frames []struct{ v, edge int }
	)
	visit := func(v int) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		onStack[v] = true
		frames = append(frames, struct{ v, edge int }{v, 0})
	}
	for root := range n {
		if index[root] >= 0 {
			continue
		}
		visit(root)
		for len(frames) > 0 {
			f := &frames[len(frames)-1]
			v := f.v
			if f.edge < len(g.deps[v]) {
				w := g.deps[v][f.edge]
				f.edge++
				switch {
				case index[w] < 0:
					visit(w)
				case onStack[w]:
					low[v] = min(low[v], index[w])
				}
				continue
			}
			frames = frames[:len(frames)-1]
			if len(frames) > 0 {
				p := frames[len(frames)-1].v
				low[p] = min(low[p], low[v])
			}
			if low[v] != index[v] {
				continue
			}
			var scc []int
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				onStack[w] = false
				scc = append(scc, w)
				if w == v {
					break
				}
			}
			sccs = append(sccs, scc)
		}
	}
	return sccs
}

// shortestCycle returns the shortest closed path start → … → start inside the
// strongly connected component in (breadth first, dependencies in listed order); one
// exists, since start's component has a cycle.
func (g graph) shortestCycle(start int, in map[int]bool) []int {
	parent := map[int]int{start: -1}
	queue := []int{start}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, w := range g.deps[v] {
			if w == start {
				path := []int{start}
				for u := v; u != start; u = parent[u] {
					path = append(path, u)
				}
				// path holds start, then the walk back from v; put it in walking order.
				for a, b := 1, len(path)-1; a < b; a, b = a+1, b-1 {
					path[a], path[b] = path[b], path[a]
				}
				return append(path, start)
			}
			if _, seen := parent[w]; seen || !in[w] {
				continue
			}
			parent[w] = v
			queue = append(queue, w)
		}
	}
	return nil
}

// TopoOrder returns the task ids with every task after its dependencies; among tasks
// that are ready at the same time the one earlier in the file comes first, so a plan
// without dependencies keeps its file order. A repeated id appears once, at its first
// task. Dependencies on unknown ids are ignored. A cycle is an error wrapping ErrCycle.
func TopoOrder(tasks []Task) ([]string, error) {
	g := newGraph(tasks)
	waiting := make([]int, len(tasks))
	ready := &intHeap{}
	for i := range tasks {
		waiting[i] = len(g.deps[i])
		if waiting[i] == 0 {
			heap.Push(ready, i)
		}
	}
	order := make([]string, 0, len(tasks))
	seen := make(map[string]bool, len(tasks))
	done := 0
	for ready.Len() > 0 {
		i := heap.Pop(ready).(int)
		done++
		if !seen[tasks[i].ID] {
			seen[tasks[i].ID] = true
			order = append(order, tasks[i].ID)
		}
		for _, d := range g.rdeps[i] {
			waiting[d]--
			if waiting[d] == 0 {
				heap.Push(ready, d)
			}
		}
	}
	if done < len(tasks) {
		cycles := FindCycles(tasks)
		text := make([]string, len(cycles))
		for k, c := range cycles {
			text[k] = FormatCycle(c)
		}
		return nil, fmt.Errorf("order tasks: %w: %s", ErrCycle, strings.Join(text, "; "))
	}
	return order, nil
}

// intHeap is a min-heap of task indices.
type intHeap []int

func (h intHeap) Len() int           { return len(h) }
func (h intHeap) Less(i, j int) bool { return h[i] < h[j] }
func (h intHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *intHeap) Push(x any)        { *h = append(*h, x.(int)) }
func (h *intHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Dependents returns the ids of the tasks that list id among their dependencies, in
// file order, each once. It looks one level deep; call it again to walk further.
func Dependents(tasks []Task, id string) []string {
	var out []string
	seen := make(map[string]bool)
	for _, t := range tasks {
		if seen[t.ID] {
			continue
		}
		for _, d := range t.Dependencies {
			if d == id {
				seen[t.ID] = true
				out = append(out, t.ID)
				break
			}
		}
	}
	return out
}

// Blocked returns the ids of the PENDING tasks that can never run, in file order: some
// task on their dependency chain is FAILED or CANCELLED (or unknown, or part of a
// cycle), so they would wait forever until an operator resets something.
func Blocked(tasks []Task) []string {
	live := canFinish(tasks)
	var out []string
	for i, t := range tasks {
		if t.Status == StatusPending && !live[i] {
			out = append(out, t.ID)
		}
	}
	return out
}

// canFinish reports for each task whether it has finished well (DONE, SKIPPED), is
// running (CLAIMED, IN_PROGRESS), or is PENDING and every dependency can finish. It is
// the least fixed point, so cycles and unknown dependencies never can.
func canFinish(tasks []Task) []bool {
	g := newGraph(tasks)
	live := make([]bool, len(tasks))
	waiting := make([]int, len(tasks))
	var queue []int
	for i, t := range tasks {
		switch t.Status {
		case StatusDone, StatusSkipped, StatusClaimed, StatusInProgress:
			live[i] = true
			queue = append(queue, i)
		case StatusPending:
			waiting[i] = len(g.deps[i])
			if waiting[i] == 0 && !g.unknown[i] {
				live[i] = true
				queue = append(queue, i)
			}
		case StatusFailed, StatusCancelled:
		}
	}
	for len(queue) > 0 {
		v := queue[0]
		queue = queue[1:]
		for _, d := range g.rdeps[v] {
			if tasks[d].Status != StatusPending || live[d] {
				continue
			}
			waiting[d]--
			if waiting[d] == 0 && !g.unknown[d] {
				live[d] = true
				queue = append(queue, d)
			}
		}
	}
	return live
}
