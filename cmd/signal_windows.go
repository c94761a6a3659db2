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
func caughtSignals() []os.Signal { return []os.Signal{syscall.SIGINT, syscall.SIGTERM} }

// keepWritesFromKilling has nothing to do: Windows has no SIGPIPE.
func keepWritesFromKilling() {}

// Windows has no job-control stop: this nil value matches no signal.
var stopSignal os.Signal

// endsWait is true: both signals Windows has end a wait.
func endsWait(os.Signal) bool { return true }

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
