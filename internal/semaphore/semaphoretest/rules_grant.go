package semaphoretest

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

func ruleAtMostNGrants(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	const n = 3
	req := semaphore.Request{Key: key, Permits: n, TTL: 10 * time.Second, NoWait: true}

	var held []semaphore.Lease
	for range n {
		held = append(held, Hold(t, st, req))
	}
	if got := StatusOf(t, st, key).Held; got != n {
		t.Fatalf("holders after %d grants: got %d, want %d", n, got, n)
	}
	l, err := AcquireWithin(t, st, 5*time.Second, req)
	if !errors.Is(err, semaphore.ErrBusy) || l != nil {
		t.Fatalf("acquire %d of %d: got (%v, %v), want (nil, ErrBusy)", n+1, n, l, err)
	}
	if got := StatusOf(t, st, key).Held; got != n {
		t.Fatalf("holders after a busy acquire: got %d, want %d", got, n)
	}

	Release(t, held[0])
	held[0] = Hold(t, st, req)
	if _, err := AcquireWithin(t, st, 5*time.Second, req); !errors.Is(err, semaphore.ErrBusy) {
		t.Fatalf("acquire after release and re-grant: got %v, want ErrBusy", err)
	}
	if got := StatusOf(t, st, key).Held; got != n {
		t.Fatalf("holders at the end: got %d, want %d", got, n)
	}
}

func ruleConcurrentHoldersNeverExceedN(t *testing.T, b *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	const n, workers, rounds = 3, 8, 3
	// Two stores on one backend, as two processes would have.
	peak, tokens := contend(t, []semaphore.Store{st, b.Open(nil)}, key, n, make([]int, workers), rounds)
	if peak > n || peak < 1 {
		t.Errorf("most holders at once: got %d, want between 1 and %d", peak, n)
	}
	slices.Sort(tokens)
	if got := len(slices.Compact(slices.Clone(tokens))); got != workers*rounds {
		t.Errorf("distinct fencing tokens: got %d, want %d (one per grant)", got, workers*rounds)
	}
	if got := StatusOf(t, st, key); got.Held != 0 || len(got.Waiters) != 0 {
		t.Errorf("Status once every worker is done: got %+v, want no holder and no waiter", got)
	}
}

// contend runs a worker for each weight (0 is 1), each taking a permit of
// key, capacity n, rounds times in a row from the stores in turn, holding
// it 2ms. It returns the most permits taken at once, and the tokens
// granted.
func contend(t *testing.T, stores []semaphore.Store, key string, n int, weights []int, rounds int) (int64, []int64) {
	t.Helper()
	var (
		taken, peak atomic.Int64
		mu          sync.Mutex
		tokens      []int64
		wg          sync.WaitGroup
		errs        = make(chan error, len(weights)*rounds)
	)
	for w, weight := range weights {
		s, req := stores[w%len(stores)], semaphore.Request{Key: key, Permits: n, Weight: weight, TTL: 10 * time.Second}
		wg.Go(func() {
			for range rounds {
				ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
				l, err := s.Acquire(ctx, req)
				cancel()
				if err != nil {
					errs <- fmt.Errorf("waiting acquire of weight %d: got %w, want a permit", weight, err)
					return
				}
				c := taken.Add(int64(req.Takes()))
				for p := peak.Load(); c > p && !peak.CompareAndSwap(p, c); p = peak.Load() {
				}
				mu.Lock()
				tokens = append(tokens, l.Token())
				mu.Unlock()
				time.Sleep(2 * time.Millisecond)
				taken.Add(-int64(req.Takes()))
				if err := l.Release(context.Background()); err != nil {
					errs <- fmt.Errorf("release: got %w, want nil", err)
					return
				}
			}
		})
	}
	if !within(t, 70*time.Second, "every worker done", wg.Wait) {
		t.FailNow()
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	return peak.Load(), tokens
}

func ruleFencingTokensIncrease(t *testing.T, b *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	other := b.Open(nil) // another caller on the same backend
	req := semaphore.Request{Key: key, Permits: 2, TTL: 10 * time.Second}

	var last int64
	grant := func(s semaphore.Store, when string) semaphore.Lease {
		t.Helper()
		l := Hold(t, s, req)
		if l.Token() <= last {
			t.Fatalf("token %s: got %d, want more than the previous %d", when, l.Token(), last)
		}
		last = l.Token()
		return l
	}

	a := grant(st, "first grant")
	Release(t, a)
	a = grant(st, "after a release")
	c := grant(other, "second concurrent holder, from another store")
	Release(t, a)
	a = grant(st, "in the permit just freed")
	Release(t, c)
	Release(t, a)
	Release(t, grant(other, "from another store, after all released"))
	Release(t, grant(st, "after all that"))
	Hold(t, st, semaphore.Request{Key: UniqueKey(t), Permits: 1, TTL: 10 * time.Second})
	grant(st, "after a grant of another key")
}

func ruleReleaseTwice(t *testing.T, b *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second}

	a := Hold(t, st, req)
	Release(t, a)
	Release(t, a)
	if got := StatusOf(t, st, key).Held; got != 0 {
		t.Fatalf("holders after releasing twice: got %d, want 0", got)
	}
	c := Hold(t, st, req)
	Release(t, a) // a stale lease must not free c's permit
	if s := StatusOf(t, st, key); s.Held != 1 || s.Holders[0].Token != c.Token() {
		t.Fatalf("holders after a stale release: got %+v, want only the new holder (token %d)", s.Holders, c.Token())
	}
	if _, err := AcquireWithin(t, st, 5*time.Second, semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true}); !errors.Is(err, semaphore.ErrBusy) {
		t.Fatalf("no-wait Acquire after a stale release: got %v, want ErrBusy", err)
	}
	if err := c.Renew(Context(t, 5*time.Second)); err != nil {
		t.Fatalf("Renew of the new holder after a stale release: got %v, want nil", err)
	}
	if err := a.Renew(Context(t, 5*time.Second)); !errors.Is(err, semaphore.ErrLost) {
		t.Fatalf("Renew of a released lease: got %v, want ErrLost", err)
	}
}

// ruleWeightsTakePermits: a holder of weight K takes K of the N permits.
func ruleWeightsTakePermits(t *testing.T, b *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	req := func(weight int) semaphore.Request {
		return semaphore.Request{Key: key, Permits: 3, Weight: weight, TTL: 10 * time.Second, NoWait: true,
			Holder: semaphore.HolderInfo{Host: "h", PID: weight, Command: "c"}}
	}
	heavy := Hold(t, st, req(2))
	if s := StatusOf(t, st, key); s.Held != 2 || len(s.Holders) != 1 || s.Holders[0].Weight != 2 || s.Holders[0].Token != heavy.Token() {
		t.Fatalf("Status with a holder of weight 2: got %+v, want held 2, one holder of weight 2", s)
	}
	if _, err := AcquireWithin(t, b.Open(nil), 5*time.Second, req(2)); !errors.Is(err, semaphore.ErrBusy) {
		t.Errorf("no-wait weight 2 with 2 of 3 permits held: got %v, want ErrBusy", err)
	}
	light := Hold(t, st, req(0)) // weight 0 is 1
	s := StatusOf(t, st, key)
	weights := map[int64]int{}
	for _, h := range s.Holders {
		weights[h.Token] = h.Weight
	}
	if want := map[int64]int{heavy.Token(): 2, light.Token(): 1}; s.Held != 3 || !maps.Equal(weights, want) {
		t.Errorf("Status with holders of weight 2 and 0: got held %d, weights by token %v, want held 3, %v", s.Held, weights, want)
	}
	if _, err := AcquireWithin(t, st, 5*time.Second, req(1)); !errors.Is(err, semaphore.ErrBusy) {
		t.Errorf("no-wait weight 1 with 3 of 3 permits held: got %v, want ErrBusy", err)
	}
	Release(t, heavy)
	full := req(3)
	full.Key = UniqueKey(t)
	Hold(t, st, full) // weight N: every permit
	if s := StatusOf(t, st, full.Key); s.Held != 3 || len(s.Holders) != 1 {
		t.Errorf("Status with a holder of weight N: got %+v, want held 3 by one holder", s)
	}
	if s := StatusOf(t, st, key); s.Held != 1 {
		t.Errorf("Status after the holder of weight 2 released: got held %d, want 1", s.Held)
	}
	Release(t, light)
	Hold(t, st, req(3))
}

// ruleWeightedHoldersNeverExceedN: under concurrency, the weights of
// the holders never add up to more than N.
func ruleWeightedHoldersNeverExceedN(t *testing.T, b *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	const n, rounds = 4, 3
	peak, _ := contend(t, []semaphore.Store{st, b.Open(nil)}, key, n, []int{1, 2, 3, 4, 1, 2, 3, 1}, rounds)
	if peak > n || peak < 1 {
		t.Errorf("most permits taken at once: got %d, want between 1 and %d", peak, n)
	}
	if got := StatusOf(t, st, key); got.Held != 0 || len(got.Waiters) != 0 {
		t.Errorf("Status once every worker is done: got %+v, want no holder and no waiter", got)
	}
}
