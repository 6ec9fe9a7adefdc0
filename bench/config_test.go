package bench

import "testing"

// TestConfigSeedAndSweepBounds: an unset seed becomes 1 and a set one is
// kept; sweep batch sizes from 1 to MaxBatchSize are accepted and those
// just outside refused.
func TestConfigSeedAndSweepBounds(t *testing.T) {
	if got := (Config{}).WithDefaults().Seed; got != 1 {
		t.Errorf("default seed %d, want 1", got)
	}
	if got := (Config{Seed: 7}).WithDefaults().Seed; got != 7 {
		t.Errorf("seed 7 became %d", got)
	}
	for _, c := range []struct {
		sizes []int
		ok    bool
	}{
		{[]int{1, MaxBatchSize}, true},
		{[]int{0}, false},
		{[]int{MaxBatchSize + 1}, false},
	} {
		cfg := Config{SweepBatchSizes: c.sizes}.WithDefaults()
		if err := cfg.Validate(); (err == nil) != c.ok {
			t.Errorf("sweep batch sizes %v: Validate() = %v, want ok %v", c.sizes, err, c.ok)
		}
	}
}
