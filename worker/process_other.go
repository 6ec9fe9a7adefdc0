//go:build !unix

package worker

import "os/exec"

// ownProcessGroup does nothing where there are no Unix process groups.
func ownProcessGroup(*exec.Cmd) {}

// killGroup kills the worker (its descendants are not reached here).
func killGroup(cmd *exec.Cmd) {
	if cmd.Process != nil {
		_ = cmd.Process.Kill()
	}
}
