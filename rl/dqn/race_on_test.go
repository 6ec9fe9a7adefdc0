//go:build race

package dqn

// raceEnabled: the race detector slows the CPU device's kernels about
// tenfold, so the learning test trains a smaller network for fewer steps.
const raceEnabled = true
