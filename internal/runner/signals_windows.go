package runner

import (
	"fmt"
	"os"
	"syscall"
)

// caught are all a console program gets on Windows: Ctrl-C and Ctrl-Break
// (both as SIGINT), and SIGTERM when the console closes, the user logs off
// or the system shuts down. Windows delivers them to the child too, so
// they need no forwarding.
func caught() []os.Signal { return []os.Signal{syscall.SIGINT, syscall.SIGTERM} }

// roleOf is ends: both signals Windows has end a wait.
func roleOf(os.Signal) role { return ends }

// KeepWritesFromKilling has nothing to do: Windows has no SIGPIPE.
func KeepWritesFromKilling() {}

// SignalName names sig and what sends it on Windows.
func SignalName(sig syscall.Signal) string {
	switch sig {
	case syscall.SIGINT:
		return "SIGINT (Ctrl-C or Ctrl-Break)"
	case syscall.SIGTERM:
		return "SIGTERM (console closed, logoff or shutdown)"
	}
	return fmt.Sprintf("signal %d", int(sig))
}
