package cmd

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/semrun/semrun/internal/keeper"
	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
)

// keeperArg is the one argument semrun acquire starts its keeper with.
const keeperArg = keeper.Arg

// keeperMessage is what semrun acquire told this process, its keeper.
type keeperMessage = keeper.Parent

// readKeeperMessage is what acquire told this keeper. Once it is read,
// the keeper holds nothing of its caller's but the hold (keeper.Adopt).
func readKeeperMessage() (*keeperMessage, error) {
	p, err := keeper.Adopt()
	if err != nil {
		return nil, fmt.Errorf("semrun keeper: started by semrun acquire only: %w", err)
	}
	return p, nil
}

// findOwner finds --owner-pid's process.
func findOwner(pid int) (*keeper.Owner, error) {
	if pid <= 0 {
		return nil, errors.New("must be a process id")
	}
	return keeper.FindOwner(pid)
}

// startKeeper makes the permit of lease a hold kept by a new keeper
// process (keeper.Start). It returns once the keeper renews the hold,
// with the keeper's pid, and the keeper, which acquire tells once it
// printed the handle.
func (o *acquireOptions) startKeeper(ctx context.Context, store semaphore.Store, lease semaphore.Lease, granted time.Time) ([]semaphore.Handle, int, *keeper.Started, error) {
	// The name it was started by, as a test's copy needs.
	k, err := keeper.Start(o.f.Self, os.Args[0], o.f.Environ, o.owner)
	if err != nil {
		return nil, 0, nil, fmt.Errorf("start its keeper: %w", err)
	}
	kept := false
	defer func() {
		if !kept {
			k.Close()
		}
	}()
	host, _ := os.Hostname()
	leases := []semaphore.Lease{lease}
	if several, ok := lease.(*semaphore.Several); ok {
		leases = several.Leases()
	}
	var hs []semaphore.Handle
	endAll := func(why string) {
		endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), min(o.connectTimeout, releaseTimeout))
		defer cancel()
		for _, h := range hs {
			_, _, _ = store.EndHold(endCtx, h, semaphore.HoldEnd{State: semaphore.HoldReleased, Why: why})
		}
	}
	for i, l := range leases {
		info := semaphore.HolderInfo{Host: host, PID: k.PID, MaxRuntime: o.maxRuntime, Label: o.req.Holder.Label}
		if len(leases) > 1 {
			info.With, info.Request = slices.Delete(slices.Clone(o.keys), i, i+1), o.request
		}
		h, err := store.Hold(ctx, l, info)
		if err != nil {
			k.Kill()
			endAll("its keeper did not start")
			return nil, 0, nil, err
		}
		hs = append(hs, h)
	}
	msg := keeper.Message{Args: o.args, Handle: semaphore.HandlesText(hs), OwnerPID: o.ownerPID, OwnerFD: o.owner.HasFD()}
	if o.maxRuntime > 0 {
		msg.MaxRuntime = max(o.maxRuntime-time.Since(granted), time.Millisecond)
	}
	sent := k.Tell(msg)
	// A keeper that is gone says so by closing its end: that says more
	// than the broken pipe.
	if err = k.Await(keeper.Patience + o.connectTimeout); err == nil && sent != nil {
		err = sent
	}
	if err != nil {
		k.Kill()
		endAll("its keeper did not start")
		return nil, 0, nil, fmt.Errorf("its keeper did not start: %w", err)
	}
	kept = true
	return hs, k.PID, k, nil
}

// pathSettings are the settings that name a file or a directory: a
// keeper reads them in acquire's directory, as acquire did, before it
// leaves it (settleKeeper).
var pathSettings = []string{"config", "lock-dir", "redis-password-file", "tls-ca", "tls-cert", "tls-key"}

// settleKeeper makes the relative paths of the keeper's settings absolute,
// and then makes / its directory: a keeper must not keep its caller's
// directory, or the mount it is on, busy for as long as the hold lasts.
func (c *commonOptions) settleKeeper() error {
	for _, name := range pathSettings {
		f := c.flags.Lookup(name)
		if f == nil || f.Value.String() == "" || filepath.IsAbs(f.Value.String()) {
			continue
		}
		abs, err := filepath.Abs(f.Value.String())
		if err == nil {
			err = f.Value.Set(abs)
		}
		if err != nil {
			return fmt.Errorf("semrun keeper: %s: %w", c.src.name(name), err)
		}
	}
	if err := keeper.Settle(); err != nil {
		return fmt.Errorf("semrun keeper: %w", err)
	}
	return nil
}

// holdEnd is why a keeper ends its hold, in the words release shows.
func (o *acquireOptions) holdEnd(e keeper.End) semaphore.HoldEnd {
	switch {
	case e.RanOut:
		return semaphore.HoldEnd{State: semaphore.HoldMaxRuntime, Why: fmt.Sprintf("its --max-runtime of %v ran out", o.maxRuntime)}
	case e.OwnerExited:
		return semaphore.HoldEnd{State: semaphore.HoldReleased, Why: fmt.Sprintf("its owner, pid %d, exited", o.keeper.OwnerPID)}
	}
	return semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "its keeper got " + runner.SignalName(e.Signal)}
}

// keep is the keeper: it attaches to the hold, says so to acquire, and
// renews it until the first of: the hold ended elsewhere (semrun
// release), --max-runtime, --owner-pid's exit, SIGTERM, SIGINT or SIGHUP,
// or its loss; then it ends the hold with why, and exits.
func (o *acquireOptions) keep(ctx context.Context, store semaphore.Store, log *logger) error {
	msg := o.keeper
	hs, err := semaphore.ParseHandles(msg.Handle)
	if err != nil {
		return err
	}
	signals, stopSignals := runner.UntilStopped(runner.Hangup)
	defer stopSignals()
	endAll := func(ctx context.Context, end semaphore.HoldEnd) {
		for _, h := range hs {
			_, _, _ = store.EndHold(ctx, h, end)
		}
	}
	leases := make([]semaphore.Lease, 0, len(hs))
	ttl := time.Duration(0)
	for _, h := range hs {
		lease, info, err := store.Attach(ctx, h, true)
		if err != nil {
			// acquire hears that its keeper stopped, and says nothing is
			// held: the holds taken are ended.
			endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.connectTimeout)
			defer cancel()
			endAll(endCtx, semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "its keeper could not attach to every key's hold"})
			for _, l := range leases {
				_ = l.Release(endCtx)
			}
			return err
		}
		leases = append(leases, lease)
		if ttl == 0 || info.TTL < ttl {
			ttl = info.TTL
		}
	}
	lease := leases[0]
	if len(leases) > 1 {
		lease = semaphore.Join(handleKeys(hs), leases)
	}
	msg.Kept()
	if !msg.Printed() {
		// acquire was killed, or could not print: nobody has the handle.
		endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.connectTimeout)
		defer cancel()
		endAll(endCtx, semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "semrun acquire ended before it printed the handle"})
		return lease.Release(endCtx)
	}

	keepCtx, stop := context.WithCancel(ctx)
	defer stop()
	ends := msg.Watch(keepCtx, signals, stop)
	lost := runner.Keep(keepCtx, runner.Spec{TTL: ttl, Warnf: log.Warnf}, lease)

	endCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), o.connectTimeout)
	defer cancel()
	var ended *semaphore.HoldEndedError
	switch {
	case errors.As(lost, &ended):
		// Ended elsewhere: semrun release, a revoke. The other keys'
		// holds, if any, end the same way, naming that key.
		if len(hs) > 1 {
			end := ended.End
			end.Why = semaphore.Clip(fmt.Sprintf("with key %q's hold (%s)", ended.Key, ended.End.Why), semaphore.MaxHoldWhy)
			endAll(endCtx, end)
		}
	case lost != nil:
		// Said, if the store can be told, for release and --handle runs.
		endAll(endCtx, semaphore.HoldEnd{State: semaphore.HoldLost, Why: "its keeper lost it: " + runner.LostWhy(lost)})
	default:
		end := semaphore.HoldEnd{State: semaphore.HoldReleased, Why: "its keeper stopped"}
		select {
		case e := <-ends:
			end = o.holdEnd(e)
		default:
		}
		endAll(endCtx, end)
	}
	return lease.Release(endCtx)
}
