//go:build unix

package worker

import (
	"os/exec"
	"syscall"
)

// ownProcessGroup starts the worker as the leader of a new process group,
// so that killGroup reaches what it starts (a wrapper script's children).
// The terminal's SIGINT then reaches the coordinator only, which cancels
// the worker through the protocol.
func ownProcessGroup(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
}

// killGroup kills the worker's process group, and the worker itself in
// case it left the group. After the worker is reaped it reaches the
// descendants still in the group: a group's id stays reserved while the
// group has members.
func killGroup(cmd *exec.Cmd) {
	if cmd.Process == nil {
		return
	}
	if pid := cmd.Process.Pid; pid > 0 {
		_ = syscall.Kill(-pid, syscall.SIGKILL)
	}
	_ = cmd.Process.Kill()
}
