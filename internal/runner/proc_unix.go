//go:build unix

package runner

import (
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

type waitStatus = unix.WaitStatus

// group is the child's process group, named by its id: the child's pid.
type group int

// deliver passes on a signal semrun caught to the child's group, as
// roleOf says: a stop stops the group instead (SIGSTOP) and reports
// stopped; SIGPIPE is not passed on.
func (g group) deliver(sig os.Signal) (stopped bool) {
	switch roleOf(sig) {
	case ownWrites:
		return false
	case stops:
		_ = syscall.Kill(-int(g), syscall.SIGSTOP)
		return true
	}
	_ = syscall.Kill(-int(g), sig.(syscall.Signal))
	return false
}

// terminate asks the group to end (SIGTERM); kill ends it (SIGKILL).
func (g group) terminate() { g.signal(syscall.SIGTERM) }
func (g group) kill()      { g.signal(syscall.SIGKILL) }

// signal sends sig to the group, and SIGCONT so that a stopped child can
// act on it.
func (g group) signal(sig syscall.Signal) {
	_ = syscall.Kill(-int(g), sig)
	_ = syscall.Kill(-int(g), syscall.SIGCONT)
}

// stillInGroup lists some of the processes left in g, and tells whether
// any is left. Only where semrun waits for the group (waitsForGroup:
// Linux), which is where leftInGroup lists them.
func stillInGroup(g group) ([]Process, bool) {
	left := leftInGroup(int(g), maxLeftShown)
	return left, len(left) > 0
}

// close does nothing: a process group holds nothing to free.
func (group) close() {}

// start starts the command at path in a process group of its own, and
// reports its changes of state on events. With a terminal, a stop of the
// child is reported too, and waiting resumes once the event's resumed
// channel is signalled. syscall.ForkExec, not os/exec: the child is reaped
// here, and os/exec's first start forks once more to probe for pidfd.
func start(path string, spec Spec, term *terminal, events chan<- waitEvent) (group, error) {
	adoptOrphans()
	attr, jobControl := procAttr(term), term != nil
	var files []uintptr
	for _, f := range []*os.File{spec.Stdin, spec.Stdout, spec.Stderr} {
		if f == nil { // as with os/exec: the null device
			null, err := os.OpenFile(os.DevNull, os.O_RDWR, 0)
			if err != nil {
				return 0, err
			}
			defer null.Close()
			f = null
		}
		files = append(files, f.Fd())
	}
	// Files to inherit lose close-on-exec for the fork only. semrun starts
	// no other process meanwhile that could inherit them too.
	for _, f := range spec.Inherit {
		if err := setCloseOnExec(f, false); err != nil {
			return 0, err
		}
		defer setCloseOnExec(f, true)
	}
	type started struct {
		pid int
		err error
	}
	ready := make(chan started, 1)
	go func() {
		// The parent-death signal is tied to the thread that starts the
		// child: this goroutine keeps that thread, and the thread lives,
		// until the child is reaped. The rest of semrun runs unlocked, so
		// that the child's end reaches it without a switch of threads.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		restoreCPUs()
		pid, err := syscall.ForkExec(path, spec.Args, &syscall.ProcAttr{Env: spec.Env, Files: files, Sys: attr})
		ready <- started{pid, err}
		if err != nil {
			return
		}
		reap(pid, jobControl, events)
	}()
	s := <-ready
	runtime.KeepAlive(spec) // its files stay open until the child has them
	return group(s.pid), s.err
}

// reap waits for the child's changes of state and reports them on events,
// until it ends.
func reap(pid int, jobControl bool, events chan<- waitEvent) {
	flags := 0
	if jobControl {
		flags = unix.WUNTRACED
	}
	for {
		var ws unix.WaitStatus
		_, err := unix.Wait4(pid, &ws, flags, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			// Cannot happen for our own child; report it as killed.
			events <- waitEvent{status: unix.WaitStatus(syscall.SIGKILL)}
			return
		}
		if ws.Stopped() {
			resumed := make(chan struct{})
			events <- waitEvent{stopped: true, resumed: resumed}
			<-resumed
			continue
		}
		// Only ESRCH says the group is empty: EPERM is a member semrun
		// may not signal (a command run with sudo), which still counts.
		if unix.Kill(-pid, 0) == unix.ESRCH {
			events <- waitEvent{status: ws}
			return
		}
		events <- waitEvent{status: ws, lingering: true}
		reapGroup(pid)
		events <- waitEvent{groupGone: true}
		return
	}
}

// reapGroup waits until no process is left in the group pgid. Where semrun
// adopts orphans (Linux), what the child left behind becomes semrun's
// child as the child exits, and is reaped here; elsewhere it returns at
// once. A process may also leave the group without exiting (setsid), which
// no wait reports: so the group is looked at again, ever less often, until
// it is empty. Only the group's are reaped: semrun may be a library's
// process with children of its own. What left the group and ends is reaped
// by whoever outlives semrun.
func reapGroup(pgid int) {
	if !waitsForGroup {
		return
	}
	pause := groupFirstLook
	for {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(-pgid, &ws, unix.WNOHANG, nil)
			if err == unix.EINTR {
				continue
			}
			if pid <= 0 || err != nil {
				break
			}
		}
		if unix.Kill(-pgid, 0) == unix.ESRCH {
			return
		}
		time.Sleep(pause)
		pause = min(pause*2, groupLastLook)
	}
}

// How often reapGroup looks at a lingering group: soon after the child
// exits, then at most every groupLastLook, which is how late a permit may
// be released after the group is gone.
const (
	groupFirstLook = 2 * time.Millisecond
	groupLastLook  = 100 * time.Millisecond
)

func setCloseOnExec(f *os.File, on bool) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	flag := 0
	if on {
		flag = unix.FD_CLOEXEC
	}
	var fcntlErr error
	if err := rc.Control(func(fd uintptr) { _, fcntlErr = unix.FcntlInt(fd, unix.F_SETFD, flag) }); err != nil {
		return err
	}
	return fcntlErr
}

// terminal is the controlling terminal semrun shares with its child when
// semrun runs in the terminal's foreground; nil otherwise.
type terminal struct {
	fd int
}

// newTerminal returns the terminal on stdin when semrun is in its
// foreground process group, so the child's group can take the foreground:
// Ctrl-C then reaches the child once, and the child can read the terminal.
func newTerminal(stdin *os.File) *terminal {
	if stdin == nil {
		return nil
	}
	fd := int(stdin.Fd())
	pgrp, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	if err != nil || pgrp != unix.Getpgrp() {
		return nil
	}
	return &terminal{fd: fd}
}

// setForeground makes pgrp the terminal's foreground group. SIGTTOU is
// ignored meanwhile: a background group may not do this otherwise.
func (t *terminal) setForeground(pgrp int) {
	signal.Ignore(syscall.SIGTTOU)
	defer signal.Reset(syscall.SIGTTOU)
	_ = unix.IoctlSetPointerInt(t.fd, unix.TIOCSPGRP, pgrp)
}

// reclaim takes the terminal back for semrun once the child is done. On
// a nil terminal it does nothing, as do suspend's and resume's terminal parts.
func (t *terminal) reclaim() {
	if t != nil {
		t.setForeground(unix.Getpgrp())
	}
}

// suspend stops semrun after its child was stopped (from the terminal, or
// by a SIGTSTP sent to semrun), so the shell sees the whole job stopped; it
// returns once semrun is continued.
// A stop sent to oneself can take effect after kill returns, so the return
// waits for the SIGCONT that ends the stop.
func (t *terminal) suspend() {
	continued := make(chan os.Signal, 1)
	signal.Notify(continued, syscall.SIGCONT)
	defer signal.Stop(continued)
	t.reclaim()
	_ = unix.Kill(unix.Getpid(), unix.SIGSTOP)
	<-continued
}

// resume gives the terminal back to the child when the shell continued the
// job in the foreground, and continues the child.
func (t *terminal) resume(g group) {
	if t != nil {
		if pgrp, err := unix.IoctlGetInt(t.fd, unix.TIOCGPGRP); err == nil && pgrp == unix.Getpgrp() {
			t.setForeground(int(g))
		}
	}
	_ = unix.Kill(-int(g), unix.SIGCONT)
}
