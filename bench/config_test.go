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

// TestConfigBoundsAccepted: every bound of Validate is inclusive.
func TestConfigBoundsAccepted(t *testing.T) {
	for name, change := range map[string]func(*Config){
		"largest batch":          func(c *Config) { c.BatchSize = MaxBatchSize },
		"most epochs":            func(c *Config) { c.Epochs = MaxEpochs },
		"longest warm-up":        func(c *Config) { c.WarmupBatches = 1000 },
		"fewest steps":           func(c *Config) { c.Steps = MinSteps },
		"most steps":             func(c *Config) { c.Steps = MaxSteps },
		"one settle step":        func(c *Config) { c.SettleSteps = 1 },
		"most settle steps":      func(c *Config) { c.SettleSteps = 1000 },
		"largest probe":          func(c *Config) { c.ProbeKernels = 1000000 },
		"one probe repeat":       func(c *Config) { c.ProbeRepeats = 1 },
		"most probe repeats":     func(c *Config) { c.ProbeRepeats = 1000 },
		"probe skipped, repeats": func(c *Config) { c.ProbeKernels, c.ProbeRepeats = -1, 5000 },
	} {
		c := Config{}.WithDefaults()
		change(&c)
		if err := c.Validate(); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
