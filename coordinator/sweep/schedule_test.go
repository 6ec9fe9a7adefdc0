package sweep

import "testing"

// TestTrialQueueHandsSlotsTheirNextTrial plays a sweep's free slots
// against the queue's rules, step by step: the shapes of the idle kept
// workers on the slot's device (here) and on any device (held), and the
// trials that ended before the step.
func TestTrialQueueHandsSlotsTheirNextTrial(t *testing.T) {
	type step struct {
		ended []int    // trials that ended before this slot freed
		here  []string // idle kept workers' shapes on the slot's device
		held  []string // idle kept workers' shapes on any device
		want  int      // the trial the slot takes; -1 none
	}
	// Trials 0..6 by shape: X Y X Z Y X Y.
	shapes := []string{"X", "Y", "X", "Z", "Y", "X", "Y"}
	tests := []struct {
		name   string
		reuse  bool
		trials []int
		steps  []step
	}{
		{"without reuse, the file's order whatever the workers", false, []int{0, 1, 2, 3, 4, 5, 6}, []step{
			{want: 0}, {here: []string{"Y"}, want: 1}, {want: 2}, {held: []string{"X"}, want: 3},
			{want: 4}, {want: 5}, {want: 6}, {want: -1},
		}},
		{"shapes side by side, then their next trials on the workers they left", true, []int{0, 1, 2, 3, 4, 5, 6}, []step{
			{want: 0}, // rule 2: X, the first shape
			{want: 1}, // rule 2: Y, X runs
			{ended: []int{0}, here: []string{"X"}, held: []string{"X"}, want: 2}, // rule 1: X's worker is idle
			{ended: []int{1}, here: []string{"Y"}, held: []string{"Y"}, want: 4}, // rule 1, before Z of rule 2
			{ended: []int{2}, here: []string{"X"}, held: []string{"X"}, want: 5}, // X's last, in the file's order
			{ended: []int{5}, here: []string{"X"}, held: []string{"X"}, want: 3}, // X has none left: rule 2 takes Z
			{want: 6}, // rule 3: Y runs (4), but a slot is free
			{want: -1},
		}},
		{"a shape an idle worker on another device holds is left to it", true, []int{0, 2, 3}, []step{
			{want: 0},
			{ended: []int{0}, held: []string{"X"}, want: 3}, // rule 2 passes X, held elsewhere
			{here: []string{"X"}, held: []string{"X"}, want: 2},
			{want: -1},
		}},
		{"rule 1 takes the first shape with trials left among the idle workers'", true, []int{0, 1, 2, 4}, []step{
			{want: 0},
			{want: 1},
			{ended: []int{0, 1}, here: []string{"Y", "X"}, held: []string{"X", "Y"}, want: 2},
			{here: []string{"Y"}, held: []string{"Y"}, want: 4},
			{want: -1},
		}},
		{"a resumed sweep queues only its unfinished trials", true, []int{2, 4, 6}, []step{
			{want: 2}, {want: 4}, {want: 6}, {want: -1},
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var shapeOf func(int) string
			if tc.reuse {
				shapeOf = func(i int) string { return shapes[i] }
			}
			q := newTrialQueue(tc.trials, shapeOf)
			for n, st := range tc.steps {
				for _, i := range st.ended {
					q.done(i)
				}
				held := map[string]bool{}
				for _, sh := range st.held {
					held[sh] = true
				}
				left := q.Left()
				got, shape := q.next(st.here, held)
				if got != st.want {
					t.Fatalf("step %d (here %v, held %v): trial %d, want %d", n, st.here, st.held, got, st.want)
				}
				if got >= 0 && (q.Left() != left-1 || tc.reuse && shape != shapes[got]) {
					t.Fatalf("step %d: trial %d of shape %q, %d left of %d; want its shape %q, one fewer left", n, got, shape, q.Left(), left, shapes[got])
				}
			}
			if q.Left() != 0 {
				t.Fatalf("%d trials left after the steps", q.Left())
			}
		})
	}
}
