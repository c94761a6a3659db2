package cmd

import (
	"fmt"
	"os"
	"syscall"
)

// caughtSignals are all a console program gets on Windows: Ctrl-C and
// Ctrl-Break (both as SIGINT), and SIGTERM when the console closes, the
// user logs off or the system shuts down. Windows delivers them to the
// child too, so they need no forwarding; both end a wait for a permit.
var caughtSignals = []os.Signal{syscall.SIGINT, syscall.SIGTERM}

// Windows has no job-control stop and no resize signal: these nil values
// match no signal.
var stopSignal, resizeSignal os.Signal

// signalName names sig and what sends it on Windows.
func signalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT (Ctrl-C or Ctrl-Break)"
	case syscall.SIGTERM:
		return "SIGTERM (console closed, logoff or shutdown)"
	}
	return fmt.Sprintf("signal %d", int(sig))
}

// inBackground is false: a Windows console has no foreground process group.
func inBackground(int) bool { return false }
