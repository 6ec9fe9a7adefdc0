package sweep

import (
	"slices"
	"sync"
)

// trialQueue hands each free slot the trial it runs next. Without
// Config.ReuseWorkers it is the file's order. With it the trials are
// grouped by shape (see shapeOf; the shapes in the order of their first
// trial, each shape's trials in the file's order), and a free slot takes,
// the first rule that gives one deciding:
//
//  1. the next trial of a shape that an idle kept worker of the slot's
//     device holds (that worker serves it, its pool warm for the shape);
//  2. else the next trial of the first shape that no running trial and no
//     idle kept worker holds, so shapes run side by side, each on a worker
//     of its own;
//  3. else the next trial of the first shape with trials left, so no slot
//     stands idle while trials wait.
//
// So at --parallel N the trials of one shape run one after another on one
// worker where the slots allow, and every slot works. The order changes no
// result: a trial's are the same whichever trial ran before it.
type trialQueue struct {
	mu sync.Mutex
	// shapes are the trials' shapes in the order of their first trial;
	// without reuse there is one, "".
	shapes []string
	// pending are each shape's trials not started yet, in the file's order.
	pending map[string][]int
	// running counts each shape's trials started and not ended.
	running map[string]int
	// shapeOf is each trial's shape, by index.
	shapeOf map[int]string
	left    int
}

// newTrialQueue queues the trials of indices (in the file's order) whose
// shapes are shapes[i]; a nil shapes queues them in the file's order.
func newTrialQueue(indices []int, shapes func(i int) string) *trialQueue {
	q := &trialQueue{pending: map[string][]int{}, running: map[string]int{}, shapeOf: map[int]string{}}
	for _, i := range indices {
		sh := ""
		if shapes != nil {
			sh = shapes(i)
		}
		if _, ok := q.pending[sh]; !ok {
			q.shapes = append(q.shapes, sh)
		}
		q.pending[sh] = append(q.pending[sh], i)
		q.shapeOf[i] = sh
		q.left++
	}
	return q
}

// Left is how many trials have not started.
func (q *trialQueue) Left() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.left
}

// next takes the trial a free slot runs, by the rules of trialQueue:
// here are the shapes of the idle kept workers of the slot's device,
// held those of every idle kept worker. It returns the trial's index and
// its shape; -1 when no trial is left.
func (q *trialQueue) next(here []string, held map[string]bool) (int, string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	rules := []func(sh string) bool{
		func(sh string) bool { return slices.Contains(here, sh) },
		func(sh string) bool { return q.running[sh] == 0 && !held[sh] },
		func(string) bool { return true },
	}
	for _, rule := range rules {
		for _, sh := range q.shapes {
			if len(q.pending[sh]) == 0 || !rule(sh) {
				continue
			}
			i := q.pending[sh][0]
			q.pending[sh] = q.pending[sh][1:]
			q.running[sh]++
			q.left--
			return i, sh
		}
	}
	return -1, ""
}

// done hears that trial i, taken by next, has ended.
func (q *trialQueue) done(i int) {
	q.mu.Lock()
	defer q.mu.Unlock()
	q.running[q.shapeOf[i]]--
}
