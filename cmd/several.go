package cmd

import (
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/semrun/semrun/internal/runner"
	"github.com/semrun/semrun/internal/semaphore"
)

// A caller of several keys (-k a -k b) asks a store that can for all of
// them in one step (semaphore.AllAtOnce: one Redis, a lock directory),
// holding nothing while it waits. Elsewhere it takes them one after another in
// semaphore.TakeOrder, the same for every caller, so that no two wait for
// each other; it holds the keys taken while it waits for the next, and
// renews them meanwhile. Its command starts once it holds them all; busy,
// timed out or interrupted, it gives back what it took.

// checkKeys checks what is asked of several keys: -n and --weight once
// for every key or once per key, each key's request valid, none held
// already by a semrun this one runs under.
func (o *waitOptions) checkKeys() error {
	if len(o.keys) == 0 {
		o.keys = []string{o.key}
	}
	if len(o.keys) == 1 {
		return nil
	}
	for _, c := range []struct {
		flag string
		each []int
	}{{"permits", o.permitsEach}, {"weight", o.weightEach}} {
		if n := len(c.each); n > 1 && n != len(o.keys) {
			return usageErrorf("--%s given %d times for %d keys: give it once for every key, or once per --key, in the same order", c.flag, n, len(o.keys))
		}
	}
	o.request = rand.Text()[:16]
	for _, req := range o.requests() {
		if req.Weight == 0 {
			// As for the first key (validateWait): a request's 0 is 1.
			return usageErrorf("key %q: %s: must be from 1 to %s", req.Key, o.src.show("weight", 0), permits(req.Permits, ""))
		}
		if err := req.Validate(); err != nil {
			return usageErrorf("key %q: %v", req.Key, o.refused(err))
		}
	}
	return nil
}

// requests are what the caller asks of each key, in the user's order:
// the request of the first key (o.req) with each key's own capacity and
// weight, and the others named, for status.
func (o *waitOptions) requests() []semaphore.Request {
	if len(o.keys) <= 1 {
		return []semaphore.Request{o.req}
	}
	reqs := make([]semaphore.Request, len(o.keys))
	for i, key := range o.keys {
		req := o.req
		req.Key, req.Permits, req.Weight = key, o.permitsOf(i), o.weightOf(i)
		req.Holder.With = slices.Delete(slices.Clone(o.keys), i, i+1)
		req.Holder.Request = o.request
		reqs[i] = req
	}
	return reqs
}

func (o *waitOptions) permitsOf(i int) int { return nth(o.permitsEach, i, o.permits) }
func (o *waitOptions) weightOf(i int) int  { return nth(o.weightEach, i, o.weight) }

// nth is the i-th of values given once per key, the one given for every
// key, or else def.
func nth(values []int, i, def int) int {
	switch len(values) {
	case 0:
		return def
	case 1:
		return values[0]
	}
	return values[i]
}

// forKey is o as it asks req, of one key of several.
func (o *waitOptions) forKey(req semaphore.Request) *waitOptions {
	k := *o
	k.key, k.keys, k.permits, k.weight, k.req = req.Key, []string{req.Key}, req.Permits, req.Weight, req
	return &k
}

// keysText names the keys asked for: `key "a"`, or `keys "a", "b"`.
func (o *waitOptions) keysText() string {
	if len(o.keys) == 0 {
		return keysText([]string{o.key})
	}
	return keysText(o.keys)
}

// keysText names keys: `key "a"`, or `keys "a", "b"`.
func keysText(keys []string) string {
	if len(keys) == 1 {
		return fmt.Sprintf("key %q", keys[0])
	}
	quoted := make([]string, len(keys))
	for i, k := range keys {
		quoted[i] = fmt.Sprintf("%q", k)
	}
	return "keys " + strings.Join(quoted, ", ")
}

// acquireAll waits for a permit of every key: in one step where the store
// can, else one after another in semaphore.TakeOrder, renewing those it
// holds while it waits for the next (a key found lost meanwhile is given
// up with the others and the wait starts over). It returns one lease for
// them all.
func (o *waitOptions) acquireAll(ctx context.Context, store semaphore.Store, signals *runner.Signals, log *logger, until time.Time) (semaphore.Lease, error) {
	if len(o.keys) <= 1 {
		return o.acquire(ctx, store, signals, log, until)
	}
	reqs := o.requests()
	if all, ok := store.(semaphore.AllAtOnce); ok {
		lease, err := o.acquireBy(ctx, store, signals, log, until, func(ctx context.Context, req semaphore.Request) (semaphore.Lease, error) {
			for i := range reqs {
				// The caller as acquire made it, under each key.
				h := &reqs[i].Holder
				h.Host, h.PID, h.Command, h.MaxRuntime = req.Holder.Host, req.Holder.PID, req.Holder.Command, req.Holder.MaxRuntime
				reqs[i].OnWait = req.OnWait
			}
			return all.AcquireAll(ctx, reqs)
		})
		if !errors.Is(err, semaphore.ErrNotAtOnce) {
			return lease, err
		}
	}
	for {
		leases, err := o.takeInOrder(ctx, store, signals, log, until, reqs)
		if errors.Is(err, errTakenLost) {
			continue
		}
		if err != nil {
			return nil, err
		}
		return semaphore.Join(o.keys, leases), nil
	}
}

// errTakenLost: a key taken was lost while the caller waited for another.
var errTakenLost = errors.New("a key taken was lost while waiting for the next")

// takeInOrder takes reqs' keys in semaphore.TakeOrder; on any failure it
// gives back those it took.
func (o *waitOptions) takeInOrder(ctx context.Context, store semaphore.Store, signals *runner.Signals, log *logger, until time.Time, reqs []semaphore.Request) (_ []semaphore.Lease, err error) {
	leases := make([]semaphore.Lease, len(reqs))
	var taken []int
	defer func() {
		if err != nil {
			for _, i := range taken {
				o.forKey(reqs[i]).release(ctx, leases[i], log)
			}
		}
	}()
	order := semaphore.TakeOrder(o.keys)
	for at, i := range order {
		waitCtx, stop := context.WithCancelCause(ctx)
		keeping := o.keepTaken(waitCtx, stop, log, reqs, leases, taken)
		k := o.forKey(reqs[i])
		if len(taken) > 0 {
			// Stopped (Ctrl-Z), a waiter keeps nobody waiting: what it
			// took goes back at once, and once continued it starts over.
			k.stopping = func() {
				stop(errTakenLost)
				<-keeping
				for _, j := range taken {
					o.forKey(reqs[j]).release(ctx, leases[j], log)
				}
				taken = nil
			}
		}
		lease, err := k.acquire(waitCtx, store, signals, log, until)
		stop(nil)
		<-keeping
		if lost := context.Cause(waitCtx); errors.Is(lost, errTakenLost) {
			if lease != nil {
				o.forKey(reqs[i]).release(ctx, lease, log)
			}
			return nil, lost
		}
		var busy *busyError
		if errors.As(err, &busy) && busy.why != "" {
			busy.why += o.busyToo(ctx, store, reqs, order[at+1:])
		}
		if err != nil {
			return nil, err
		}
		leases[i] = lease
		taken = append(taken, i)
	}
	return leases, nil
}

// keepTaken renews the leases of taken, every third of the TTL, until ctx
// is done; a loss cancels ctx with errTakenLost. The channel it returns
// closes once it stopped.
func (o *waitOptions) keepTaken(ctx context.Context, cancel context.CancelCauseFunc, log *logger, reqs []semaphore.Request, leases []semaphore.Lease, taken []int) <-chan struct{} {
	done := make(chan struct{})
	if len(taken) == 0 {
		close(done)
		return done
	}
	go func() {
		defer close(done)
		tick := time.NewTicker(o.ttl / 3)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for _, i := range taken {
				renewCtx, stop := context.WithTimeout(ctx, o.ttl/3)
				err := leases[i].Renew(renewCtx)
				stop()
				if errors.Is(err, semaphore.ErrLost) {
					log.Warnf("key %q: permit lost while waiting for the other keys (%v); giving every key back and waiting again", reqs[i].Key, runner.LostWhy(err))
					cancel(errTakenLost)
					return
				}
			}
		}
	}()
	return done
}

// busyToo names, after the key a caller was turned away from, those of
// the keys it did not try yet that were full too (or paused), for one
// line that says every key still busy: "; also busy: key "b"". It reads
// their status within a bound, and says nothing of a key it cannot read.
func (o *waitOptions) busyToo(ctx context.Context, store semaphore.Store, reqs []semaphore.Request, untried []int) string {
	var busy []string
	for _, i := range o.busyKeys(ctx, store, reqs, untried) {
		busy = append(busy, fmt.Sprintf("key %q", reqs[i].Key))
	}
	if len(busy) == 0 {
		return ""
	}
	return "; also busy: " + strings.Join(busy, ", ")
}

// busyKeys are those of reqs[which] whose key is full, paused or has a
// line, by its status, read within a bound; none when it cannot be read.
func (o *waitOptions) busyKeys(ctx context.Context, store semaphore.Store, reqs []semaphore.Request, which []int) []int {
	if len(which) == 0 || store == nil {
		return nil
	}
	keys := make([]string, len(which))
	for j, i := range which {
		keys[j] = reqs[i].Key
	}
	ctx, cancel := context.WithTimeout(ctx, min(o.connectTimeout, coolingLook))
	defer cancel()
	st, err := store.Status(ctx, keys)
	if err != nil || len(st) != len(keys) {
		return nil
	}
	var busy []int
	for j, k := range st {
		req := reqs[which[j]]
		capacity := cmp.Or(k.StoredCapacity, req.Permits)
		if k.Error == "" && (k.Paused != nil || k.Held+req.Takes() > capacity || len(k.Waiters) > 0) {
			busy = append(busy, which[j])
		}
	}
	return busy
}

// acquiredSeveral says how a wait for several keys in one step ended
// without them (err): as acquired says it of the key that held the
// caller back (the one err names, else the first busy by its status),
// with the others still busy, read in one look.
func (o *waitOptions) acquiredSeveral(ctx context.Context, store semaphore.Store, err error, fenced time.Duration, log *logger) error {
	reqs := o.requests()
	at := -1
	var busy *semaphore.BusyError
	var paused *semaphore.PausedError
	switch {
	case errors.As(err, &busy):
		at = slices.Index(o.keys, busy.Key)
	case errors.As(err, &paused):
		at = slices.Index(o.keys, paused.Key)
	}
	var full []int
	if errors.Is(err, semaphore.ErrBusy) || errors.Is(err, context.DeadlineExceeded) {
		all := make([]int, len(reqs))
		for i := range all {
			all[i] = i
		}
		full = o.busyKeys(ctx, store, reqs, all)
	}
	if at < 0 {
		at = 0
		if len(full) > 0 {
			at = full[0]
		}
	}
	_, err = o.forKey(reqs[at]).acquired(ctx, store, nil, err, fenced, log)
	var also []string
	for _, i := range full {
		if i != at {
			also = append(also, fmt.Sprintf("key %q", reqs[i].Key))
		}
	}
	var b *busyError
	if errors.As(err, &b) && b.why != "" && len(also) > 0 {
		b.why += "; also busy: " + strings.Join(also, ", ")
	}
	return err
}
