package redisstore

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

// AcquireAll implements semaphore.AllAtOnce on one server or Sentinel's
// master (many.lua): one call asks for every key, and grants all of them
// or none; a caller that must wait keeps a place in every key's line and
// blocks on all its wake lists at once. A Cluster keeps keys on different
// masters, where no script sees them all: semaphore.ErrNotAtOnce.
func (s *Store) AcquireAll(ctx context.Context, reqs []semaphore.Request) (semaphore.Lease, error) {
	if s.cluster {
		return nil, semaphore.ErrNotAtOnce
	}
	if len(reqs) < 2 || len(reqs) > semaphore.MaxKeys {
		return nil, fmt.Errorf("%d keys: %w", len(reqs), semaphore.ErrNotAtOnce)
	}
	m := &many{s: s, began: clock.Now()}
	id := newPermitID()
	for _, req := range reqs {
		if err := req.Validate(); err != nil {
			return nil, err
		}
		a, err := s.newAsker(req)
		if err != nil {
			return nil, err
		}
		// One permit id for every key: the caller's, in each line.
		a.id, a.args.ID, a.wake.key = id, id, a.keys.WakeList(id)
		m.askers = append(m.askers, a)
	}
	protocol.Build(protocol.ReleaseArgs{})
	if reqs[0].NoWait {
		return m.once(ctx)
	}
	for {
		l, delay, err := m.ask(ctx)
		if m.askers[0].outage(ctx, err) {
			continue
		}
		if l != nil || err != nil {
			return l, err
		}
		if err := m.await(ctx, clock.Now().Add(delay)); err != nil {
			return nil, err
		}
	}
}

// once asks without waiting in line, waiting out a restart fence as
// asker.once does.
func (m *many) once(ctx context.Context) (semaphore.Lease, error) {
	first := m.askers[0]
	return once(ctx, first.req, func() int { return first.held }, func(d time.Duration) {
		for _, a := range m.askers {
			a.args.FenceWait = d
		}
	}, m.ask)
}

// many is one AcquireAll's state: an asker for each key, sharing a permit
// id.
type many struct {
	s      *Store
	askers []*asker
	began  clock.Instant
}

// ask runs many.lua once. It returns the lease of every key, or how long
// to wait for a look before asking again.
func (m *many) ask(ctx context.Context) (semaphore.Lease, time.Duration, error) {
	s, first := m.s, m.askers[0]
	sent := clock.Now()
	args := protocol.ManyArgs{}
	for _, a := range m.askers {
		a.args.Waited = sent.Sub(m.began)
		args.Keys, args.Each = append(args.Keys, a.keys), append(args.Each, a.args)
	}
	res, err := s.retry(ctx, func(ctx context.Context) (any, error) { return protocol.RunMany(ctx, s.client, args) })
	recv := clock.Now()
	for _, a := range m.askers {
		if limit := protocol.AtLimit(err, a.keys); limit != nil {
			return nil, 0, fmt.Errorf("key %q: %w", a.req.Key, limit)
		}
	}
	first.unreachable = err != nil && errors.Is(err, semaphore.ErrUnreachable)
	if err != nil {
		if ctx.Err() != nil {
			m.abandon(ctx)
		}
		return nil, 0, fmt.Errorf("key %q: %w", first.req.Key, err)
	}
	s.waitedOn.Store(first.req.Key, true)
	replies, fits, err := protocol.DecodeMany(res, len(m.askers))
	if err != nil {
		m.abandon(ctx)
		return nil, 0, fmt.Errorf("key %q: %w", first.req.Key, err)
	}
	for i, r := range replies {
		a := m.askers[i]
		if !r.Over {
			a.warn(r)
		}
		a.held = int(r.Held)
		s.dropped(a.req.Key, r.Bad)
		s.indexed(ctx, a.keys, r.Fresh)
		s.watch(ctx, a.keys, slices.DeleteFunc(r.Handed, func(l string) bool { return l == a.wake.key }))
	}
	if replies[0].Granted {
		return m.granted(ctx, replies, sent)
	}
	for i, r := range replies {
		if a := m.askers[i]; r.Over {
			return nil, 0, &semaphore.SettingError{Setting: semaphore.WeightSetting, Value: a.req.Takes(),
				Err: fmt.Errorf("more than key %q's stored capacity of %d (semrun key set): it could never be granted", a.req.Key, r.Stored)}
		}
	}
	// What the caller hears of is the first key, in its order, that
	// would not grant it.
	busy := slices.Index(fits, false)
	if busy < 0 {
		busy = 0 // every key fits, but another caller's grant came between: ask again
	}
	a, r := m.askers[busy], replies[busy]
	fenced := protocol.Span(r.Fenced)
	if first.req.NoWait {
		if fenced > 0 {
			return nil, 0, fmt.Errorf("key %q: %w", a.req.Key, &semaphore.FenceError{Left: fenced})
		}
		if p := r.Policy.Pause(); p != nil {
			return nil, 0, &semaphore.PausedError{Key: a.req.Key, Pause: *p}
		}
		return nil, 0, &semaphore.BusyError{Key: a.req.Key, Held: int(r.Held), Capacity: capacityOf(a.req, r.Policy)}
	}
	for i, r := range replies {
		if r.Full {
			return nil, 0, fmt.Errorf("key %q: %w", m.askers[i].req.Key, &semaphore.LineError{Waiting: int(r.Waiting), Max: s.maxLine})
		}
	}
	// Each key's line is renewed, and looked at, as a caller of one would.
	var st semaphore.WaitState
	var delay time.Duration
	for i, r := range replies {
		one, d := m.askers[i].inLineAt(r, sent, recv)
		if i == busy {
			st, st.Key = one, a.req.Key
		}
		if i == 0 || d < delay {
			delay = d
		}
	}
	first.tell(st)
	return nil, delay, nil
}

// granted makes the leases of a grant of every key, each Fresh, as
// asker.fresh makes one; if any is not, every key is given back and the
// caller asks again (nil, nil).
func (m *many) granted(ctx context.Context, replies []protocol.AcquireReply, sent clock.Instant) (semaphore.Lease, time.Duration, error) {
	keys := make([]string, len(m.askers))
	leases := make([]semaphore.Lease, len(m.askers))
	for i, r := range replies {
		a := m.askers[i]
		keys[i] = a.req.Key
		l, err := a.fresh(ctx, m.s.newLease(a.req, a.keys, a.id, r.Token, r.Slots, sent.Add(serverSpan(r.Left)), sent, r.Since, r.Now))
		if err != nil || l == nil {
			m.abandon(ctx)
			return nil, 0, err
		}
		leases[i] = l
	}
	return semaphore.Join(keys, leases), 0, nil
}

// await waits until deadline for a look or a turn pushed to any of the
// caller's wake lists; then it asks again.
func (m *many) await(ctx context.Context, deadline clock.Instant) error {
	lists := make([]string, len(m.askers))
	for i, a := range m.askers {
		lists[i] = a.wake.key
	}
	first := m.askers[0]
	for {
		i, t, popped, err := first.wake.waitAny(ctx, lists, clock.Until(deadline))
		switch {
		case err != nil:
			m.abandon(ctx)
			return fmt.Errorf("wait for key %q: %w", first.req.Key, err)
		case !popped:
			return nil
		case t.Handed, t.Look > 0:
			// Asked to look (many.lua), or handed a key's permit by a
			// semrun that knows no many.lua: the next call sees it.
			a := m.askers[i]
			if at := a.inLine.recv.Add(protocol.Span(t.Look - a.inLine.now + 1)); t.Look > 0 && at.After(clock.Now()) && at.Before(deadline) {
				deadline = at
				continue
			}
			return nil
		default:
			// Not the scripts': someone else wrote it.
			if err := clock.Sleep(ctx, first.garbage.step()); err != nil {
				m.abandon(ctx)
				return fmt.Errorf("wait for key %q: %w", first.req.Key, context.Cause(ctx))
			}
		}
		if clock.Until(deadline) <= 0 {
			return nil
		}
	}
}

// abandon gives back every key's permit or place in line, all at once:
// each within abandon's own short bound.
func (m *many) abandon(ctx context.Context) {
	var wg sync.WaitGroup
	for _, a := range m.askers {
		wg.Go(func() { m.s.abandon(ctx, a.keys, a.id) })
	}
	wg.Wait()
}
