//go:build !testhooks

package main

import (
	"log/slog"
	"os"

	"github.com/tolaria-ml/tolaria/jobserver"
)

// installFaults: a build without -tags testhooks has no fault switch. A
// set jobserver.FaultEnv is ignored, with a warning, so a worker in use
// can never be made to fail on purpose.
func installFaults(_ *jobserver.Config, log *slog.Logger) error {
	if os.Getenv(jobserver.FaultEnv) != "" {
		log.Warn("ignoring the test-only fault switch: this build has no test switches (tolaria's tests build with -tags testhooks)",
			"env", jobserver.FaultEnv)
	}
	return nil
}
