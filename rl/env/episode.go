package env

import "fmt"

// episode is the bookkeeping every environment shares: its time limit,
// whether it was reset, its steps so far and whether its episode is over.
type episode struct {
	limit int // the step that truncates an episode
	steps int
	over  bool
	reset bool
}

// start begins an episode.
func (e *episode) start() { e.steps, e.over, e.reset = 0, false, true }

// ready refuses a step before the first reset or after the episode ended.
func (e *episode) ready() error {
	switch {
	case !e.reset:
		return ErrNotReset
	case e.over:
		return ErrEpisodeOver
	}
	return nil
}

// check is ready, and refuses an action outside 0..actions-1.
func (e *episode) check(name string, action, actions int) error {
	if err := e.ready(); err != nil {
		return err
	}
	if action < 0 || action >= actions {
		return fmt.Errorf("env: %s action must be 0..%d, got %d", name, actions-1, action)
	}
	return nil
}

// end counts a step that terminated the episode or not and says whether it
// was truncated instead, at the time limit.
func (e *episode) end(terminated bool) (truncated bool) {
	e.steps++
	truncated = !terminated && e.steps >= e.limit
	e.over = terminated || truncated
	return truncated
}
