package runner

import (
	"runtime"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// DieOf ends semrun by sig with the signal's default action, so that its
// parent sees the same death as the child's (as timeout(1) does). The Go
// runtime's own handler is bypassed: for SIGQUIT it would dump goroutines
// and exit 2. No core file is written. DieOf returns only if that failed.
func DieOf(sig syscall.Signal) {
	runtime.LockOSThread()
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	_ = unix.Setrlimit(unix.RLIMIT_CORE, &unix.Rlimit{})
	// A zeroed kernel sigaction is SIG_DFL with no flags and an empty mask.
	var act [64]byte
	if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act[0])), 0, 8, 0, 0); e != 0 {
		return
	}
	var set unix.Sigset_t
	set.Val[(sig-1)/64] |= 1 << ((uint(sig) - 1) % 64)
	_ = unix.PthreadSigmask(unix.SIG_UNBLOCK, &set, nil)
	_ = unix.Tgkill(unix.Getpid(), unix.Gettid(), sig)
	time.Sleep(100 * time.Millisecond) // delivery is asynchronous for some signals
}

// reservedSignals are the real-time signals Go keeps for itself (32 to
// 34) and so lets no program catch; their default action would kill
// semrun without a release.
var reservedSignals = []syscall.Signal{32, 33, 34}

// ignoreReserved makes semrun ignore the reserved signals Go leaves at
// their default, once the command has started with them at theirs: they
// cannot be forwarded, but no longer end semrun without a release.
func ignoreReserved() {
	for _, sig := range reservedSignals {
		var act [64]byte // SIG_DFL, no flags, an empty mask
		if _, _, e := unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), 0, uintptr(unsafe.Pointer(&act[0])), 8, 0, 0); e != 0 {
			continue
		}
		if *(*uintptr)(unsafe.Pointer(&act[0])) != 0 {
			continue // Go's own handler (33), or ignored already
		}
		*(*uintptr)(unsafe.Pointer(&act[0])) = 1 // SIG_IGN
		_, _, _ = unix.RawSyscall6(unix.SYS_RT_SIGACTION, uintptr(sig), uintptr(unsafe.Pointer(&act[0])), 0, 8, 0, 0)
	}
}
