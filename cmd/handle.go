package cmd

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
)

// handleFixed are the flags of what a caller asks for and how it waits,
// which a hold has decided already: refused with --handle on the command
// line (from a variable or a config file they are meant for other runs).
var handleFixed = []string{"permits", "weight", "ttl", "timeout", "no-wait", "busy-exit-code", "restart-fence", "min-replicas", "min-hold", "min-hold-after", "label", "priority", "priority-age", "supersede"}

// validateHandle checks a run under a hold's handle (--handle): the handle,
// which names its key, and the run's own flags.
func (o *runOptions) validateHandle() error {
	if err := o.commandLineOnly("handle"); err != nil {
		return err
	}
	hs, err := o.parseHandle("--handle", o.handle)
	if err != nil {
		return err
	}
	keys := handleKeys(hs)
	if o.set("key") {
		for _, key := range o.keys {
			if !slices.Contains(keys, key) {
				return usageErrorf("%s: the handle is one of %s", o.src.show("key", fmt.Sprintf("%q", key)), keysText(keys))
			}
		}
	}
	for _, flag := range handleFixed {
		if o.src.origin(flag) == fromFlag {
			return usageErrorf("--%s: the hold decided it; not with --handle", flag)
		}
	}
	if err := o.sameStore(hs[0]); err != nil {
		return err
	}
	o.key, o.keys, o.holds = keys[0], keys, hs
	return o.validateCommand()
}

// handleKeys are the keys of the holds hs name, in their order.
func handleKeys(hs []semaphore.Handle) []string {
	keys := make([]string, len(hs))
	for i, h := range hs {
		keys[i] = h.Key
	}
	return keys
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
// a secret. The handle of an acquire of several keys names a hold of each.
func (c *commonOptions) parseHandle(flag, s string) ([]semaphore.Handle, error) {
	if s == "" {
		return nil, usageErrorf("%s: empty: give the handle semrun acquire printed, or @VAR", flag)
	}
	if name, ok := strings.CutPrefix(s, "@"); ok {
		if s = c.f.getenv(name); s == "" {
			return nil, usageErrorf("%s @%s: %s is not set", flag, name, name)
		}
		flag += " @" + name
	}
	hs, err := semaphore.ParseHandles(s)
	if err != nil {
		return nil, usageErrorf("%s: %v", flag, err)
	}
	return hs, nil
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
// token and capacity, renewed by this run too while the command runs. A
// handle of several keys' holds runs under all of them, or not at all.
func (o *runOptions) runHandle(ctx context.Context, store semaphore.Store, log *logger) error {
	signals := runner.CatchSignals()
	leases := make([]semaphore.Lease, 0, len(o.holds))
	infos := make([]semaphore.HoldInfo, 0, len(o.holds))
	for _, h := range o.holds {
		lease, info, err := store.Attach(ctx, h, false)
		if err != nil {
			for _, l := range leases {
				o.release(ctx, l, log)
			}
			return o.holdEnded(err, "the command was not started")
		}
		leases, infos = append(leases, lease), append(infos, info)
	}
	lease, ttl, tokens := leases[0], infos[0].TTL, []int64{infos[0].Token}
	if len(leases) > 1 {
		several := semaphore.Join(o.keys, leases)
		lease, tokens = several, several.Tokens()
		for _, info := range infos {
			ttl = min(ttl, info.TTL)
		}
	}
	if err := o.checkKillAfter(ttl); err != nil {
		o.release(ctx, lease, log)
		return err
	}
	o.permits = infos[0].Permits
	log.Infof("%s: running under its hold, fencing token %s", o.keysText(), tokensText(tokens))
	started := time.Now()
	res, runErr := runner.Run(ctx, o.spec(lease, tokens, ttl, signals, log), lease)
	if errors.Is(runErr, runner.ErrStale) {
		// Semrun was held up between its attach and the start: the hold
		// may be gone by now, and nothing ran.
		o.release(ctx, lease, log)
		return &lostError{key: o.key, code: o.lostExitCode, cause: runErr}
	}
	if res.Bounded && !clock.Now().Before(semaphore.RunsOut(lease.Bound(), holdKillAfter(ttl), ttl)) {
		// The hold's --max-runtime ran out here first: said for the
		// release to report, as its keeper would a moment later. A run
		// with a longer kill-after stops sooner, and leaves that to it.
		endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(o.connectTimeout, releaseTimeout))
		for _, h := range o.holds {
			_, _, _ = store.EndHold(endCtx, h, semaphore.HoldEnd{State: semaphore.HoldMaxRuntime, Why: "its --max-runtime ran out"})
		}
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
