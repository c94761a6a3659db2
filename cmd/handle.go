package cmd

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
)

// handleFixed are the flags of what a caller asks for and how it waits,
// which a hold has decided already: refused with --handle on the command
// line (from a variable or a config file they are meant for other runs).
var handleFixed = []string{"permits", "weight", "ttl", "timeout", "no-wait", "busy-exit-code", "restart-fence", "min-replicas", "min-hold", "min-hold-after", "label"}

// validateHandle checks a run under a hold's handle (--handle): the handle,
// which names its key, and the run's own flags.
func (o *runOptions) validateHandle() error {
	if err := o.commandLineOnly("handle"); err != nil {
		return err
	}
	h, err := o.parseHandle("--handle", o.handle)
	if err != nil {
		return err
	}
	if o.set("key") && o.key != h.Key {
		return usageErrorf("%s: the handle is one of key %q", o.src.show("key", fmt.Sprintf("%q", o.key)), h.Key)
	}
	if len(o.keys) > 1 {
		return usageErrorf("%s: the handle is one of key %q", o.src.show("key", fmt.Sprintf("%q", o.keys[1])), h.Key)
	}
	for _, flag := range handleFixed {
		if o.src.origin(flag) == fromFlag {
			return usageErrorf("--%s: the hold decided it; not with --handle", flag)
		}
	}
	if err := o.sameStore(h); err != nil {
		return err
	}
	o.key, o.keys, o.hold = h.Key, []string{h.Key}, h
	return o.validateCommand()
}

// commandLineOnly refuses flag from a variable or a config file: it names
// one process (a handle, a pid), never a setting.
func (c *commonOptions) commandLineOnly(flag string) error {
	if o := c.src.origin(flag); o != fromFlag && o != fromDefault {
		return usageErrorf("%s: give --%s on the command line only", c.src.name(flag), flag)
	}
	return nil
}

// parseHandle reads a handle given by flag, or by the variable @NAME
// names (which ps does not show, as it shows argv), and says what is
// wrong with one that is not: never the text itself, which may be most of
// a secret.
func (c *commonOptions) parseHandle(flag, s string) (semaphore.Handle, error) {
	if s == "" {
		return semaphore.Handle{}, usageErrorf("%s: empty: give the handle semrun acquire printed, or @VAR", flag)
	}
	if name, ok := strings.CutPrefix(s, "@"); ok {
		if s = c.f.getenv(name); s == "" {
			return semaphore.Handle{}, usageErrorf("%s @%s: %s is not set", flag, name, name)
		}
		flag += " @" + name
	}
	h, err := semaphore.ParseHandle(s)
	if err != nil {
		return h, usageErrorf("%s: %v", flag, err)
	}
	return h, nil
}

// sameStore refuses a handle of a hold kept in the other kind of store.
func (c *commonOptions) sameStore(h semaphore.Handle) error {
	switch {
	case h.Store == semaphore.LocalStore && !c.local:
		return usageErrorf("the handle is one of a hold in a lock directory: add %s", c.src.name("local"))
	case h.Store == semaphore.RedisStore && c.local:
		return usageErrorf("the handle is one of a hold in Redis, not in a lock directory: drop %s", c.src.name("local"))
	}
	return nil
}

// runHandle runs the command under the hold, at once: the hold's permit,
// token and capacity, renewed by this run too while the command runs.
func (o *runOptions) runHandle(ctx context.Context, store semaphore.Store, log *logger) error {
	signals := runner.CatchSignals()
	lease, info, err := store.Attach(ctx, o.hold, false)
	if err != nil {
		return o.holdEnded(err, "the command was not started")
	}
	if err := o.checkKillAfter(info.TTL); err != nil {
		o.release(ctx, lease, log)
		return err
	}
	o.permits = info.Permits
	log.Infof("key %q: running under its hold, fencing token %d", o.key, info.Token)
	started := time.Now()
	res, runErr := runner.Run(ctx, o.spec(lease, []int64{info.Token}, info.TTL, signals, log), lease)
	if errors.Is(runErr, runner.ErrStale) {
		// Semrun was held up between its attach and the start: the hold
		// may be gone by now, and nothing ran.
		o.release(ctx, lease, log)
		return &lostError{key: o.key, code: o.lostExitCode, cause: runErr}
	}
	if res.Bounded && !clock.Now().Before(semaphore.RunsOut(lease.Bound(), holdKillAfter(info.TTL), info.TTL)) {
		// The hold's --max-runtime ran out here first: said for the
		// release to report, as its keeper would a moment later. A run
		// with a longer kill-after stops sooner, and leaves that to it.
		endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(o.connectTimeout, releaseTimeout))
		_, _, _ = store.EndHold(endCtx, o.hold, semaphore.HoldEnd{State: semaphore.HoldMaxRuntime, Why: "its --max-runtime ran out"})
		cancel()
	}
	return o.ran(ctx, lease, res, runErr, started, log)
}

// unknownHold is the outcome of a handle whose hold the store does not
// know: bad input, 125, as a malformed handle; the handle is not shown.
func unknownHold(ended *semaphore.HoldEndedError, then string) error {
	return usageErrorf("the %v; %s", ended, then)
}

// holdEnded is the outcome of a hold found ended: its status (lost, max
// runtime, revoked; a hold released is lost to a run), with one line that
// says how and when, and then.
func (o *runOptions) holdEnded(err error, then string) error {
	var ended *semaphore.HoldEndedError
	if !errors.As(err, &ended) {
		return err
	}
	if ended.End.State == semaphore.HoldUnknown {
		return unknownHold(ended, then)
	}
	code := holdEndCode(ended.End, o.lostExitCode)
	if code == 0 {
		code = o.lostExitCode
	}
	return &holdEndedError{code: code, msg: fmt.Sprintf("the %v; %s", ended, then)}
}
