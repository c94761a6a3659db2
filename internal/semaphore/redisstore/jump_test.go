package redisstore

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/alicebob/miniredis/v2"

	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/redisstore/protocol"
	"github.com/semrun/semrun/internal/semaphore/semaphoretest"
)

// steppedStore is a store on a miniredis whose clock the test steps:
// TIME moves, keys do not expire, as when the Redis host's clock is set.
func steppedStore(t *testing.T) (*miniredis.Miniredis, *Store, *semaphoretest.Warnings, time.Time) {
	t.Helper()
	m := miniredis.RunT(t)
	start := time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC)
	m.SetTime(start)
	w := &semaphoretest.Warnings{}
	return m, newStore(t, "redis://"+m.Addr(), Options{Warnf: w.Warnf}), w, start
}

// TestClockStepForwardKeepsHolders: the Redis host's clock stepping
// forward past every lease sweeps no holder that still renews: the
// holders' leases are pushed back, a caller is told, and the holder's
// next renewal succeeds.
func TestClockStepForwardKeepsHolders(t *testing.T) {
	t.Parallel()
	m, store, w, start := steppedStore(t)
	ctx := context.Background()
	key := uniqueKey(t)
	const ttl = 10 * time.Second
	h, err := store.Acquire(ctx, semaphore.Request{Key: key, Permits: 1, TTL: ttl})
	if err != nil {
		t.Fatalf("Acquire: got error %v, want a permit", err)
	}
	// The step: past the holder's lease, within the keys' own life (the
	// lease and a second), which Redis would end on the stepped clock too.
	step := ttl + 500*time.Millisecond
	m.SetTime(start.Add(step))

	_, err = store.Acquire(ctx, semaphore.Request{Key: key, Permits: 1, TTL: ttl, NoWait: true})
	if !errors.Is(err, semaphore.ErrBusy) {
		t.Errorf("Acquire --no-wait after the clock stepped %v: got error %v, want ErrBusy (the holder kept)", step, err)
	}
	if got := strings.Join(w.Take(), "\n"); !strings.Contains(got, "clock stepped forward") || !strings.Contains(got, "pushed back 5.5s") {
		t.Errorf("warnings: got %q, want one that the clock stepped forward and the leases were pushed back 5.5s (the step less half the TTL)", got)
	}
	if err := h.Renew(ctx); err != nil {
		t.Errorf("Renew by the holder after the step: got error %v, want nil", err)
	}
	// 3/4 of a TTL after the step, the lease would have lapsed had the
	// renewal not counted.
	m.SetTime(start.Add(step + ttl*3/4))
	if err := h.Renew(ctx); err != nil {
		t.Errorf("Renew 3/4 TTL after the step: got error %v, want nil", err)
	}
}

// TestClockStepBackwardKeepsHolders: the clock going back keeps every
// lease (they only last longer) and is said.
func TestClockStepBackwardKeepsHolders(t *testing.T) {
	t.Parallel()
	m, store, w, start := steppedStore(t)
	ctx := context.Background()
	key := uniqueKey(t)
	h, err := store.Acquire(ctx, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second})
	if err != nil {
		t.Fatalf("Acquire: got error %v, want a permit", err)
	}
	m.SetTime(start.Add(-time.Minute))
	if _, err := store.Acquire(ctx, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second, NoWait: true}); !errors.Is(err, semaphore.ErrBusy) {
		t.Errorf("Acquire --no-wait after the clock went back: got error %v, want ErrBusy", err)
	}
	if got := strings.Join(w.Take(), "\n"); !strings.Contains(got, "clock went back 1m0s") {
		t.Errorf("warnLog: got %q, want one that the clock went back 1m0s", got)
	}
	if err := h.Renew(ctx); err != nil {
		t.Errorf("Renew after the clock went back: got error %v, want nil", err)
	}
}

// TestClockQuietKeyCrashBound: the price of the rule, measured: a holder
// that crashed on a key nobody touched for longer than half its TTL frees
// its permit half a TTL after the first caller that comes then.
func TestClockQuietKeyCrashBound(t *testing.T) {
	t.Parallel()
	m, store, _, start := steppedStore(t)
	ctx := context.Background()
	key := uniqueKey(t)
	const ttl = 10 * time.Second
	if _, err := store.Acquire(ctx, semaphore.Request{Key: key, Permits: 1, TTL: ttl}); err != nil {
		t.Fatalf("Acquire: got error %v, want a permit", err)
	}
	// The holder crashed at once; the key is quiet until just before its
	// lease would lapse.
	m.SetTime(start.Add(ttl - time.Second))
	req := semaphore.Request{Key: key, Permits: 1, TTL: ttl, NoWait: true}
	if _, err := store.Acquire(ctx, req); !errors.Is(err, semaphore.ErrBusy) {
		t.Fatalf("Acquire --no-wait before the lapse: got error %v, want ErrBusy", err)
	}
	// Its lease now lapses half a TTL after that caller, not at start+TTL.
	m.SetTime(start.Add(ttl - time.Second + ttl/2 - time.Millisecond))
	if _, err := store.Acquire(ctx, req); !errors.Is(err, semaphore.ErrBusy) {
		t.Errorf("Acquire --no-wait just before the pushed-back lapse: got error %v, want ErrBusy", err)
	}
	m.SetTime(start.Add(ttl - time.Second + ttl/2 + time.Millisecond))
	l, err := store.Acquire(ctx, req)
	if err != nil {
		t.Fatalf("Acquire --no-wait past the pushed-back lapse: got error %v, want a permit", err)
	}
	_ = l.Release(ctx)
}

// TestClockPushedBackLeasesKeepTheirKeys: whichever script comes first
// after a silence, even a renewal that finds its own permit gone, the keys
// live as long as the leases it pushed back (Redis expires keys on the
// same stepped clock).
func TestClockPushedBackLeasesKeepTheirKeys(t *testing.T) {
	t.Parallel()
	m, store, _, start := steppedStore(t)
	ctx := context.Background()
	key := uniqueKey(t)
	const ttl = 10 * time.Second
	if _, err := store.Acquire(ctx, semaphore.Request{Key: key, Permits: 2, TTL: ttl}); err != nil {
		t.Fatalf("Acquire: got error %v, want a permit", err)
	}
	step := ttl + 500*time.Millisecond // within the keys' life, the lease and a second
	m.SetTime(start.Add(step))
	m.FastForward(step)
	k := protocol.NewKeys(testPrefix, key)
	c := rawClient(t, m.Addr())
	if r, err := protocol.DecodeRenew(runScript(t, c, k, protocol.RenewArgs{ID: "NOT-A-HOLDER", TTL: ttl})); err != nil || r.Renewed {
		t.Fatalf("renew.lua of a permit nobody holds: got (%v, %v), want not renewed", r.Renewed, err)
	}
	z := members(t, c, k)
	if len(z) != 1 {
		t.Fatalf("holders after the renewal: got %v, want the one holder, pushed back", z)
	}
	leaseLeft := time.Duration(int64(z[0].Score)-start.Add(step).UnixMilli()) * time.Millisecond
	for _, name := range k.List() {
		left := m.TTL(name)
		if m.Exists(name) && left < leaseLeft {
			t.Errorf("key %s lives %v more, want at least the pushed-back lease, %v", name, left, leaseLeft)
		}
	}
}
