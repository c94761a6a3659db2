package main

import (
	"os/exec"
	"syscall"

	"golang.org/x/sys/unix"
)

// ownGroup makes cmd the leader of a process group of its own, which dies
// with the bench, and which a cancel asks to end with SIGTERM.
func ownGroup(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
}

// signalGroup sends sig to the process group cmd leads.
func signalGroup(cmd *exec.Cmd, sig syscall.Signal) { _ = syscall.Kill(-cmd.Process.Pid, sig) }

// monotonic reads CLOCK_MONOTONIC in ns, as the children do.
func monotonic() int64 {
	var ts unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &ts)
	return ts.Nano()
}

// realtimeOffset is CLOCK_REALTIME - CLOCK_MONOTONIC, in ns: subtracted
// from a time of day, it gives the children's clock.
func realtimeOffset() int64 {
	var rt, mono unix.Timespec
	_ = unix.ClockGettime(unix.CLOCK_REALTIME, &rt)
	_ = unix.ClockGettime(unix.CLOCK_MONOTONIC, &mono)
	return rt.Nano() - mono.Nano()
}
