package field

import (
	"errors"
	"slices"
	"testing"
)

// TestWhoseNamesTheCommandOfAFileReadRefuses: every file Read refuses as
// another command's is named by Whose with that command and the keys
// that tell, and a file of the schema's own, or of unknown keys alone, by
// none.
func TestWhoseNamesTheCommandOfAFileReadRefuses(t *testing.T) {
	train := Schema{Keys: []Name{"seed", "schedule.epochs", "data.dataset"}, Command: "tolaria train --config"}
	for _, c := range []struct {
		yaml, command string
		keys          []string
	}{
		{"env: CartPole-v1\nnum_agents: 2\nseed: 1\n", "tolaria rl --config", []string{"env", "num_agents"}},
		{"base: {seed: 1}\ngrid: {seed: [1, 2]}\n", "tolaria sweep", []string{"base", "grid"}},
		{"trials: [{seed: 1}]\n", "tolaria sweep", []string{"trials"}},
		{"seed: 1\nschedule: {epochs: 2}\n", "", nil},
		{"seed: 1\nsedd: 2\n", "", nil},
		{"[1, 2]\n", "", nil},
	} {
		command, keys := train.Whose([]byte(c.yaml))
		if command != c.command || !slices.Equal(keys, c.keys) {
			t.Errorf("%q: %q %v, want %q %v", c.yaml, command, keys, c.command, c.keys)
		}
		if _, err := train.Read([]byte(c.yaml)); errors.Is(err, ErrOtherCommand) != (c.command != "") {
			t.Errorf("%q: Read gives %v, yet Whose says %q", c.yaml, err, command)
		}
	}
}
