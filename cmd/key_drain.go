package cmd

import (
	"context"
	"fmt"
	"time"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/semaphore"
)

// drain pauses key, then waits until nobody holds it, looking every
// drainLook; at timeout (0: never) it gives up with the busy status. The
// key stays paused either way.
func (o *keyOptions) drain(ctx context.Context, store semaphore.Store, key, reason string, timeout time.Duration) error {
	if reason == "" {
		reason = "draining"
	}
	var giveUp clock.Instant
	if timeout > 0 {
		// A store that does not answer must not keep drain past it.
		giveUp = clock.Now().Add(timeout)
		var cancel context.CancelFunc
		ctx, cancel = clock.System.WithDeadline(ctx, giveUp)
		defer cancel()
	}
	timedOut := func(held int) error {
		verb := "hold"
		if held == 1 {
			verb = "holds"
		}
		return &busyError{code: defaultBusyExitCode, why: fmt.Sprintf("key %q: %s still %s it after %v (--timeout); it stays paused", key, semaphore.Count(held, "holder"), verb, timeout)}
	}
	// A key paused until resumed stays so, reason and all: a drain called
	// again (a script's retry) writes no pause event each time.
	if st, err := store.Status(ctx, []string{key}); err != nil || len(st) != 1 || st[0].Paused == nil || st[0].Paused.EndsIn != 0 {
		if err := store.Pause(ctx, key, reason, 0); err != nil {
			if ctx.Err() != nil {
				return &busyError{code: defaultBusyExitCode, why: fmt.Sprintf("key %q: not paused within %v (--timeout): %v", key, timeout, err)}
			}
			return err
		}
	}
	held := 0 // at the last look
	for {
		st, err := store.Status(ctx, []string{key})
		if err != nil && ctx.Err() != nil {
			return timedOut(held)
		}
		if err != nil {
			return err
		}
		if len(st) == 1 {
			held = len(st[0].Holders)
		}
		if len(st) == 1 && st[0].Error == "" && len(st[0].Holders) == 0 && st[0].Unlisted == 0 {
			return o.say(ctx, store, key, fmt.Sprintf("key %q: drained: nobody holds it, and it stays paused (semrun key resume)", key))
		}
		if !giveUp.IsZero() && !clock.Now().Before(giveUp) {
			return timedOut(held)
		}
		if err := clock.Sleep(ctx, drainLook); err != nil {
			if !giveUp.IsZero() && ctx.Err() != nil {
				return timedOut(held)
			}
			return err
		}
	}
}

// drainLook is how often drain looks whether the holders are gone.
const drainLook = 250 * time.Millisecond
