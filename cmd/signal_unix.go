//go:build unix

package cmd

import (
	"os"
	"syscall"

	"golang.org/x/sys/unix"
)

// caughtSignals are caught from before the wait for a permit until semrun
// exits. All but stopSignal reach the child's process group, and all but
// resizeSignal end a wait for a permit.
var caughtSignals = []os.Signal{
	syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGQUIT,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGWINCH, syscall.SIGTSTP,
}

// stopSignal (Ctrl-Z) suspends the whole job; resizeSignal says that a
// terminal was resized, which is no reason to give up a wait.
const stopSignal, resizeSignal = syscall.SIGTSTP, syscall.SIGWINCH

// signalName is sig's name as in kill -l, with SIG: "SIGTERM".
func signalName(sig syscall.Signal) string { return unix.SignalName(sig) }

// inBackground tells whether the terminal fd has a foreground process group
// other than semrun's (Ctrl-Z, then bg): the prompt is then the shell's.
func inBackground(fd int) bool {
	pgrp, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	return err == nil && pgrp != unix.Getpgrp()
}
