package runner

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/semrun/semrun/internal/semaphore"
)

// Signals are the signals semrun catches, from before its wait for a
// permit until it exits. What each does is decided here and in roleOf:
// while semrun waits (Wait), one that would end semrun ends the wait, a
// stop (Ctrl-Z) leaves the line until semrun is continued, and the rest (a
// resized terminal, a status request, a closed pipe) change nothing; while
// the command runs (Run), they are forwarded to its process group. They
// stay caught until semrun exits: one that comes after the command has
// exited must not change the exit status, and a signal.Stop would cost a
// round trip to the runtime's signal thread for each signal.
type Signals struct {
	c <-chan os.Signal
	// suspend stops semrun as a job-control stop does (the shell sees the
	// job stopped) and returns once semrun is continued.
	suspend func()
}

// CatchSignals asks for every signal semrun catches. Call it once, before
// anything else asks for signals: a SIGHUP or SIGINT semrun started with
// ignored stays ignored, for semrun and the command.
func CatchSignals() *Signals {
	c := make(chan os.Signal, 16)
	// A round trip to the runtime's signal thread per signal (46 on
	// Linux): about 1.3ms of a run on a 2-CPU VM.
	signal.Notify(c, caught()...)
	return &Signals{c: c, suspend: (*terminal)(nil).suspend}
}

// channel is s's signals; nil, which never delivers, for no Signals.
func (s *Signals) channel() <-chan os.Signal {
	if s == nil {
		return nil
	}
	return s.c
}

// role is what a caught signal does.
type role int

const (
	// ends ends a wait, and is forwarded to the command's group.
	ends role = iota
	// informs is forwarded, but does not end a wait: a resized terminal,
	// a status request.
	informs
	// stops suspends the whole job (Ctrl-Z): a waiter leaves the line
	// until it is continued; the command's group is stopped with semrun.
	stops
	// ownWrites is caught only so that semrun's writes to a closed pipe
	// fail instead of killing it: it neither ends a wait nor is forwarded,
	// since semrun cannot tell a kill from its own write.
	ownWrites
)

// Waiting is how Wait asks for a permit.
type Waiting struct {
	// Acquire asks once, until a permit is granted, ctx ends or it fails.
	Acquire func(ctx context.Context) (semaphore.Lease, error)
	// GiveBack releases a permit granted as the wait ended; required.
	GiveBack func(semaphore.Lease)
	// Stopping, when set, is called before semrun stops (Ctrl-Z) while it
	// waits: the shell then says the job stopped, on a clean line.
	Stopping func()
}

// Interrupted means a signal ended the wait for a permit: nothing is held.
type Interrupted struct{ Signal syscall.Signal }

func (e *Interrupted) Error() string {
	return fmt.Sprintf("%s while waiting for a permit", SignalName(e.Signal))
}

// Wait calls w.Acquire until it returns, and returns what it returned,
// unless a signal that ends the wait comes first: it then returns an
// *Interrupted, nothing held. A stopped waiter (Ctrl-Z) must not keep
// others waiting: it leaves the line, and asks again when continued. ctx
// ending ends the wait through w.Acquire, which returns its error.
func (s *Signals) Wait(ctx context.Context, w Waiting) (semaphore.Lease, error) {
	t := startTry(ctx, w.Acquire)
	for {
		select {
		case a := <-t.done:
			t.cancel()
			return a.lease, a.err
		case sig := <-s.channel():
			switch roleOf(sig) {
			case informs, ownWrites:
				continue
			case stops:
				t.giveUp(w.GiveBack)
				if w.Stopping != nil {
					w.Stopping()
				}
				s.suspend()
				t = startTry(ctx, w.Acquire)
				continue
			}
			t.giveUp(w.GiveBack)
			return nil, &Interrupted{Signal: sig.(syscall.Signal)}
		}
	}
}

// try is one Acquire under way, in a goroutine of its own so that a signal
// can end the wait.
type try struct {
	done   chan acquired
	cancel context.CancelFunc
}

// acquired is what one Acquire returned.
type acquired struct {
	lease semaphore.Lease
	err   error
}

func startTry(ctx context.Context, acquire func(context.Context) (semaphore.Lease, error)) *try {
	ctx, cancel := context.WithCancel(ctx)
	t := &try{done: make(chan acquired, 1), cancel: cancel}
	go func() {
		lease, err := acquire(ctx)
		t.done <- acquired{lease, err}
	}()
	return t
}

// giveUp ends the try, and gives back a permit granted as it ended.
func (t *try) giveUp(giveBack func(semaphore.Lease)) {
	t.cancel()
	if a := <-t.done; a.err == nil {
		giveBack(a.lease)
	}
}

// Hangup is SIGHUP, which a hold's keeper stops on too (UntilStopped).
var Hangup os.Signal = syscall.SIGHUP

// UntilStopped catches what stops a process of semrun's own that serves
// until stopped (metrics --listen, a hold's keeper): SIGTERM, and SIGINT
// unless semrun started with it ignored (nohup), and also. stopped
// receives the first; stop ends the catch.
func UntilStopped(also ...os.Signal) (stopped <-chan os.Signal, stop func()) {
	c := make(chan os.Signal, 1)
	stoppers := append([]os.Signal{syscall.SIGTERM}, also...)
	if !signal.Ignored(os.Interrupt) {
		stoppers = append(stoppers, os.Interrupt)
	}
	signal.Notify(c, stoppers...)
	return c, func() { signal.Stop(c) }
}
