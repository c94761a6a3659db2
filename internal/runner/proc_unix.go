//go:build unix

package runner

import (
	"os"
	"os/signal"
	"runtime"
	"slices"
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
// reports its changes of state on events until abandoned is closed. With a
// terminal, a stop of the child is reported too, and waiting resumes once
// the event's resumed channel is signalled. syscall.ForkExec, not os/exec:
// the child is reaped here, and os/exec's first start forks once more to
// probe for pidfd.
func start(path string, spec Spec, term *terminal, events chan<- waitEvent, abandoned <-chan struct{}) (group, error) {
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
		pid, err := syscall.ForkExec(path, spec.Args, &syscall.ProcAttr{Env: spec.Env, Files: files, Sys: attr})
		ready <- started{pid, err}
		if err != nil {
			return
		}
		w := waiter{pid: pid, orphans: spec.ReapOrphans, events: events, abandoned: abandoned}
		w.reap(jobControl)
	}()
	s := <-ready
	runtime.KeepAlive(spec) // its files stay open until the child has them
	return group(s.pid), s.err
}

// waiter waits for the child pid, and for its orphans too when orphans is
// set, and reports the child's changes of state on events until abandoned
// is closed.
type waiter struct {
	pid       int
	orphans   bool
	events    chan<- waitEvent
	abandoned <-chan struct{}
}

// waitFor is what a wait names: the child's pid, or any child when the
// orphans are reaped too. Every child but the command is then one it left
// behind: reaped as it ends, without a report, so that no zombie piles up
// under semrun while the command runs. The command itself is reaped here
// and nowhere else, so its status is never lost to another wait.
func (w waiter) waitFor(pid int) int {
	if w.orphans {
		return -1
	}
	return pid
}

// send reports ev, unless Run no longer listens.
func (w waiter) send(ev waitEvent) bool {
	select {
	case w.events <- ev:
		return true
	case <-w.abandoned:
		return false
	}
}

// reap waits for the child's changes of state and reports them, until it
// ends.
func (w waiter) reap(jobControl bool) {
	flags := 0
	if jobControl {
		flags = unix.WUNTRACED
	}
	for {
		var ws unix.WaitStatus
		pid, err := unix.Wait4(w.waitFor(w.pid), &ws, flags, nil)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			// Cannot happen for our own child; report it as killed.
			w.send(waitEvent{status: unix.WaitStatus(syscall.SIGKILL)})
			return
		}
		if pid != w.pid {
			continue // an orphan, reaped; or stopped, which is its own business
		}
		if ws.Stopped() {
			resumed := make(chan struct{})
			if !w.send(waitEvent{stopped: true, resumed: resumed}) {
				return
			}
			<-resumed
			continue
		}
		// Only ESRCH says the group is empty: EPERM is a member semrun
		// may not signal (a command run with sudo), which still counts.
		if unix.Kill(-w.pid, 0) == unix.ESRCH {
			w.send(waitEvent{status: ws})
			return
		}
		if !w.send(waitEvent{status: ws, lingering: true}) {
			return
		}
		w.reapGroup()
		w.send(waitEvent{groupGone: true})
		return
	}
}

// reapGroup waits until no process is left in the child's group, or Run
// no longer listens. Where semrun adopts orphans (Linux), what the child
// left behind becomes semrun's child as the child exits, and is reaped
// here; elsewhere it returns at once. A process may also leave the group
// without exiting (setsid), which no wait reports: so the group is looked
// at again, ever less often, until it is empty. Unless every orphan is
// reaped, only the group's are: semrun may be a library's process with
// children of its own. What left the group and ends is then reaped by
// whoever outlives semrun.
func (w waiter) reapGroup() {
	if !waitsForGroup {
		return
	}
	pgid := w.pid
	pause := groupFirstLook
	for {
		for {
			var ws unix.WaitStatus
			pid, err := unix.Wait4(w.waitFor(-pgid), &ws, unix.WNOHANG, nil)
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
		select {
		case <-time.After(pause):
		case <-w.abandoned:
			return
		}
		pause = min(pause*2, groupLastLook)
	}
}

// unstopped lists (at most maxLeftShown of) the processes still in g after
// SIGKILL, each sent SIGKILL once more to learn why it lives on. childAlive
// says that the child has not exited: it is named even where the group
// cannot be listed.
func (g group) unstopped(childAlive bool) []Unstopped {
	var left []Unstopped
	for _, p := range leftInGroup(int(g), maxLeftShown) {
		if err := unix.Kill(p.PID, unix.SIGKILL); err != unix.ESRCH {
			left = append(left, Unstopped{Process: p, Err: err})
		}
	}
	listed := slices.ContainsFunc(left, func(u Unstopped) bool { return u.PID == int(g) })
	if childAlive && !listed {
		if err := unix.Kill(int(g), unix.SIGKILL); err != unix.ESRCH {
			left = append(left, Unstopped{Process: Process{PID: int(g)}, Err: err})
		}
	}
	return left
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

// InBackground tells whether the terminal fd has a foreground process
// group other than semrun's (Ctrl-Z, then bg): the prompt is then the
// shell's, and a waiting line would mix with it.
func InBackground(fd int) bool {
	pgrp, err := unix.IoctlGetInt(fd, unix.TIOCGPGRP)
	return err == nil && pgrp != unix.Getpgrp()
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
