// Package runner runs a command while a semaphore lease is held: it starts
// the child in its own process group, forwards signals to that group, renews
// the lease, and stops the child before the store could give its seat away.
package runner

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
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
	// which suspends the whole job: semrun and the child's group.
	Signals <-chan os.Signal
	// Warnf receives warnings: a lost permit with Continue, failed renewals.
	Warnf func(format string, args ...any)
}

// Result is how the child ended.
type Result struct {
	// ExitCode is the child's exit status when it exited by itself.
	ExitCode int
	// Signal is the signal that ended the child, 0 when it exited.
	Signal syscall.Signal
	// Lost is why the permit was lost while the child ran; nil if it was not.
	Lost error
	// Terminated is true when the child was stopped because of Lost.
	Terminated bool
}

// StartError means the child could not be started.
type StartError struct {
	Command string
	// NotFound distinguishes "no such command" from "cannot execute".
	NotFound bool
	Err      error
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
// about to give the seat away, so the permit counts as lost.
var ErrPresumedLost = errors.New("no renewal succeeded in time")

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
	// Deadline is the instant at which the store may give the seat away,
	// on a clock that counts a suspend of the host; zero when it never does.
	Deadline() clock.Instant
	// Renew extends the lease; an error wrapping semaphore.ErrLost means
	// the permit is gone, any other leaves it in doubt.
	Renew(ctx context.Context) error
}

// RenewEvery is how often a lease of ttl is renewed.
func RenewEvery(ttl time.Duration) time.Duration { return ttl / 3 }

// Margin is how much before the lease's end the child must be gone: room
// for clocks that tick at slightly different rates and for the kill to land.
func Margin(ttl time.Duration) time.Duration { return ttl / 10 }

// MaxKillAfter is the longest grace period a lease of ttl allows. After the
// last renewal that succeeded, the next one (at TTL/3) and a window of TTL/6
// for its retries must fit before the child is told to stop, and the SIGKILL
// must land a margin before the lease ends: TTL/3 + TTL/6 + kill-after +
// TTL/10 <= TTL.
func MaxKillAfter(ttl time.Duration) time.Duration { return ttl * 2 / 5 }

// Check tells whether command can be started, so that a command that
// cannot is refused before any permit is taken. It returns a *StartError.
func Check(command string) error {
	if command == "" {
		return &StartError{Command: command, NotFound: true, Err: exec.ErrNotFound}
	}
	if _, err := exec.LookPath(command); err != nil {
		return startError(command, err)
	}
	return nil
}

// Run runs the child while lease is held and returns how it ended. It
// returns a *StartError when the child could not be started. ctx ending
// stops the renewals only; the child's end is always waited for.
func Run(ctx context.Context, spec Spec, lease Lease) (Result, error) {
	path, err := exec.LookPath(spec.Args[0])
	if err != nil {
		return Result{}, startError(spec.Args[0], err)
	}
	term := newTerminal(spec.Stdin)

	events := make(chan waitEvent, 1)
	g, err := start(path, spec, term, events)
	if err != nil {
		return Result{}, startError(spec.Args[0], err)
	}
	defer g.close()
	defer term.reclaim()

	renewCtx, stopRenewing := context.WithCancel(ctx)
	lost := make(chan error, 1)
	renewed := make(chan struct{}, 1)
	renewing := make(chan struct{})
	// giveUp fires when no renewal succeeded in time, on a clock that
	// counts a suspend of the host: the child is then told to stop.
	var giveUp *clock.Alarm
	lapses := !lease.Deadline().IsZero() // a lease that never lapses needs no renewal
	if !lapses {
		close(renewing)
	} else {
		giveUp = clock.NewAlarm(lossAt(spec, lease))
		go func() {
			defer close(renewing)
			keepAlive(renewCtx, spec, lease, renewed, lost)
		}()
	}
	defer func() {
		stopRenewing()
		<-renewing // no renewal, nor its warning, outlives Run
		giveUp.Stop()
	}()

	var res Result
	var kill *clock.Alarm
	defer func() { kill.Stop() }()
	onLost := func(err error) {
		lost, renewed = nil, nil
		giveUp.Stop()
		giveUp = nil
		stopRenewing()
		res.Lost = err
		if spec.OnLost == Continue {
			spec.Warnf("permit lost (%v); the command runs on without it", err)
			return
		}
		res.Terminated = true
		// The grace period never runs past the lease: a loss noticed late
		// (semrun was stopped, a timer fired late) leaves less of it.
		grace := spec.KillAfter
		if lapses {
			grace = min(grace, clock.Until(lease.Deadline().Add(-Margin(spec.TTL))))
		}
		if grace <= 0 {
			g.kill()
			return
		}
		g.terminate()
		kill = clock.NewAlarm(clock.Now().Add(grace))
	}
	// resumed runs when semrun is continued after the job was suspended:
	// past the point where the permit counts as lost, the child is stopped
	// before it can run on next to a new holder.
	resumed := func() {
		if lost != nil && lapses && clock.Now().After(lossAt(spec, lease)) {
			onLost(presumedLost(spec))
		}
		term.resume(g)
	}
	for {
		select {
		case sig := <-spec.Signals:
			// SIGTSTP sent to semrun itself (not from the terminal, which
			// stops the child's group) must not leave the child running
			// while semrun, stopped, cannot renew: the whole job stops.
			if g.deliver(sig) && term == nil {
				term.suspend()
				resumed()
			} // else the child's stop comes as an event, handled below
		case err := <-lost:
			onLost(err)
		case <-renewed:
			giveUp.Stop()
			giveUp = clock.NewAlarm(lossAt(spec, lease))
		case <-alarmC(giveUp):
			if at := lossAt(spec, lease); clock.Until(at) > 0 {
				// A renewal succeeded as the alarm went off: Run has yet
				// to read that it did.
				giveUp = clock.NewAlarm(at)
				continue
			}
			onLost(presumedLost(spec))
		case <-alarmC(kill):
			kill = nil
			g.kill()
		case ev := <-events:
			if ev.stopped {
				// Suspended from the terminal: suspend the job as a whole.
				term.suspend()
				resumed()
				ev.resumed <- struct{}{}
				continue
			}
			if ev.groupGone {
				return res, nil
			}
			if res.Terminated {
				// What the child left in its group must not outlive the lease either.
				g.kill()
			}
			res.ExitCode, res.Signal = ev.status.ExitStatus(), 0
			if ev.status.Signaled() {
				res.ExitCode, res.Signal = -1, ev.status.Signal()
			}
			if ev.lingering {
				// The child left processes in its group (work it put in
				// the background): the permit stays held, and renewed,
				// until they are gone too, and semrun exits with the
				// child's status then.
				continue
			}
			return res, nil
		}
	}
}

func startError(command string, err error) error {
	return &StartError{
		Command:  command,
		NotFound: errors.Is(err, exec.ErrNotFound) || errors.Is(err, fs.ErrNotExist),
		Err:      err,
	}
}

// lossAt is when the child must be told to stop if no renewal succeeds
// before: early enough that SIGKILL lands before the lease could end.
func lossAt(spec Spec, lease Lease) clock.Instant {
	return lease.Deadline().Add(-spec.KillAfter - Margin(spec.TTL))
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

// keepAlive renews the lease every RenewEvery(TTL), and retries a failed
// renewal sooner, until ctx ends. It says renewed after each renewal that
// succeeded, and lost, once, when the store says the permit is gone. When
// to give up is Run's to decide.
func keepAlive(ctx context.Context, spec Spec, lease Lease, renewed chan<- struct{}, lost chan<- error) {
	every := RenewEvery(spec.TTL)
	// Never so late that the child must be told to stop before a renewal
	// was tried: a lease handed over with little left is renewed at once.
	onTime := func() time.Duration { return min(every, clock.Until(lossAt(spec, lease))/2) }
	next := onTime()
	for {
		t := time.NewTimer(max(next, 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
		// The call must end before the child has to be told to stop.
		call, cancel := clock.WithDeadline(ctx, lossAt(spec, lease))
		err := lease.Renew(call)
		cancel()
		switch {
		case err == nil:
			next = onTime()
			select {
			case renewed <- struct{}{}:
			default: // Run has yet to read the last one, which says as much
			}
		case errors.Is(err, semaphore.ErrLost):
			lost <- err
			return
		case ctx.Err() != nil:
			return
		default:
			spec.Warnf("renewal failed, retrying: %v", err)
			// At least three more tries fit before the child must stop.
			next = max(min(spec.TTL/12, clock.Until(lossAt(spec, lease))/3), 50*time.Millisecond)
		}
	}
}
