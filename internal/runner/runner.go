// Package runner runs a command while a semaphore lease is held: it starts
// the child in its own process group, forwards signals to that group, renews
// the lease, and stops the child before the store could give its permit away.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/semaphore"
)

// OnLost says what happens to the child when its permit is lost.
type OnLost int

const (
	// Terminate sends SIGTERM to the child's process group, then SIGKILL
	// after the kill-after grace period.
	Terminate OnLost = iota
	// Continue warns and lets the child run on without a permit.
	Continue
)

// Spec is what to run and how.
type Spec struct {
	// Args is the command and its arguments; Args[0] is looked up in PATH.
	Args []string
	// Path is Args[0] as Find found it, before the wait for a permit, so
	// that the lookup is not between the grant and the command's start.
	// Empty: Run looks it up.
	Path string
	// Env is the child's whole environment.
	Env []string
	// Stdin, Stdout and Stderr are the child's; nil is the null device.
	Stdin, Stdout, Stderr *os.File
	// Inherit are files the child keeps open, at the descriptor numbers
	// they have here: the descriptors semrun itself inherited (a shell's
	// 3>file) reach the child unchanged.
	Inherit []*os.File
	// TTL is the lease; it decides how often the lease is renewed.
	TTL time.Duration
	// KillAfter is the grace period between SIGTERM and SIGKILL.
	KillAfter time.Duration
	OnLost    OnLost
	// Signals are forwarded to the child's process group, but SIGTSTP,
	// which suspends the whole job: semrun and the child's group. nil:
	// none are.
	Signals *Signals
	// Warnf receives warnings: a lost permit with Continue, failed renewals.
	Warnf func(format string, args ...any)
	// Lingering, when set, is called once if the command exits but leaves
	// processes in its group, which keep the permit: the command's status
	// and some of what is left (none where it cannot be listed).
	Lingering func(status int, sig syscall.Signal, left []Process)
	// Clock times the renewals, the loss of the permit and the grace
	// period; nil is clock.System. The lease's Deadline is read on it.
	Clock clock.Clock
	// MaxRuntime, when positive, stops the command once it has run this
	// long, on the clock: SIGTERM to its group, SIGKILL after KillAfter.
	// A lease with a bound stops it sooner when that comes first
	// (semaphore.RunsOut). Renewals go on until the group is gone, up to
	// the bound.
	MaxRuntime time.Duration
	// WarnAfter, when positive, makes Warnf say once that the command has
	// run this long; nothing else changes.
	WarnAfter time.Duration
	// ReapOrphans says that the command is the only child this process
	// starts: every other child it has is one the command left behind
	// (Linux adopts them), and is reaped as it ends, so that none stays a
	// zombie under a long job. Leave it false in a process with children
	// of its own, whose end their own waits must see.
	ReapOrphans bool
}

// Result is how the child ended.
type Result struct {
	// ExitCode is the child's exit status when it exited by itself.
	ExitCode int
	// Signal is the signal that ended the child, 0 when it exited.
	Signal syscall.Signal
	// Lost is why the permit was lost while the child ran; nil if it was not.
	Lost error
	// Terminated is true when the child was stopped because of Lost, or
	// told to stop, when StillRuns.
	Terminated bool
	// Unstopped is what a stop for Lost could not end: the child itself,
	// or what it left in its group. Run gives up waiting for them, and
	// they may run on.
	Unstopped []Unstopped
	// StillRuns says that the child itself is among them: it has no
	// status, and ExitCode and Signal say nothing.
	StillRuns bool
	// RanOut says that the child was told to stop at MaxRuntime, before it
	// exited by itself; Bounded that it was the lease's bound that came
	// first (a hold's, say).
	RanOut, Bounded bool
}

// Unstopped is a process that SIGKILL did not end.
type Unstopped struct {
	Process
	// Err is why: the kill's error (EPERM: the process changed its user,
	// as sudo or a set-uid program does), or nil when it was signalled
	// but lives on (stuck in the kernel, say).
	Err error
}

// StartError means the child could not be started.
type StartError struct {
	Command string
	// NotFound distinguishes "no such command" from "cannot execute".
	NotFound bool
	// Interpreter is the missing interpreter of a script (its #! line)
	// that is found itself: it cannot start either.
	Interpreter string
	Err         error
}

func (e *StartError) Error() string {
	reason := e.Err
	var execErr *exec.Error
	var pathErr *fs.PathError
	switch {
	case errors.As(reason, &execErr):
		reason = execErr.Err
	case errors.As(reason, &pathErr):
		reason = pathErr.Err
	}
	return fmt.Sprintf("%s: %v", e.Command, reason)
}
func (e *StartError) Unwrap() error { return e.Err }

// ErrPresumedLost means no renewal succeeded in time: the store may be
// about to give the permit away, so the permit counts as lost.
var ErrPresumedLost = errors.New("no renewal succeeded in time")

// ErrStale means Run started nothing: the lease had aged too far to start
// the child on, and could not be renewed in time. The permit was not used;
// the caller may give it back and wait again.
var ErrStale = errors.New("the permit aged before the command could start")

// waitEvent is a change of the child's state.
type waitEvent struct {
	status  waitStatus
	stopped bool
	// resumed is signalled when the job was continued after a stop.
	resumed chan struct{}
	// lingering says that the child exited with status, but left processes
	// in its group; an event with groupGone follows once they are gone.
	lingering, groupGone bool
}

// Lease is the permit the child runs under.
type Lease interface {
	// Deadline is the instant at which the store may give the permit away,
	// on a clock that counts a suspend of the host; zero when it never does.
	Deadline() clock.Instant
	// Renew extends the lease; an error wrapping semaphore.ErrLost means
	// the permit is gone, any other leaves it in doubt.
	Renew(ctx context.Context) error
	// Bound is when the store renews the lease no further, on the same
	// clock; zero without a bound (see semaphore.Lease).
	Bound() clock.Instant
}

// RenewEvery is how often a lease of ttl is renewed.
func RenewEvery(ttl time.Duration) time.Duration { return ttl / 3 }

// CheckEvery is how often a lease that never lapses (zero Deadline) is
// looked at, with Renew: nothing can take its permit away, but an
// operator can revoke it, which Renew then says. Whatever the TTL: its
// holder learns of a revoke within a second. A look that fails, or comes
// late (semrun was stopped), presumes nothing lost.
const CheckEvery = time.Second

// Margin is how much before the lease's end the child must be gone: room
// for clocks that tick at slightly different rates and for the kill to land.
func Margin(ttl time.Duration) time.Duration { return ttl / 10 }

// MaxKillAfter is the longest grace period a lease of ttl allows. After the
// last renewal that succeeded, the next one (at TTL/3) and a window of TTL/6
// for its retries must fit before the child is told to stop, and the SIGKILL
// must land a margin before the lease ends: TTL/3 + TTL/6 + kill-after +
// TTL/10 <= TTL.
func MaxKillAfter(ttl time.Duration) time.Duration { return ttl * 2 / 5 }

// Find finds the file command names, as Run would start it, so that a
// command that cannot be started is refused before any permit is taken.
// It returns a *StartError when it finds none.
func Find(command string) (string, error) {
	if command == "" {
		return "", &StartError{Command: command, NotFound: true, Err: exec.ErrNotFound}
	}
	path, err := exec.LookPath(command)
	if err != nil {
		return "", lookupError(command, err)
	}
	if interp := missingInterpreter(path); interp != "" {
		return "", &StartError{Command: command, NotFound: true, Interpreter: interp,
			Err: &fs.PathError{Op: "exec", Path: interp, Err: fs.ErrNotExist}}
	}
	return path, nil
}

// Run runs the child while lease is held and returns how it ended. It
// returns a *StartError when the child could not be started. ctx ending
// stops the renewals only; the child's end is always waited for.
func Run(ctx context.Context, spec Spec, lease Lease) (Result, error) {
	if spec.Clock == nil {
		spec.Clock = clock.System
	}
	path := spec.Path
	if path == "" {
		var err error
		if path, err = Find(spec.Args[0]); err != nil {
			return Result{}, err
		}
	}
	if err := ready(ctx, spec, lease); err != nil {
		return Result{}, err
	}
	term := newTerminal(spec.Stdin)

	events := make(chan waitEvent, 1)
	// abandoned tells the child's waiter that Run no longer listens: it
	// returned with the child, or what it left, not stopped.
	abandoned := make(chan struct{})
	defer close(abandoned)
	g, err := start(path, spec, term, events, abandoned)
	if err != nil {
		return Result{}, startError(spec.Args[0], err)
	}
	ignoreReserved()
	defer g.close()
	defer term.reclaim()

	s := &supervisor{spec: spec, lease: lease, g: g, term: term, lapses: !lease.Deadline().IsZero()}
	s.startRenewing(ctx)
	s.startBounds()
	defer s.stop()
	return s.run(events), nil
}

// ready makes sure the child starts on a lease it would not at once
// presume lost: a store hands over a fresh one, but it ages if semrun is
// stopped or starved on its way here. An aged lease is renewed once; if
// that fails or comes back late, Run returns ErrStale and starts nothing.
func ready(ctx context.Context, spec Spec, lease Lease) error {
	fresh := func() bool {
		return semaphore.Fresh(lease.Deadline(), lease.Bound(), spec.Clock.Now(), spec.TTL, spec.KillAfter)
	}
	if fresh() {
		return nil
	}
	call, cancel := spec.Clock.WithDeadline(ctx, spec.Clock.Now().Add(spec.TTL/6))
	err := lease.Renew(call)
	cancel()
	if err == nil && fresh() {
		return nil
	}
	if err == nil {
		err = errors.New("its renewal came back late")
	}
	return fmt.Errorf("%w: %w", ErrStale, err)
}

// supervisor is Run's state while the child runs: the channels and alarms
// its one select waits on, and how the child has ended so far. Only Run's
// goroutine touches it; keepAlive, which renews, has its own copy of what
// it needs and reports on lost and renewed.
type supervisor struct {
	spec  Spec
	lease Lease
	// lapses is false for a lease that never ends, which is only looked
	// at (CheckEvery).
	lapses bool
	g      group
	term   *terminal

	// stopRenewing ends keepAlive, which closes renewing as it returns.
	stopRenewing context.CancelFunc
	renewing     chan struct{}
	// stopping is closed once the child is told to stop at its run-out
	// time: keepAlive renews a lease at its bound past that point only
	// then (see keepAlive).
	stopping chan struct{}
	// lost and renewed are keepAlive's reports (lost alone, check's, for
	// a lease that never lapses); nil, which never delivers, once the
	// permit is lost.
	lost    <-chan error
	renewed <-chan struct{}
	// giveUp fires when no renewal succeeded in time, on a clock that
	// counts a suspend of the host: the child is then told to stop. nil
	// when the lease never lapses, and once the permit is lost.
	giveUp *clock.Alarm
	// kill fires once the grace period after SIGTERM is over.
	kill *clock.Alarm
	// ranOut fires at MaxRuntime, or at the lease's bound (bounded), warn
	// at WarnAfter; nil when not asked, and once fired.
	ranOut, warn *clock.Alarm
	bounded      bool
	// lingered fires a moment after the child exited leaving processes in
	// its group, to report them if they are still there (not a setsid on
	// its way out); nil otherwise.
	lingered <-chan time.Time
	// stopCheck fires a moment after the group was killed for a lost
	// permit, to name what is still there, which SIGKILL could not end;
	// killedAt is when the first SIGKILL was sent.
	stopCheck <-chan time.Time
	killedAt  time.Time
	// exited: the child has exited, by itself or not; what is left is
	// what it left in its group.
	exited bool
	res    Result
}

// startRenewing starts keepAlive and the giveUp alarm, for a lease that
// lapses, or check, for one that does not.
func (s *supervisor) startRenewing(ctx context.Context) {
	renewCtx, stop := context.WithCancel(ctx)
	renewing := make(chan struct{})
	s.stopRenewing, s.renewing = stop, renewing
	lost := make(chan error, 1)
	s.lost = lost
	spec, lease := s.spec, s.lease
	if !s.lapses {
		go func() {
			defer close(renewing)
			check(renewCtx, spec, lease, lost)
		}()
		return
	}
	renewed := make(chan struct{}, 1)
	s.renewed = renewed
	s.stopping = make(chan struct{})
	s.giveUp = s.spec.Clock.NewAlarm(lossAt(s.spec, s.lease))
	r := renewals{renewed: renewed, lost: lost, stopped: s.stopping}
	go func() {
		defer close(renewing)
		keepAlive(renewCtx, spec, lease, r)
	}()
}

// stop ends the renewals and waits for keepAlive to return: no renewal,
// nor its warning, outlives Run. No alarm is left set.
func (s *supervisor) stop() {
	s.stopRenewing()
	<-s.renewing
	s.giveUp.Stop()
	s.kill.Stop()
	s.ranOut.Stop()
	s.warn.Stop()
}

// startBounds sets the alarms of MaxRuntime, counted from now, as the
// child has just started, or of the lease's bound when that comes first,
// and of WarnAfter.
func (s *supervisor) startBounds() {
	now := s.spec.Clock.Now()
	var at clock.Instant
	if s.spec.MaxRuntime > 0 {
		at = now.Add(s.spec.MaxRuntime)
	}
	if b := s.lease.Bound(); !b.IsZero() && (at.IsZero() || semaphore.RunsOut(b, s.spec.KillAfter, s.spec.TTL).Before(at)) {
		at, s.bounded = semaphore.RunsOut(b, s.spec.KillAfter, s.spec.TTL), true
	}
	if !at.IsZero() {
		s.ranOut = s.spec.Clock.NewAlarm(at)
	}
	if s.spec.WarnAfter > 0 {
		s.warn = s.spec.Clock.NewAlarm(now.Add(s.spec.WarnAfter))
	}
}

// ranOutOfTime stops the child at MaxRuntime: SIGTERM to its group, and
// SIGKILL after the grace period. The permit stays held, and renewed,
// until the group is gone.
func (s *supervisor) ranOutOfTime() {
	s.ranOut.Stop()
	s.ranOut = nil
	if s.kill != nil || s.res.Terminated || s.res.RanOut || s.res.Lost != nil || !s.killedAt.IsZero() {
		return // being stopped already, or stopped
	}
	if s.lapses && s.lost != nil && until(s.spec.Clock, s.lease.Deadline().Add(-semaphore.BoundMargin(s.spec.TTL)/2)) <= 0 {
		// Reached so late (semrun was stopped) that the lease may have
		// ended: the permit may be another holder's, which is a loss.
		s.onLost(presumedLost(s.spec))
		return
	}
	// A child that exited keeps its status; what it left in its group
	// is stopped all the same.
	s.res.RanOut = !s.exited
	s.res.Bounded = s.res.RanOut && s.bounded
	// The grace period never runs past a lease at its bound: one reached
	// late (semrun was stopped) leaves less of it.
	grace := s.spec.KillAfter
	if s.lapses {
		grace = min(grace, until(s.spec.Clock, s.lease.Deadline().Add(-semaphore.BoundMargin(s.spec.TTL)/2)))
	}
	if grace <= 0 {
		s.killGroup()
	} else {
		s.g.terminate()
		s.kill = s.spec.Clock.NewAlarm(s.spec.Clock.Now().Add(grace))
	}
	s.toldToStop()
}

// toldToStop lets keepAlive renew a lease at its bound past its run-out
// time, now that the child has been told to stop.
func (s *supervisor) toldToStop() {
	select {
	case <-s.stopping:
	default:
		if s.stopping != nil {
			close(s.stopping)
		}
	}
}

// run waits for what happens next, in one select, until the child and what
// it left in its group are gone, and returns how the child ended. Whatever
// woke it, a point where the permit counts as lost that has passed is
// dealt with first (lossFirst): a holder thawed after a freeze (a paused
// VM, its group stopped) finds several things due at once, and the
// command must be stopped before anything else is done or said.
func (s *supervisor) run(events <-chan waitEvent) Result {
	for {
		var next func() (done bool)
		select {
		case sig := <-s.spec.Signals.channel():
			next = func() bool { s.forward(sig); return false }
		case err := <-s.lost:
			next = func() bool {
				if s.res.Lost == nil {
					s.onLost(err)
				}
				return false
			}
		case <-s.renewed:
			next = func() bool {
				// The lease's deadline moved on: so does the point where
				// the permit counts as lost.
				if s.lost != nil {
					s.giveUp.Stop()
					s.giveUp = s.spec.Clock.NewAlarm(lossAt(s.spec, s.lease))
				}
				return false
			}
		case <-alarmC(s.giveUp):
			next = func() bool { s.givingUp(); return false }
		case <-alarmC(s.kill):
			next = func() bool {
				s.kill.Stop() // or the loss's, set as lossFirst ran: the grace is over either way
				s.kill = nil
				s.killGroup()
				return false
			}
		case <-alarmC(s.ranOut):
			next = func() bool { s.ranOutOfTime(); return false }
		case <-alarmC(s.warn):
			next = func() bool {
				s.warn = nil
				if !s.exited && !s.res.Terminated {
					s.spec.Warnf("the command has run for %v (--warn-after)", s.spec.WarnAfter)
				}
				return false
			}
		case ev := <-events:
			// An exit is recorded before the loss point is looked at
			// (childChanged): a command that ended first keeps its status.
			if s.childChanged(ev) {
				return s.res
			}
			continue
		case <-s.lingered:
			next = func() bool {
				s.lingered = nil
				if left, ok := stillInGroup(s.g); ok {
					s.spec.Lingering(s.res.ExitCode, s.res.Signal, left)
				}
				return false
			}
		case <-s.stopCheck:
			next = func() bool {
				s.stopCheck = nil
				return s.gaveUpStopping()
			}
		}
		s.lossFirst()
		if next() {
			return s.res
		}
	}
}

// killGroup kills the child's group for a lost permit, and looks a moment
// later at what is still there.
func (s *supervisor) killGroup() {
	s.g.kill()
	if s.killedAt.IsZero() {
		s.killedAt = time.Now()
		s.stopCheck = time.After(stopLook)
	}
}

// gaveUpStopping tells whether Run must give up the processes SIGKILL did
// not end, and return: it must not wait for them to run out, nor say the
// command was terminated while it runs on. A process that refused the
// signal (it changed its user) is given up at once; one that took it but
// lives on (stuck in the kernel) once stuckFor has passed. Until then, and
// when nothing is left, the wait goes on.
func (s *supervisor) gaveUpStopping() bool {
	if !s.exited && s.g.exited() {
		// The child's end is on its way: its status first.
		s.stopCheck = time.After(stopLook)
		return false
	}
	left := s.g.unstopped(!s.exited)
	if len(left) == 0 {
		return false
	}
	refused := slices.ContainsFunc(left, func(u Unstopped) bool { return u.Err != nil })
	if !refused && time.Since(s.killedAt) < stuckFor {
		s.stopCheck = time.After(stopLook)
		return false
	}
	s.res.Unstopped, s.res.StillRuns = left, !s.exited
	return true
}

// SIGKILL ends a process semrun may signal within milliseconds: the group
// is looked at stopLook after it was sent, and every stopLook after that
// while what is left took the signal; stuckFor after, it is given up.
const (
	stopLook = time.Second
	stuckFor = 5 * time.Second
)

// forward passes sig on to the child's group. SIGTSTP sent to semrun
// itself (not from the terminal, which stops the child's group) must not
// leave the child running while semrun, stopped, cannot renew: the whole
// job stops.
func (s *supervisor) forward(sig os.Signal) {
	if s.g.deliver(sig) && s.term == nil {
		s.term.suspend()
		s.resumed()
	} // else the child's stop comes as an event, handled by childChanged
}

// givingUp runs when giveUp fires: unless a renewal succeeded meanwhile,
// the permit counts as lost.
func (s *supervisor) givingUp() {
	if s.giveUp == nil {
		return // lossFirst saw to it
	}
	if at := lossAt(s.spec, s.lease); until(s.spec.Clock, at) > 0 {
		// A renewal succeeded as the alarm went off: Run has yet to read
		// that it did.
		s.giveUp = s.spec.Clock.NewAlarm(at)
		return
	}
	s.giveUp = nil
	s.overdue()
}

// lossFirst runs overdue when the point where the permit counts as lost
// has passed and nothing has seen to it yet, before whatever woke the
// supervisor is handled: a holder thawed past that point stops its command
// first. Past its MaxRuntime too, the permit counts as lost all the same
// (112, not 124): the command may have run without it, which says more.
func (s *supervisor) lossFirst() {
	if s.giveUp == nil || until(s.spec.Clock, lossAt(s.spec, s.lease)) > 0 {
		return // it never lapses, it is lost already, or not yet due
	}
	s.giveUp.Stop()
	s.giveUp = nil
	s.overdue()
}

// overdue runs when the point where the permit counts as lost has passed.
// A lease that lasts to its bound is held until then: the command has
// reached its run-out time, or passed it while semrun could not look (it
// was stopped), and is stopped as at its max runtime, the SIGKILL landing
// before the lease lapses (a stop under way goes on). Otherwise the
// permit counts as lost.
func (s *supervisor) overdue() {
	if d := s.lease.Deadline(); semaphore.Capped(d, s.lease.Bound(), s.spec.TTL) && until(s.spec.Clock, d.Add(-semaphore.BoundMargin(s.spec.TTL)/2)) > 0 {
		s.ranOutOfTime()
		return
	}
	s.onLost(presumedLost(s.spec))
}

// onLost ends the renewals and, unless the child is to continue, tells it
// to stop: SIGTERM, and SIGKILL when the grace period is over.
func (s *supervisor) onLost(err error) {
	s.lost, s.renewed = nil, nil
	s.giveUp.Stop()
	s.giveUp = nil
	s.stopRenewing()
	s.res.Lost = err
	if s.spec.OnLost == Continue {
		s.spec.Warnf("permit lost: %s; the command runs on without it", LostWhy(err))
		return
	}
	exited := s.exited || s.g.exited()
	// The command ended by itself before the loss was seen (semrun was
	// stopped past the loss point, say): its status is its own. What it
	// left in its group is stopped all the same, and said after the stop.
	if !exited {
		s.res.Terminated = true
	}
	// The grace period never runs past the lease: a loss noticed late
	// (semrun was stopped, a timer fired late) leaves less of it.
	grace := s.spec.KillAfter
	if s.lapses {
		grace = min(grace, until(s.spec.Clock, s.lease.Deadline().Add(-Margin(s.spec.TTL))))
	}
	if grace <= 0 {
		s.killGroup()
	} else {
		s.g.terminate()
		s.kill.Stop() // a stop at MaxRuntime may be under way: the loss's grace counts
		s.kill = s.spec.Clock.NewAlarm(s.spec.Clock.Now().Add(grace))
	}
	if exited {
		s.spec.Warnf("permit lost: %s; the command had already exited, and its status is kept", LostWhy(err))
	}
}

// resumed runs when semrun is continued after the job was suspended:
// past the point where the permit counts as lost, the child is stopped
// before it can run on next to a new holder.
func (s *supervisor) resumed() {
	s.lossFirst()
	s.term.resume(s.g)
}

// childChanged handles a change of the child's state, and tells whether
// Run is done: the child exited and left nothing in its group.
func (s *supervisor) childChanged(ev waitEvent) (done bool) {
	if ev.stopped {
		// Suspended from the terminal: suspend the job as a whole.
		s.term.suspend()
		s.resumed()
		ev.resumed <- struct{}{}
		return false
	}
	if ev.groupGone {
		return true
	}
	if s.res.Lost != nil && s.spec.OnLost == Terminate {
		// What the child left in its group must not outlive the lease either.
		s.killGroup()
	}
	s.exited = true
	s.res.ExitCode, s.res.Signal = ev.status.ExitStatus(), 0
	if ev.status.Signaled() {
		s.res.ExitCode, s.res.Signal = -1, ev.status.Signal()
	}
	// Its exit came first, but the loss point may have passed (semrun was
	// stopped, say): said all the same, the status kept.
	s.lossFirst()
	// A lingering child left processes in its group (work it put in the
	// background): the permit stays held, and renewed, until they are gone
	// too, and semrun exits with the child's status then.
	if ev.lingering && waitsForGroup && s.spec.Lingering != nil {
		s.lingered = time.After(lingerReport)
	}
	return !ev.lingering
}

// lingerReport is how long processes a child left in its group must stay
// there to be reported: one on its way out (setsid, exit) is not.
const lingerReport = 50 * time.Millisecond

// Process is one process a command left behind.
type Process struct {
	PID  int
	Name string
}

// maxLeftShown bounds the processes a lingering command's report lists.
const maxLeftShown = 3

func startError(command string, err error) error {
	notFound := errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist)
	return &StartError{Command: command, NotFound: notFound, Err: err}
}

// lookupError is startError for a command PATH did not give. A bare name
// found there, but not executable (a directory, say), is 126, as env(1)
// and timeout(1) say, not 127. (A file found and executable whose exec
// fails, for a missing interpreter, is startError's.)
func lookupError(command string, err error) error {
	if errors.Is(err, exec.ErrNotFound) {
		if path, ok := foundInPath(command); ok {
			err = &fs.PathError{Op: "exec", Path: path, Err: notExecutable(path)}
		}
	}
	return startError(command, err)
}

// foundInPath finds a bare command name in PATH as execvp(3) would, but
// among files that are not executable too.
func foundInPath(command string) (string, bool) {
	if command == "" || strings.ContainsRune(command, os.PathSeparator) {
		return "", false
	}
	for _, dir := range filepath.SplitList(os.Getenv("PATH")) {
		if dir == "" {
			dir = "."
		}
		path := filepath.Join(dir, command)
		if _, err := os.Stat(path); err == nil {
			return path, true
		}
	}
	return "", false
}

// notExecutable says why path, which exists, cannot be run.
func notExecutable(path string) error {
	if fi, err := os.Stat(path); err == nil && fi.IsDir() {
		return syscall.EISDIR
	}
	return fs.ErrPermission
}

// lossAt is when the child must be told to stop if no renewal succeeds
// before: early enough that SIGKILL lands before the lease could end.
func lossAt(spec Spec, lease Lease) clock.Instant {
	d, b := lease.Deadline(), lease.Bound()
	if semaphore.Capped(d, b, spec.TTL) {
		// Renewed no further, it lasts until the command, stopped at its
		// run-out time, is gone (overdue).
		return semaphore.RunsOut(b, spec.KillAfter, spec.TTL)
	}
	return d.Add(-spec.KillAfter - Margin(spec.TTL))
}

// LostWhy says why a permit counts as lost, in the user's words: the
// store's own word that it is gone, or no renewal in time.
func LostWhy(err error) string {
	var ended *semaphore.HoldEndedError
	var revoked *semaphore.RevokedError
	switch {
	case errors.As(err, &ended):
		return "the " + ended.Error()
	case errors.As(err, &revoked) && revoked.Reason != "":
		return "an operator revoked it: " + semaphore.Clip(revoked.Reason, semaphore.MaxReason)
	case errors.As(err, &revoked):
		return "an operator revoked it"
	}
	if errors.Is(err, semaphore.ErrLost) && !errors.Is(err, ErrPresumedLost) {
		return "the store no longer has it (it lapsed, or the store lost its data)"
	}
	return err.Error()
}

func presumedLost(spec Spec) error {
	return fmt.Errorf("%w (%v without a successful renewal)", ErrPresumedLost, spec.TTL-spec.KillAfter-Margin(spec.TTL))
}

// alarmC is a's channel; nil, which never delivers, for no alarm.
func alarmC(a *clock.Alarm) <-chan struct{} {
	if a == nil {
		return nil
	}
	return a.C
}

// renewals are where keepAlive reports, and what it waits for past the
// point where the permit counts as lost.
type renewals struct {
	// renewed is told after each renewal that succeeded; lost, once,
	// that the permit is gone, or, when asked, presumed lost.
	renewed chan<- struct{}
	lost    chan<- error
	// stopped is closed once the command has been told to stop at its
	// run-out time (Run), or from the start where there is none (Keep).
	stopped <-chan struct{}
	// ask: past the loss point, whether the permit lives is the store's
	// to say, with a renewal bounded by AskFor: a keeper's, which has no
	// command to stop, and may have kept its permit through the steps
	// under its hold while it could not renew (it was frozen, say). Its
	// answer that the permit is gone, or none in time, is a loss (lost).
	ask bool
}

// AskFor is how long a keeper past its loss point waits for the store to
// answer whether its permit lives, with a lease of ttl: as long as Run
// gives the renewal of a lease that aged before its command could start.
func AskFor(ttl time.Duration) time.Duration { return RenewEvery(ttl) / 2 }

// keepAlive renews the lease every RenewEvery(TTL), and retries a failed
// renewal sooner, until ctx ends. It says renewed after each renewal that
// succeeded, and lost, once, when the store says the permit is gone. When
// to give up is Run's to decide (a keeper's, r.ask, is its own). It waits on alarms of spec.Clock, as Run
// does: where that clock counts a suspend of the host, a renewal due while
// the host slept is tried as soon as it wakes.
//
// Past the point where the permit counts as lost (lossAt), the command is
// stopped before anything else (a holder thawed there wakes with the
// renewal due too): keepAlive then sends nothing and says nothing. A lease
// that lapses is lost there, and Run's stop ends the renewals; one at its
// bound, renewed no further, is renewed on once the command has been told
// to stop (r.stopped), to learn whether it ended. A keeper, which has no
// command, asks the store instead (r.ask).
func keepAlive(ctx context.Context, spec Spec, lease Lease, r renewals) {
	clk := spec.Clock
	every := RenewEvery(spec.TTL)
	// Never so late that the child must be told to stop before a renewal
	// was tried: a lease handed over with little left is renewed at once.
	// A lease at its bound is renewed no further: its renewals only learn
	// whether it ended.
	capped := func() bool { return semaphore.Capped(lease.Deadline(), lease.Bound(), spec.TTL) }
	onTime := func() time.Duration {
		if capped() {
			return every
		}
		return min(every, until(clk, lossAt(spec, lease))/2)
	}
	next := onTime()
	// failed counts the renewals that failed in a row: the first is said,
	// and the one that works again, not each retry between.
	failed := 0
	for {
		due := clk.NewAlarm(clk.Now().Add(max(next, 0)))
		select {
		case <-ctx.Done():
			due.Stop()
			return
		case <-due.C:
		}
		// The call must end before the child has to be told to stop, or
		// at a bound, before the lease lapses; a keeper's question, within
		// AskFor.
		end := lossAt(spec, lease)
		asking := false
		if until(clk, end) <= 0 {
			switch {
			case r.ask:
				asking, end = true, clk.Now().Add(AskFor(spec.TTL))
			case !capped():
				<-ctx.Done() // lost: Run stops the command, and then this
				return
			default:
				select {
				case <-ctx.Done():
					return
				case <-r.stopped:
				}
				if ctx.Err() != nil {
					return
				}
			}
		}
		if !asking && capped() {
			end = lease.Deadline().Add(-semaphore.BoundMargin(spec.TTL) / 2)
		}
		call, cancel := clk.WithDeadline(ctx, end)
		err := lease.Renew(call)
		cancel()
		switch {
		case err == nil:
			if failed > 0 {
				spec.Warnf("renewal succeeded again, after %s", semaphore.Count(failed, "failed attempt"))
				failed = 0
			}
			next = onTime()
			select {
			case r.renewed <- struct{}{}:
			default: // Run has yet to read the last one, which says as much
			}
		case errors.Is(err, semaphore.ErrLost):
			r.lost <- err
			return
		case ctx.Err() != nil:
			return
		case asking:
			r.lost <- fmt.Errorf("%w: the store did not say within %v that it lives: %w", ErrPresumedLost, AskFor(spec.TTL), err)
			return
		case !capped() && until(clk, lossAt(spec, lease)) <= 0:
			// Sent before the loss point, failed after it: nothing said,
			// and the next turn does what the loss point calls for.
			next = 0
		default:
			if failed == 0 {
				spec.Warnf("renewal failed, retrying until the permit counts as lost: %v", err)
			}
			failed++
			// At least three more tries fit before the child must stop.
			next = max(min(spec.TTL/12, until(clk, lossAt(spec, lease))/3), 50*time.Millisecond)
			if capped() {
				next = every
			}
		}
	}
}

// check looks at a lease that never lapses every CheckEvery until ctx
// ends, and says lost, once, when the store says the permit is gone (an
// operator revoked it). A look that fails is said once, and once more
// when one works again; it changes nothing else.
func check(ctx context.Context, spec Spec, lease Lease, lost chan<- error) {
	clk := spec.Clock
	failed := false
	for {
		due := clk.NewAlarm(clk.Now().Add(CheckEvery))
		select {
		case <-ctx.Done():
			due.Stop()
			return
		case <-due.C:
		}
		// Half the period: a look ends before the next is due, so that
		// two never overlap, nor do their alarms fall at one instant.
		call, cancel := clk.WithDeadline(ctx, clk.Now().Add(CheckEvery/2))
		err := lease.Renew(call)
		cancel()
		switch {
		case errors.Is(err, semaphore.ErrLost):
			lost <- err
			return
		case ctx.Err() != nil:
			return
		case err != nil && !failed:
			failed = true
			spec.Warnf("could not look at the permit, which stays held (a revoke goes unseen until a look works): %v", err)
		case err == nil && failed:
			failed = false
			spec.Warnf("the permit can be looked at again")
		}
	}
}

// until is how long until at on c; negative once at has passed.
func until(c clock.Clock, at clock.Instant) time.Duration { return at.Sub(c.Now()) }
