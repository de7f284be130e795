package queue

import "testing"

func TestIDWindow(t *testing.T) {
	t.Parallel()
	w := &idWindow{hi: 100}
	if w.has(100) || w.has(50) {
		t.Fatal("nothing is marked yet")
	}
	for _, id := range []int64{101, 103, 90} {
		w.mark(id)
	}
	for id, want := range map[int64]bool{90: true, 101: true, 102: false, 103: true, 104: false} {
		if w.has(id) != want {
			t.Errorf("has(%d) = %v, want %v", id, !want, want)
		}
	}
	// Advancing by less than the window keeps what is inside it and clears reused slots.
	w.mark(103 + windowIDs - 1)
	if !w.has(103) || w.has(101) || w.has(90) || w.has(103+windowIDs-3) {
		t.Error("sliding by less than the window")
	}
	// Unmarking forgets one id and nothing else.
	w.unmark(103)
	if w.has(103) || !w.has(103+windowIDs-1) {
		t.Error("unmarking")
	}
	// A jump beyond the window forgets everything.
	w.mark(10 * windowIDs)
	if w.has(103+windowIDs-1) || !w.has(10*windowIDs) || w.floor() != 9*windowIDs {
		t.Error("jumping past the window")
	}
}
