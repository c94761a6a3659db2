package runner

import (
	"fmt"
	"os"
	"syscall"
)

// Linux's real-time signals, as kill -l names them: SIGRTMIN is 34, since
// the C library keeps 32 and 33 for itself. A Go program can catch those
// from 35 on: Go keeps 32 to 34 (see ignoreReserved).
const rtMin, rtCaught, rtMax = 34, 35, 64

// platformSignals end a process by default on Linux too, as do the
// real-time signals a Go program can catch.
var platformSignals = func() []os.Signal {
	sigs := append([]os.Signal{syscall.SIGPWR, syscall.SIGIO}, stackFault...)
	for sig := rtCaught; sig <= rtMax; sig++ {
		sigs = append(sigs, syscall.Signal(sig))
	}
	return sigs
}()

// infoSignal is a status request: Linux has none.
const infoSignal = syscall.Signal(-1)

// rtName names a real-time signal as kill -l does.
func rtName(sig syscall.Signal) string {
	if sig >= rtMin && sig <= rtMax {
		if sig-rtMin <= rtMax-sig {
			return fmt.Sprintf("SIGRTMIN+%d", sig-rtMin)
		}
		return fmt.Sprintf("SIGRTMAX-%d", rtMax-sig)
	}
	return fmt.Sprintf("signal %d", int(sig))
}
