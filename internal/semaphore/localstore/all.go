//go:build unix

package localstore

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
	"golang.org/x/sys/unix"
)

// AcquireAll implements semaphore.AllAtOnce: every key's permits are taken
// in one step, under every key's grant lock, or none. A caller that must
// wait holds no permit: it is first in every key's line (it holds each
// key's queue lock), and takes every key once each has a permit free for
// it. Both kinds of lock are taken in semaphore.TakeOrder, the same for
// every caller, so that no two callers each hold a lock the other waits
// for; a caller of one key holds one queue lock.
func (s *Store) AcquireAll(ctx context.Context, reqs []semaphore.Request) (semaphore.Lease, error) {
	if len(reqs) < 2 || len(reqs) > semaphore.MaxKeys {
		return nil, fmt.Errorf("%d keys: %w", len(reqs), semaphore.ErrNotAtOnce)
	}
	for _, req := range reqs {
		if err := errors.Join(req.Validate(), noOrder(req)); err != nil {
			return nil, err
		}
	}
	start := time.Now()
	for range maxPublish {
		lease, err := s.acquireAll(ctx, reqs, start)
		if !errors.Is(err, errKeyMoved) {
			return lease, err
		}
	}
	return nil, fmt.Errorf("key %q: its directory in %s was replaced each time semrun looked", reqs[0].Key, s.path)
}

// acquireAll is AcquireAll in the keys' directories as they are now; it
// is errKeyMoved when one is removed or replaced meanwhile.
func (s *Store) acquireAll(ctx context.Context, reqs []semaphore.Request, start time.Time) (semaphore.Lease, error) {
	keys := make([]string, len(reqs))
	as := make([]*attempt, 0, len(reqs))
	defer func() {
		for _, a := range as {
			a.close()
			a.k.close()
		}
	}()
	for i, req := range reqs {
		keys[i] = req.Key
		k, err := s.openKey(req.Key, req.Permits)
		if err != nil {
			return nil, err
		}
		a := &attempt{s: s, k: k, req: req, capacity: req.Permits}
		as = append(as, a)
		if a.permits, err = k.openPermits(); err != nil {
			return nil, err
		}
		if a.queue, err = k.open(queueFile, os.O_RDWR|os.O_CREATE); err != nil {
			return nil, err
		}
		// Without a draft, a holder has no record: status shows fewer holders.
		a.draft, _ = k.makeDraft()
	}
	order := semaphore.TakeOrder(keys)
	leases, busy, held, err := takeAll(ctx, as, order, true)
	if leases == nil && err == nil && !reqs[0].NoWait {
		leases, busy, err = waitAll(ctx, as, order, busy, held)
	}
	waited := time.Since(start)
	if leases == nil {
		for _, a := range as {
			if err != nil && a.k.current() != nil && ctx.Err() == nil {
				return nil, errKeyMoved
			}
		}
		if err == nil {
			err = &semaphore.BusyError{Key: reqs[busy].Key, Held: held, Capacity: as[busy].capacity}
		}
		if e, ok := outcome(reqs[busy], err, waited); ok {
			as[busy].k.note(e)
		}
		return nil, err
	}
	ls := make([]semaphore.Lease, len(leases))
	for i, l := range leases {
		as[i].k.note(l.event(semaphore.EventGrant, waited))
		ls[i] = l
	}
	return semaphore.Join(keys, ls), nil
}

// takeAll takes every key's grant lock, in order, and then a permit of
// each, or none: it returns the leases, or which key would not grant
// (busy) and how many of its permits were held. With gate, it takes a
// key only when nobody is in its line (joinLine, which leaves the caller
// first in line where it took the queue lock).
func takeAll(ctx context.Context, as []*attempt, order []int, gate bool) (leases []*lease, busy, held int, err error) {
	locked := 0
	defer func() {
		for _, i := range order[:locked] {
			_, _ = flock(as[i].grant, unix.LOCK_UN)
		}
	}()
	for _, i := range order {
		if err := as[i].lockGrant(ctx); err != nil {
			return nil, i, 0, err
		}
		locked++
	}
	taken := make([]*heldPermits, len(as))
	giveBack := func() {
		for i, t := range taken {
			if t != nil {
				_ = t.release()
				taken[i] = nil
			}
		}
	}
	for _, i := range order {
		a := as[i]
		var gateOf func() (bool, error)
		if gate {
			gateOf = a.joinLine
		}
		t, n, err := a.takePermits(gateOf)
		if t == nil {
			giveBack()
			return nil, i, n, err
		}
		taken[i] = t
	}
	leases = make([]*lease, len(as))
	for _, i := range order {
		l, err := as[i].lease(taken[i]) // on an error, it gave taken[i] back
		taken[i] = nil
		if err != nil {
			giveBack()
			for _, l := range leases {
				if l != nil {
					_ = l.Release(context.WithoutCancel(ctx))
				}
			}
			return nil, i, 0, err
		}
		leases[i] = l
	}
	return leases, 0, 0, nil
}

// waitAll waits, holding no permit, until every key has one free for the
// caller: it joins every key's line in order (status shows it waiting
// under each), and once first in each, takes every key when a permit of
// any frees. busy and held are what the last look found.
func waitAll(ctx context.Context, as []*attempt, order []int, busy, held int) ([]*lease, int, error) {
	onWait := as[0].req.OnWait
	if onWait == nil {
		onWait = func(semaphore.WaitState) {}
	}
	state := func(i, held int, first bool) semaphore.WaitState {
		a := as[i]
		a.recentHold = a.k.recentHold()
		st := a.waitState(held)
		st.Key = a.req.Key
		if first {
			st.Position = 1
		}
		return st
	}
	last := state(busy, held, false)
	onWait(last)
	for _, a := range as {
		if a.unregister == nil {
			var err error
			if a.unregister, err = a.register(); err != nil {
				return nil, busy, err
			}
		}
	}
	for _, i := range order {
		a := as[i]
		if a.inLine {
			continue // the lines before it in order, joined as it looked
		}
		if err := lockWait(ctx, a.queue); err != nil {
			a.queue = nil // lockWait closes it
			return nil, i, fmt.Errorf("wait for key %q: %w", a.req.Key, err)
		}
		a.inLine = true
	}
	ks := make([]*keyDir, len(as))
	for i, a := range as {
		ks[i] = a.k
	}
	// The watch starts before the permits are looked at, so that no
	// release between the two goes unnoticed.
	w := watchPermitsOf(ks)
	defer func() { go w.close() }()
	recheck := slowRecheck
	for {
		leases, busy, held, err := takeAll(ctx, as, order, false)
		if leases != nil || err != nil {
			return leases, busy, err
		}
		if st := state(busy, held, true); st != last {
			onWait(st)
			last = st
		}
		woken, err := w.wait(ctx, nextLook(recheck, as...))
		if err != nil {
			return nil, busy, fmt.Errorf("wait for key %q: %w", as[busy].req.Key, err)
		}
		recheck = afterLook(recheck, woken)
	}
}
