package cmd

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
)

// run runs the command under a permit of store.
func (o *runOptions) run(ctx context.Context, store semaphore.Store, log *logger) error {
	// Signals are caught from before the wait, so one that arrives while
	// waiting ends the wait, and none is lost between wait and child.
	signals := runner.CatchSignals()

	began := time.Now()
	var waitUntil time.Time
	if o.timeout > 0 {
		waitUntil = began.Add(o.timeout)
	}
	for {
		lease, err := o.acquireAll(ctx, store, signals, log, waitUntil)
		if err != nil {
			return err
		}
		tokens := semaphore.TokensOf(lease)
		if several, ok := lease.(*semaphore.Several); ok && o.lostPolicy() == runner.Continue {
			// The command runs on without a lost key: the others stay held.
			several.KeepOthers(func(lost *semaphore.KeyError) {
				log.Warnf("key %q: permit lost: %s; the command runs on without it, the other keys held", lost.Key, runner.LostWhy(lost.Err))
			})
		}
		if len(tokens) == 1 {
			log.Infof("key %q: permit held after %v, fencing token %d%s", o.key, time.Since(began).Round(time.Millisecond), tokens[0], slotsText(lease))
		} else {
			log.Infof("%s: permits held after %v, fencing tokens %s%s", o.keysText(), time.Since(began).Round(time.Millisecond), tokensText(tokens), slotsText(lease))
		}
		started := time.Now()
		res, runErr := runner.Run(ctx, o.spec(lease, tokens, o.ttl, signals, log), lease)
		if errors.Is(runErr, runner.ErrStale) {
			// Nothing ran: semrun was held up between the grant and the
			// start. The permit goes back and the wait goes on.
			log.Warnf("%s: %v; waiting again", o.keysText(), runErr)
			o.release(ctx, lease, log)
			continue
		}
		return o.ran(ctx, lease, res, runErr, started, log)
	}
}

// spec is how the runner runs the command under lease, with the keys'
// tokens, a lease of ttl, and the signals caught.
func (o *runOptions) spec(lease semaphore.Lease, tokens []int64, ttl time.Duration, signals *runner.Signals, log *logger) runner.Spec {
	return runner.Spec{
		Args: o.command, Path: o.path, Env: o.childEnv(o.f.Environ, tokens, semaphore.SlotsOf(lease)), Inherit: lease.Files(),
		Stdin: fileOf(o.f.Streams.In), Stdout: fileOf(o.f.Streams.Out), Stderr: fileOf(o.f.Streams.ErrOut),
		TTL: ttl, KillAfter: o.killAfter, OnLost: o.lostPolicy(), MaxRuntime: o.maxRuntime, WarnAfter: o.warnAfter,
		Signals: signals, Warnf: log.Warnf, ReapOrphans: o.f.ReapOrphans,
		Lingering: func(status int, sig syscall.Signal, left []runner.Process) { o.lingering(log, status, sig, left) },
	}
}

// lostPolicy is --on-lost's.
func (o *runOptions) lostPolicy() runner.OnLost {
	if o.onLost == "continue" {
		return runner.Continue
	}
	return runner.Terminate
}

// ran says how the command ended, gives the permit back, and returns the
// status semrun exits with.
func (o *runOptions) ran(ctx context.Context, lease semaphore.Lease, res runner.Result, runErr error, started time.Time, log *logger) error {
	if runErr == nil {
		ended := fmt.Sprintf("exited with status %d", res.ExitCode)
		switch {
		case res.StillRuns:
			ended = "could not be stopped"
		case res.Signal != 0:
			ended = "was killed by " + runner.SignalName(res.Signal)
		}
		log.Infof("%s: the command %s after %v", o.keysText(), ended, time.Since(started).Round(time.Millisecond))
	}

	if runErr != nil {
		o.release(ctx, lease, log) // nothing ran: nothing to cool
		return runErr
	}
	o.finish(ctx, lease, commandStatus(res), log)
	if res.Terminated {
		code := o.lostExitCode
		var ended *semaphore.HoldEndedError
		var revoked *semaphore.RevokedError
		switch {
		case errors.As(res.Lost, &revoked) || (errors.As(res.Lost, &ended) && ended.End.State == semaphore.HoldRevoked):
			code = o.revokedExitCode
		case errors.As(res.Lost, &ended) && holdEndCode(ended.End, 0) != 0:
			code = holdEndCode(ended.End, 0) // max runtime
		}
		return &lostError{key: lostKey(o.key, lease, res.Lost), code: code, cause: res.Lost, unstopped: res.Unstopped}
	}
	if res.RanOut {
		return &ranOutError{key: o.key, maxRuntime: o.maxRuntime, unstopped: res.Unstopped}
	}
	if len(res.Unstopped) > 0 {
		// The command had ended by itself, and keeps its status; what it
		// left did not stop.
		log.Warnf("key %q: %s", o.key, couldNotStop(res.Unstopped))
	}
	return &childExit{code: res.ExitCode, sig: res.Signal}
}

// lostKey is the key whose permit was lost: the one the loss names, else,
// of several, the one whose lease lapses first, else key.
func lostKey(key string, lease semaphore.Lease, lost error) string {
	var one *semaphore.KeyError
	if errors.As(lost, &one) {
		return one.Key
	}
	if several, ok := lease.(*semaphore.Several); ok {
		return several.Lapsing()
	}
	return key
}

// tokensText says the tokens of the keys: "7", or "7, 12".
func tokensText(tokens []int64) string {
	s := make([]string, len(tokens))
	for i, t := range tokens {
		s[i] = strconv.FormatInt(t, 10)
	}
	return strings.Join(s, ", ")
}

// lingering says, once, that the command exited but left processes in its
// group, which keep the permit: on a terminal, where someone waits for the
// prompt, and with --verbose.
func (o *runOptions) lingering(log *logger, status int, sig syscall.Signal, left []runner.Process) {
	ended := fmt.Sprintf("status %d", status)
	if sig != 0 {
		ended = runner.SignalName(sig)
	}
	what := "processes"
	if len(left) > 0 {
		var procs []string
		for _, p := range left {
			procs = append(procs, fmt.Sprintf("%d (%s)", p.PID, p.Name))
		}
		what = strings.Join(procs, ", ")
	}
	say := log.Infof
	if o.f.Streams.ErrTerminal != nil && !o.quiet {
		say = log.Warnf
	}
	say("key %q: the command exited (%s) but left %s in its process group, which keep the permit until they end (start work that should outlive it with setsid)", o.key, ended, what)
}

// commandStatus is how the command ended, as a shell says it: its status,
// 128+N for a signal N; -1 when it did not end.
func commandStatus(res runner.Result) int {
	switch {
	case res.StillRuns:
		return -1
	case res.Signal != 0:
		return 128 + int(res.Signal)
	}
	return res.ExitCode
}

// release gives back a permit no command ran under.
func (o *waitOptions) release(ctx context.Context, lease semaphore.Lease, log *logger) {
	o.giveBack(ctx, func(ctx context.Context) error { return lease.Release(ctx) }, log)
}

// finish gives the permit back once its command ended with status (see
// commandStatus): with --min-hold, it stays taken until then.
func (o *runOptions) finish(ctx context.Context, lease semaphore.Lease, status int, log *logger) {
	o.giveBack(ctx, func(ctx context.Context) error { return lease.Finish(ctx, status) }, log)
	if o.minHold > 0 && o.req.MinHoldAfter.Cools(status) {
		log.Infof("key %q: it stays taken until %v after its grant (--min-hold)", o.key, o.minHold)
	}
}

// releaseTimeout bounds a release: see giveBack.
const releaseTimeout = 2 * time.Second

// giveBack gives the permit back with let. A failed release never changes
// the exit status: the permit frees itself within the TTL. It gets little
// time, since whoever waits for semrun should not wait for a store that
// does not answer.
func (o *waitOptions) giveBack(ctx context.Context, let func(context.Context) error, log *logger) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(o.connectTimeout, releaseTimeout))
	defer cancel()
	if err := let(ctx); err != nil {
		log.Warnf("%v; the permit frees itself within %v", err, o.ttl)
		return
	}
	if o.set("handle") {
		log.Infof("key %q: left the hold, which keeps the permit", o.key)
		return
	}
	if len(o.keys) > 1 {
		log.Infof("%s: permits released", o.keysText())
		return
	}
	log.Infof("key %q: permit released", o.key)
}
