package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
)

// acquire waits for a permit until one is held, until passes (--timeout;
// zero for no bound), or a signal arrives.
func (o *runOptions) acquire(ctx context.Context, store semaphore.Store, signals *runner.Signals, log *logger, until time.Time) (semaphore.Lease, error) {
	host, _ := os.Hostname()
	req := o.req
	req.Holder = semaphore.HolderInfo{Host: host, PID: os.Getpid(), Command: filepath.Base(o.command[0]), MaxRuntime: o.maxRuntime, Label: o.req.Holder.Label}
	// On a terminal a person watches: one line, kept up to date. Elsewhere
	// (cron) only --verbose says it, once.
	var line *waitLine
	defer func() { line.clear() }()
	var onWait func(semaphore.WaitState)
	switch {
	case !o.quiet && o.f.Streams.ErrTerminal != nil:
		line = newWaitLine(o.f.Streams.ErrOut, o.f.Streams.ErrTerminal, o.key)
		onWait = line.update
	case o.verbose:
		var once sync.Once
		onWait = func(st semaphore.WaitState) {
			once.Do(func() { log.Infof("%s", waitText(o.key, st, -1)) })
		}
	}
	// A restart fence that holds the grant back is said once, terminal or
	// not: a cron job that waits for it must not wait without a word. On a
	// terminal the waiting line says it.
	fence := &fenceNotice{o: o, log: log, quiet: o.quiet || line != nil}
	req.OnWait = func(st semaphore.WaitState) {
		fence.saw(st.Fenced, req.NoWait)
		// A --no-wait run hears only of a fence it waits out, which the
		// warning says: it stands in no line to show.
		if onWait != nil && !req.NoWait {
			onWait(st)
		}
	}
	waitCtx := ctx
	if !until.IsZero() {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithDeadline(ctx, until)
		defer cancel()
	}
	lease, err := signals.Wait(waitCtx, runner.Waiting{
		Acquire:  func(ctx context.Context) (semaphore.Lease, error) { return store.Acquire(ctx, req) },
		GiveBack: func(lease semaphore.Lease) { o.release(ctx, lease, log) },
		Stopping: line.clear,
	})
	var interrupted *runner.Interrupted
	if errors.As(err, &interrupted) {
		return nil, &interruptedError{key: o.key, sig: interrupted.Signal}
	}
	return o.acquired(ctx, lease, err, fence.left, log)
}

// fenceNotice says once that a restart fence holds the grant back by more
// than a second, in words true of a first start as of a restart.
type fenceNotice struct {
	o     *runOptions
	log   *logger
	quiet bool // -q, or a terminal, whose waiting line says it
	said  bool
	// left is the fence the last ask saw, for the --timeout line.
	left time.Duration
}

func (f *fenceNotice) saw(left time.Duration, noWait bool) {
	f.left = left
	if left <= time.Second || f.said {
		return
	}
	f.said = true
	then := "no grant until it ends (--restart-fence)"
	if noWait {
		then = "waiting for it to end, then trying once (--no-wait)"
	}
	if !f.quiet || (noWait && !f.o.quiet) {
		f.log.Warnf("key %q: %s, in %v: %s", f.o.key, fenceWhy(left, f.o.restartFence), left.Round(time.Second), then)
	}
}

// fenceWhy says why a fence holds with left to go, this caller's fence
// being fence: a server that started (for the first time or again) or
// took over as master less than the fence ago.
func fenceWhy(left, fence time.Duration) string {
	if ago := fence - left; left <= fence && ago >= 0 {
		return fmt.Sprintf("Redis started or failed over %v ago, less than the restart fence of %v", ago.Round(time.Second), fence)
	}
	return "Redis started or failed over less than the key's restart fence ago"
}

// acquired says how a wait ended: with the permit, or why not. fenced is
// what was left of a restart fence when the store last said.
func (o *runOptions) acquired(ctx context.Context, lease semaphore.Lease, err error, fenced time.Duration, log *logger) (semaphore.Lease, error) {
	var (
		fence   *semaphore.FenceError
		full    *semaphore.LineError
		paused  *semaphore.PausedError
		setting *semaphore.SettingError
		taken   *semaphore.BusyError
	)
	switch {
	case err == nil:
		return lease, nil
	case errors.As(err, &setting):
		return nil, o.refused(err) // a weight over the key's stored capacity
	case errors.As(err, &paused):
		return nil, o.busy(log, fmt.Sprintf("key %q: %s (semrun key resume; --no-wait)", o.key, pausedText(&paused.Pause)))
	case errors.As(err, &fence):
		why := fmt.Sprintf("key %q: %s: no grant for %v more (--restart-fence; --no-wait)", o.key, fenceWhy(fence.Left, o.restartFence), max(fence.Left.Round(time.Second), time.Second))
		if o.busyExitCode == 0 {
			// A restart must not skip a cron job in silence.
			log.Warnf("%s; skipped", why)
			return nil, &busyError{code: 0}
		}
		return nil, o.busy(log, why)
	case errors.As(err, &full):
		return nil, o.busy(log, fmt.Sprintf("key %q: %d callers wait already, the most one key takes; not joining the line", o.key, full.Waiting))
	case errors.As(err, &taken):
		// The capacity the store admitted the call against: a stored one wins.
		return nil, o.busy(log, fmt.Sprintf("key %q: %s held (--no-wait)", o.key, permits(taken.Capacity, "all ")))
	case errors.Is(err, semaphore.ErrBusy):
		return nil, o.busy(log, fmt.Sprintf("key %q: %s held (--no-wait)", o.key, permits(o.permits, "all ")))
	case errors.Is(err, context.DeadlineExceeded) && o.timeout > 0 && ctx.Err() == nil && fenced > 0:
		return nil, o.busy(log, fmt.Sprintf("key %q: no permit within %v (--timeout): %s, %v to go", o.key, o.timeout, fenceWhy(fenced, o.restartFence), fenced.Round(time.Second)))
	case errors.Is(err, context.DeadlineExceeded) && o.timeout > 0 && ctx.Err() == nil:
		return nil, o.busy(log, fmt.Sprintf("key %q: no permit within %v (--timeout)", o.key, o.timeout))
	}
	return nil, err
}

// busy is the outcome of a run that got no permit. With --busy-exit-code 0
// it is a quiet skip, said only with --verbose, since cron mails any output.
func (o *runOptions) busy(log *logger, why string) error {
	if o.busyExitCode == 0 {
		log.Infof("%s; skipped", why)
		return &busyError{code: 0}
	}
	return &busyError{code: o.busyExitCode, why: why}
}

// permits says "1 permit" or "all 3 permits", with all before a plural.
func permits(n int, all string) string {
	if n == 1 {
		return semaphore.Count(n, "permit")
	}
	return all + semaphore.Count(n, "permit")
}
