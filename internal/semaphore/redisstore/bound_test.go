package redisstore

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/clock"
	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
)

// TestBoundedPermitFreesAtItsBound: a holder with a max runtime that stops
// renewing (stopped, hung, old) frees its permit at max runtime plus
// kill-after plus the margin, not a TTL later; its lease says as much
// here, and a renewal past the bound is refused.
func TestBoundedPermitFreesAtItsBound(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	s := newStore(t, srv.URL(), Options{})
	req := semaphore.Request{Key: "bounded", Permits: 1, TTL: time.Minute, NoWait: true, MaxRuntime: time.Second, KillAfter: 500 * time.Millisecond}
	l := acquire(t, s, req)
	// The server's bound runs from its grant, which came before the reply:
	// the lease's bound may be no later than the reply plus the terms.
	bound := clock.Now().Add(req.MaxRuntime + semaphore.Overrun(req.KillAfter, req.TTL))
	if b := l.Bound(); b.IsZero() || b.After(bound) || l.Deadline().After(b) {
		t.Fatalf("bounded lease: bound %v, deadline %v, want a bound no later than %v, the deadline no later than it", b, l.Deadline(), bound)
	}
	if !semaphore.Capped(l.Deadline(), l.Bound(), req.TTL) {
		t.Errorf("a lease whose bound comes before its TTL: got not capped, want capped (renewed no further)")
	}
	other := req
	other.MaxRuntime = 0
	if _, err := s.Acquire(ctxTimeout(t, 5*time.Second), other); !errors.Is(err, semaphore.ErrBusy) {
		t.Fatalf("no-wait caller within the bound: got %v, want busy", err)
	}
	// Polled, bounded: the permit is free at the bound, 7.5s after the grant
	// (1s, 0.5s and a tenth of the TTL), or a minute later without it.
	var got semaphore.Lease
	waitFor(t, 15*time.Second, fmt.Sprintf("a no-wait caller granted the permit, free at the bound (%v + %v)", req.MaxRuntime, semaphore.Overrun(req.KillAfter, req.TTL)), func() bool {
		got, _ = s.Acquire(ctxTimeout(t, 5*time.Second), other)
		return got != nil
	})
	if at := clock.Now(); at.Before(bound.Add(-100 * time.Millisecond)) {
		t.Errorf("permit free %v before the bound, want not before it", bound.Sub(at))
	}
	if err := l.Renew(ctxTimeout(t, 5*time.Second)); !errors.Is(err, semaphore.ErrLost) {
		t.Errorf("renewal past the bound: got %v, want lost", err)
	}
	_ = got.Release(ctxTimeout(t, 5*time.Second))
}

// TestBoundedRenewalsNeverPassTheBound: renewals before the bound keep
// the lease's deadline, here, at or before its bound.
func TestBoundedRenewalsNeverPassTheBound(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	s := newStore(t, srv.URL(), Options{})
	req := semaphore.Request{Key: "bounded-renew", Permits: 1, TTL: 3 * time.Second, NoWait: true, MaxRuntime: 2 * time.Second, KillAfter: time.Second}
	l := acquire(t, s, req)
	if semaphore.Capped(l.Deadline(), l.Bound(), req.TTL) {
		t.Fatalf("a lease whose TTL ends before its bound: got capped, want not")
	}
	for range 6 {
		time.Sleep(500 * time.Millisecond)
		if err := l.Renew(ctxTimeout(t, 5*time.Second)); err != nil {
			if clock.Now().Before(l.Bound()) {
				t.Fatalf("renewal before the bound: got %v, want renewed", err)
			}
			break
		}
		if l.Deadline().After(l.Bound()) {
			t.Fatalf("deadline %v past the bound %v after a renewal", l.Deadline(), l.Bound())
		}
	}
	if !semaphore.Capped(l.Deadline(), l.Bound(), req.TTL) {
		t.Errorf("lease renewed until its bound: got not capped, want capped")
	}
}

// TestBoundOfAPermitHandedOverIsRecordedAtOnce: a waiter handed a bounded
// permit has the store record its bound before its command starts, so
// that a holder stopped from then on frees it at its bound, not a TTL
// later.
func TestBoundOfAPermitHandedOverIsRecordedAtOnce(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	raw := rawClient(t, srv.Addr)
	s := newStore(t, srv.URL(), Options{})
	first := acquire(t, s, semaphore.Request{Key: "handed", Permits: 1, TTL: time.Minute, NoWait: true})
	got := make(chan semaphore.Lease, 1)
	go func() {
		l, err := s.Acquire(ctxTimeout(t, 10*time.Second), semaphore.Request{Key: "handed", Permits: 1, TTL: time.Minute, MaxRuntime: time.Hour})
		if err != nil {
			t.Errorf("waiter: got %v, want a permit", err)
		}
		got <- l
	}()
	waitFor(t, 5*time.Second, "a waiter in Status", func() bool { return len(statusOf(t, s, "handed").Waiters) == 1 })
	if err := first.Release(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatal(err)
	}
	l := <-got
	if l == nil {
		return
	}
	defer l.Release(ctxTimeout(t, 5*time.Second))
	fields, err := raw.HKeys(ctxTimeout(t, 5*time.Second), protocol.NewKeys(testPrefix, "handed").Info).Result()
	if err != nil {
		t.Fatal(err)
	}
	if !slices.ContainsFunc(fields, func(f string) bool { return strings.HasPrefix(f, "#bound ") }) {
		t.Errorf("fields of the key's info once the waiter holds its permit: got %q, want its bound", fields)
	}
}

// TestBoundFollowsAStepOfTheServersClock: a forward step of the server's
// clock, too short for a key to call it a silence, brings the store's
// bound closer in real time; the renewal after it says so, and the lease
// then stops its command sooner, not a step later than the store lets it
// go. The margin past the kill-after covers a step within the last third
// of a TTL, which no renewal sees.
func TestBoundFollowsAStepOfTheServersClock(t *testing.T) {
	t.Parallel()
	c, st := newClock(t)
	req := semaphore.Request{Key: "stepped", Permits: 1, TTL: 30 * time.Second, NoWait: true, MaxRuntime: 2 * time.Second, KillAfter: time.Second}
	sent := clock.Now()
	l, err := st.Acquire(ctxTimeout(t, 5*time.Second), req)
	if err != nil {
		t.Fatal(err)
	}
	before := l.Bound()
	const step = 3 * time.Second
	c.advance(step)
	if err := l.Renew(ctxTimeout(t, 5*time.Second)); err != nil {
		t.Fatalf("renewal after a step of %v: %v", step, err)
	}
	// The renewal was sent before it returned, and its bound counts from
	// when it was sent: at the latest, from now. (Taken before the call,
	// a loaded machine's delay until the send made it late.)
	renewed := clock.Now()
	// The store's bound, here: the grant's, less the step (this server's
	// clock moves only with the test's steps).
	want := renewed.Add(req.MaxRuntime + semaphore.Overrun(req.KillAfter, req.TTL) - step)
	if b := l.Bound(); !b.Before(before) || b.After(want) {
		t.Errorf("bound after a step of %v: +%v, want it moved to +%v at the latest (it was +%v)", step, b.Sub(sent), want.Sub(sent), before.Sub(sent))
	}
	if l.Deadline().After(l.Bound()) {
		t.Errorf("deadline +%v past the bound +%v", l.Deadline().Sub(sent), l.Bound().Sub(sent))
	}
	c.advance(1200 * time.Millisecond)
	other := semaphore.Request{Key: "stepped", Permits: 1, TTL: 30 * time.Second, NoWait: true}
	if _, err := st.Acquire(ctxTimeout(t, 5*time.Second), other); !errors.Is(err, semaphore.ErrBusy) {
		t.Errorf("no-wait caller before the stepped bound: got %v, want busy", err)
	}
}
