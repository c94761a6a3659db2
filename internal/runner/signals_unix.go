//go:build unix

package runner

import (
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/sys/unix"
)

// forwardedSignals are the signals that would end the command or concern
// it: semrun catches them from before the wait for a permit until it
// exits, passes them on to the command's process group, and so never dies
// of one while the command runs. A user's kill -SEGV is one of them; a
// fault in semrun itself still crashes it. Not caught: SIGPROF (Go's
// profiler), SIGURG (Go's scheduler), SIGCHLD, SIGCONT, SIGTTIN and
// SIGTTOU (job control), SIGKILL and SIGSTOP (they cannot be).
var forwardedSignals = append([]os.Signal{
	syscall.SIGHUP, syscall.SIGINT, syscall.SIGQUIT, syscall.SIGTERM,
	syscall.SIGUSR1, syscall.SIGUSR2, syscall.SIGALRM, syscall.SIGVTALRM,
	syscall.SIGXCPU, syscall.SIGXFSZ, syscall.SIGWINCH, syscall.SIGSYS,
	syscall.SIGABRT, syscall.SIGTRAP, syscall.SIGBUS, syscall.SIGFPE,
	syscall.SIGILL, syscall.SIGSEGV, syscall.SIGTSTP,
}, platformSignals...)

// caught are forwardedSignals, less SIGHUP and SIGINT when semrun started
// with them ignored (nohup; the background jobs of a non-interactive
// shell): those stay ignored, for semrun and the command, which inherits
// the ignore. Go keeps an inherited ignore for these two only, and only
// while nothing asks for them. Plus SIGPIPE (see ownWrites).
func caught() []os.Signal {
	sigs := []os.Signal{syscall.SIGPIPE}
	for _, sig := range forwardedSignals {
		if (sig == syscall.SIGHUP || sig == syscall.SIGINT) && signal.Ignored(sig) {
			continue
		}
		sigs = append(sigs, sig)
	}
	return sigs
}

// roleOf says what sig does, caught.
func roleOf(sig os.Signal) role {
	switch sig {
	case syscall.SIGPIPE:
		return ownWrites
	case syscall.SIGTSTP:
		return stops
	case syscall.SIGWINCH, infoSignal:
		return informs
	}
	return ends
}

// KeepWritesFromKilling makes a write to a closed pipe on stdout or stderr
// fail with EPIPE instead of killing semrun, for every command of semrun,
// not only a run: its own lines must never change its exit status, nor
// keep the command from running. Go's runtime kills a program on a write
// to a broken pipe on fd 1 or 2 unless SIGPIPE is asked for.
func KeepWritesFromKilling() { signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE) }

// SignalName is sig's name as in kill -l, with SIG: "SIGTERM", or
// "SIGRTMIN+3".
func SignalName(sig syscall.Signal) string {
	if name := unix.SignalName(sig); name != "" {
		return name
	}
	return rtName(sig)
}
