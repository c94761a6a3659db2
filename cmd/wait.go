package cmd

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/semrun/semrun/internal/printable"
	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
)

// waitOptions are what a caller asks for and how it waits: the flags runs
// and semrun acquire share, the request they make, and the wait itself.
type waitOptions struct {
	*commonOptions
	// key is the first of keys, the keys asked for in the user's order;
	// permitsEach and weightEach are -n's and --weight's, once each given.
	key                     string
	keys                    []string
	permits                 int
	weight                  int
	permitsEach, weightEach []int
	ttl                     time.Duration
	timeout                 time.Duration
	noWait                  bool
	busyExitCode            int
	restartFence            time.Duration
	minReplicas             int
	// labelText is --label's, as given (see label).
	labelText string
	// priority, priorityAge and supersede order the caller in its keys'
	// lines: the same in each of them.
	priority    int
	priorityAge time.Duration
	supersede   bool
	// maxRuntime is --max-runtime: how long a run's command, or a hold,
	// may last (0: no bound; each has its own default). A waiter's status
	// shows it.
	maxRuntime time.Duration
	// killAfter is a run's --kill-after, or the one a hold is bound with:
	// part of the request's bound.
	killAfter time.Duration
	// who is what status shows of the caller for a command: the command's
	// name, or semrun acquire.
	who string
	// req is what the flags ask of the store, once validated: of the
	// first key, when there are several (see requests).
	req semaphore.Request
	// request is a caller of several keys' id, the same under each.
	request string
	// stopping, when set, runs before semrun stops (Ctrl-Z) while it
	// waits: a caller of several keys gives back those it took.
	stopping func()
}

// acquire waits for a permit until one is held, until passes (--timeout;
// zero for no bound), or a signal arrives.
func (o *waitOptions) acquire(ctx context.Context, store semaphore.Store, signals *runner.Signals, log *logger, until time.Time) (semaphore.Lease, error) {
	return o.acquireBy(ctx, store, signals, log, until, store.Acquire)
}

// acquireBy is acquire, the store's wait being take's, given the request
// as the caller makes it (its holder, how it hears of its wait).
func (o *waitOptions) acquireBy(ctx context.Context, store semaphore.Store, signals *runner.Signals, log *logger, until time.Time,
	take func(context.Context, semaphore.Request) (semaphore.Lease, error)) (semaphore.Lease, error) {
	host, _ := os.Hostname()
	req := o.req
	req.Holder.Host, req.Holder.PID, req.Holder.Command, req.Holder.MaxRuntime = host, os.Getpid(), o.who, o.maxRuntime
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
	// The key waited for, of several: the one a signal's line names.
	var waitedFor atomic.Value
	waitedFor.Store(o.key)
	req.OnWait = func(st semaphore.WaitState) {
		if st.Key != "" {
			waitedFor.Store(st.Key)
		}
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
		Acquire:  func(ctx context.Context) (semaphore.Lease, error) { return take(ctx, req) },
		GiveBack: func(lease semaphore.Lease) { o.release(ctx, lease, log) },
		Stopping: func() {
			line.clear()
			if o.stopping != nil {
				o.stopping()
			}
		},
	})
	var interrupted *runner.Interrupted
	if errors.As(err, &interrupted) {
		return nil, &interruptedError{key: waitedFor.Load().(string), sig: interrupted.Signal}
	}
	if err != nil && len(o.keys) > 1 && !errors.Is(err, semaphore.ErrNotAtOnce) {
		return nil, o.acquiredSeveral(ctx, store, err, fence.left, log)
	}
	return o.acquired(ctx, store, lease, err, fence.left, log)
}

// fenceNotice says once that a restart fence holds the grant back by more
// than a second, in words true of a first start as of a restart.
type fenceNotice struct {
	o     *waitOptions
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
func (o *waitOptions) acquired(ctx context.Context, store semaphore.Store, lease semaphore.Lease, err error, fenced time.Duration, log *logger) (semaphore.Lease, error) {
	var (
		fence   *semaphore.FenceError
		full    *semaphore.LineError
		paused  *semaphore.PausedError
		setting *semaphore.SettingError
		taken   *semaphore.BusyError
		gone    *semaphore.SupersededError
	)
	switch {
	case err == nil:
		return lease, nil
	case errors.As(err, &setting):
		return nil, o.refused(err) // a weight over the key's stored capacity
	case errors.As(err, &gone):
		// Before ErrBusy, which it wraps: a wait ended by a newer caller.
		return nil, o.busy(log, supersededText(o.key, gone.By))
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
		return nil, o.busy(log, fmt.Sprintf("key %q: %s (--no-wait)", o.key, o.taken(ctx, store, taken.Capacity)))
	case errors.Is(err, semaphore.ErrBusy):
		return nil, o.busy(log, fmt.Sprintf("key %q: %s (--no-wait)", o.key, o.taken(ctx, store, o.permits)))
	case errors.Is(err, context.DeadlineExceeded) && o.timeout > 0 && ctx.Err() == nil && fenced > 0:
		return nil, o.busy(log, fmt.Sprintf("key %q: no permit within %v (--timeout): %s, %v to go", o.key, o.timeout, fenceWhy(fenced, o.restartFence), fenced.Round(time.Second)))
	case errors.Is(err, context.DeadlineExceeded) && o.timeout > 0 && ctx.Err() == nil:
		why := fmt.Sprintf("key %q: no permit within %v (--timeout)", o.key, o.timeout)
		if c := o.coolingText(ctx, store); c != "" {
			why += ": " + c
		}
		return nil, o.busy(log, why)
	}
	return nil, err
}

// supersededText says who sent a waiter away (--supersede): the newer
// caller, as the store read it, escaped.
func supersededText(key string, by semaphore.HolderInfo) string {
	s := fmt.Sprintf("key %q: superseded by a newer caller on %s, pid %d", key, printable.String(by.Host), by.PID)
	if by.Label != "" {
		s += ", label " + printable.String(strconv.Quote(by.Label))
	}
	return s + " (--supersede)"
}

// busy is the outcome of a run that got no permit. With --busy-exit-code 0
// it is a quiet skip, said only with --verbose, since cron mails any output.
func (o *waitOptions) busy(log *logger, why string) error {
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

// taken says what takes the capacity of a key that turned this caller
// away: "all 3 permits held", or, when some are cooling (--min-hold), what
// they are and when the first frees (coolingText).
func (o *waitOptions) taken(ctx context.Context, store semaphore.Store, capacity int) string {
	c := o.coolingText(ctx, store)
	if c == "" {
		return permits(capacity, "all ") + " held"
	}
	return permits(capacity, "all ") + " taken: " + c
}

// coolingText says, for a caller turned away, the key's permits cooling
// (given back before their --min-hold passed) and when, after which exit
// on which host, the first of them frees: a once-a-night job's next run
// is then, not whenever the holder lets go. Read once the answer is busy,
// within a bound; "" when there is none, or the store does not say.
func (o *waitOptions) coolingText(ctx context.Context, store semaphore.Store) string {
	if store == nil {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, min(o.connectTimeout, coolingLook))
	defer cancel()
	st, err := store.Status(ctx, []string{o.key})
	if err != nil || len(st) != 1 || len(st[0].Cooling) == 0 {
		return ""
	}
	first := slices.MinFunc(st[0].Cooling, func(a, b semaphore.Cooling) int { return cmp.Compare(a.EndsIn, b.EndsIn) })
	after := fmt.Sprintf("after exit %d on %s", first.ExitStatus, printable.String(first.Host))
	if first.ExitStatus < 0 {
		// Its holder crashed, or its release never came.
		after = fmt.Sprintf("after a run on %s whose status is unknown", printable.String(first.Host))
	}
	until := fmt.Sprintf("until %s (in %v), %s (--min-hold)",
		time.Now().Add(first.EndsIn).Format("2006-01-02 15:04:05 MST"), first.EndsIn.Round(time.Second), after)
	held := len(st[0].Holders)
	switch n := len(st[0].Cooling); {
	case n == 1 && held == 0:
		return "cooling " + until
	case n == 1:
		return fmt.Sprintf("%d held, 1 cooling %s", held, until)
	case held == 0:
		return fmt.Sprintf("%d cooling, the first %s", n, until)
	}
	return fmt.Sprintf("%d held, %d cooling, the first %s", held, len(st[0].Cooling), until)
}

// coolingLook bounds the look at a busy key's coolings.
const coolingLook = 2 * time.Second
