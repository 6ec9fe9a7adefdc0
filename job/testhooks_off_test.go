//go:build !testhooks

package job

import (
	"strings"
	"testing"
)

// A build without the test switches refuses staging.slow_copy_ms by name.
func TestSlowStageCopyNeedsTestHooks(t *testing.T) {
	s := Default()
	s.SlowStageCopyMS = 5
	err := s.Validate()
	if err == nil || !strings.Contains(err.Error(), "staging.slow_copy_ms") || !strings.Contains(err.Error(), "testhooks") {
		t.Fatalf("Validate with slow_stage_copy_ms 5 in a build without test switches = %v, want an error naming the key and the tag", err)
	}
	s.SlowStageCopyMS = 0
	if err := s.Validate(); err != nil {
		t.Fatalf("the default spec: %v", err)
	}
}
