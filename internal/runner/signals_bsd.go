//go:build unix && !linux

package runner

import (
	"fmt"
	"os"
	"syscall"
)

// platformSignals: SIGEMT ends a process by default; SIGINFO (Ctrl-T)
// asks the command for its status.
var platformSignals = []os.Signal{syscall.SIGEMT, syscall.SIGINFO}

// infoSignal is Ctrl-T's status request, which does not end a wait.
const infoSignal = syscall.SIGINFO

// rtName names a signal without a name here.
func rtName(sig syscall.Signal) string { return fmt.Sprintf("signal %d", int(sig)) }
