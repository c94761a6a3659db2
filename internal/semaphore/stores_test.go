package semaphore_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
)

// The tests in this file are the rules every Store obeys: each runs once per
// store, as the parallel subtests Redis and Local, against a backend of its
// own (a redis-server, a lock directory).

// storeKind is one implementation of semaphore.Store.
type storeKind struct {
	name string
	// leases is true when permits are leases that lapse: holders show a
	// positive ExpiresIn, and renewing a released permit reports ErrLost.
	leases bool
	// inLine is true when waiters have a place in line the store keeps:
	// they are served strictly in order, and OnWait and Status show their
	// positions.
	inLine bool
	// start gives t an empty backend of its own.
	start func(t *testing.T) *storeBackend
}

// storeBackend is where one kind of store keeps its semaphores.
type storeBackend struct {
	kind storeKind
	// open returns a new store on the backend, closed when t ends. All the
	// stores of one backend share its semaphores.
	open func(warnf func(format string, args ...any)) semaphore.Store
	// written lists what the stores wrote: Redis keys, lock directory entries.
	written func() []string
}

func storeKinds() []storeKind {
	return []storeKind{
		{
			name:   "Redis",
			leases: true,
			inLine: true,
			start: func(t *testing.T) *storeBackend {
				srv := redistest.New(t)
				raw := rawClient(t, srv.Addr)
				return &storeBackend{
					open: func(warnf func(string, ...any)) semaphore.Store {
						return newStore(t, srv.URL(), semaphore.RedisOptions{Warnf: warnf})
					},
					written: func() []string { return scanKeys(t, raw, "*") },
				}
			},
		},
		{
			name: "Local",
			start: func(t *testing.T) *storeBackend {
				dir := t.TempDir()
				return &storeBackend{
					open: func(warnf func(string, ...any)) semaphore.Store {
						return newLocal(t, dir, warnf)
					},
					written: func() []string { return dirNames(t, dir) },
				}
			},
		},
	}
}

// forEachStore runs test as a parallel subtest for each kind of store, with
// a fresh backend and one store opened on it.
func forEachStore(t *testing.T, test func(t *testing.T, b *storeBackend, st semaphore.Store)) {
	t.Parallel()
	for _, kind := range storeKinds() {
		t.Run(kind.name, func(t *testing.T) {
			t.Parallel()
			b := kind.start(t)
			b.kind = kind
			test(t, b, b.open(nil))
		})
	}
}

// newLocal opens a host-local store on dir, closed when t ends.
func newLocal(t testing.TB, dir string, warnf func(string, ...any)) *semaphore.Local {
	t.Helper()
	s, err := semaphore.NewLocal(semaphore.LocalOptions{Dir: dir, Warnf: warnf})
	if err != nil {
		t.Fatalf("NewLocal(%q): got error %v, want nil", dir, err)
	}
	t.Cleanup(func() { _ = s.Close() })
	return s
}

// dirNames lists the names in dir, sorted.
func dirNames(t testing.TB, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatalf("ReadDir(%s): got error %v, want nil", dir, err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// statusOf returns the status of one key.
func statusOf(t testing.TB, st semaphore.Store, key string) semaphore.KeyStatus {
	t.Helper()
	status, err := st.Status(ctxTimeout(t, 5*time.Second), []string{key})
	if err != nil {
		t.Fatalf("Status(%q): got error %v, want nil", key, err)
	}
	if len(status) != 1 || status[0].Key != key {
		t.Fatalf("Status(%q): got %+v, want one entry for the key", key, status)
	}
	return status[0]
}

func TestStoreAtMostNGrants(t *testing.T) {
	forEachStore(t, func(t *testing.T, _ *storeBackend, st semaphore.Store) {
		key := uniqueKey(t)
		const n = 3
		req := semaphore.Request{Key: key, Permits: n, TTL: 10 * time.Second, NoWait: true}

		var held []semaphore.Lease
		for range n {
			held = append(held, hold(t, st, req))
		}
		if got := statusOf(t, st, key).Held; got != n {
			t.Fatalf("holders after %d grants: got %d, want %d", n, got, n)
		}
		l, err := st.Acquire(ctxTimeout(t, 5*time.Second), req)
		if !errors.Is(err, semaphore.ErrBusy) || l != nil {
			t.Fatalf("acquire %d of %d: got (%v, %v), want (nil, ErrBusy)", n+1, n, l, err)
		}
		if got := statusOf(t, st, key).Held; got != n {
			t.Fatalf("holders after a busy acquire: got %d, want %d", got, n)
		}

		release(t, held[0])
		held[0] = hold(t, st, req)
		if _, err := st.Acquire(ctxTimeout(t, 5*time.Second), req); !errors.Is(err, semaphore.ErrBusy) {
			t.Fatalf("acquire after release and re-grant: got %v, want ErrBusy", err)
		}
		if got := statusOf(t, st, key).Held; got != n {
			t.Fatalf("holders at the end: got %d, want %d", got, n)
		}
	})
}

func TestStoreConcurrentHoldersNeverExceedN(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *storeBackend, st semaphore.Store) {
		key := uniqueKey(t)
		const n, workers, rounds = 3, 8, 3
		// Two stores on one backend, as two processes would have.
		stores := []semaphore.Store{st, b.open(nil)}

		var (
			current, peak atomic.Int64
			mu            sync.Mutex
			tokens        []int64
			wg            sync.WaitGroup
			errs          = make(chan error, workers*rounds)
		)
		for w := range workers {
			s := stores[w%len(stores)]
			wg.Go(func() {
				for range rounds {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					l, err := s.Acquire(ctx, semaphore.Request{Key: key, Permits: n, TTL: 10 * time.Second})
					cancel()
					if err != nil {
						errs <- fmt.Errorf("waiting acquire: got %w, want a permit", err)
						return
					}
					c := current.Add(1)
					for p := peak.Load(); c > p && !peak.CompareAndSwap(p, c); p = peak.Load() {
					}
					mu.Lock()
					tokens = append(tokens, l.Token())
					mu.Unlock()
					time.Sleep(2 * time.Millisecond)
					current.Add(-1)
					if err := l.Release(context.Background()); err != nil {
						errs <- fmt.Errorf("release: got %w, want nil", err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if got := peak.Load(); got > n || got < 1 {
			t.Errorf("most holders at once: got %d, want between 1 and %d", got, n)
		}
		slices.Sort(tokens)
		if got := len(slices.Compact(slices.Clone(tokens))); got != workers*rounds {
			t.Errorf("distinct fencing tokens: got %d, want %d (one per grant)", got, workers*rounds)
		}
		if got := statusOf(t, st, key); got.Held != 0 || len(got.Waiters) != 0 {
			t.Errorf("Status once every worker is done: got %+v, want no holder and no waiter", got)
		}
	})
}

func TestStoreFencingTokensIncrease(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *storeBackend, st semaphore.Store) {
		key := uniqueKey(t)
		other := b.open(nil) // another caller on the same backend
		req := semaphore.Request{Key: key, Permits: 2, TTL: 10 * time.Second}

		var last int64
		grant := func(s semaphore.Store, when string) semaphore.Lease {
			t.Helper()
			l := hold(t, s, req)
			if l.Token() <= last {
				t.Fatalf("token %s: got %d, want more than the previous %d", when, l.Token(), last)
			}
			last = l.Token()
			return l
		}

		a := grant(st, "first grant")
		release(t, a)
		a = grant(st, "after a release")
		c := grant(other, "second concurrent holder, from another store")
		release(t, a)
		a = grant(st, "in the seat just freed")
		release(t, c)
		release(t, a)
		release(t, grant(other, "from another store, after all released"))
		release(t, grant(st, "after all that"))
		hold(t, st, semaphore.Request{Key: uniqueKey(t), Permits: 1, TTL: 10 * time.Second})
		grant(st, "after a grant of another key")
	})
}

func TestStoreWaiterGetsReleasedSeat(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *storeBackend, st semaphore.Store) {
		key := uniqueKey(t)
		a := hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second})

		var waits []semaphore.WaitState
		onWait, waiting := signal()
		got, _ := startAcquire(t, st, semaphore.Request{
			Key: key, Permits: 1, TTL: 10 * time.Second,
			OnWait: func(s semaphore.WaitState) {
				waits = append(waits, s)
				onWait()
			},
		}, 30*time.Second)
		select {
		case r := <-got:
			t.Fatalf("waiting Acquire with the only seat held: got (%v, %v), want it to wait", r.l, r.err)
		case <-waiting:
		case <-time.After(10 * time.Second):
			t.Fatalf("waiting Acquire with the only seat held: OnWait not called after 10s, want it called")
		}

		release(t, a)
		r := receive(t, got, 10*time.Second, "waiting Acquire after the holder released")
		if r.err != nil {
			t.Fatalf("waiting Acquire after the holder released: got %v, want a permit", r.err)
		}
		checkWaits(t, b.kind, waits, semaphore.WaitState{Held: 1, Capacity: 1, Position: 1, Waiting: 1})
		if r.l.Token() <= a.Token() {
			t.Errorf("token of the waiter: got %d, want more than the first holder's %d", r.l.Token(), a.Token())
		}
		if s := statusOf(t, st, key); s.Held != 1 || s.Holders[0].Token != r.l.Token() || len(s.Waiters) != 0 {
			t.Errorf("Status after the waiter got in: got %+v, want one holder with token %d and no waiter", s, r.l.Token())
		}
		if _, err := st.Acquire(ctxTimeout(t, 5*time.Second), semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true}); !errors.Is(err, semaphore.ErrBusy) {
			t.Errorf("no-wait Acquire while the waiter holds: got %v, want ErrBusy", err)
		}
	})
}

// checkWaits checks the OnWait calls of a lone waiter that waited for one
// state, want: a store that keeps a line reports exactly want; one that
// does not may know less (Position and Waiting 0) and learn its position
// later, but says the same Held and Capacity and never repeats itself.
func checkWaits(t *testing.T, kind storeKind, got []semaphore.WaitState, want semaphore.WaitState) {
	t.Helper()
	if kind.inLine {
		if !slices.Equal(got, []semaphore.WaitState{want}) {
			t.Errorf("OnWait calls: got %+v, want [%+v]", got, want)
		}
		return
	}
	if len(got) == 0 {
		t.Fatalf("OnWait calls: got none, want at least one")
	}
	for i, s := range got {
		if s.Held != want.Held || s.Capacity != want.Capacity || s.Position < 0 || s.Position > want.Position || s.Waiting < 0 || s.Waiting > want.Waiting {
			t.Errorf("OnWait call %d: got %+v, want held %d, capacity %d, position and waiting unknown (0) or as in %+v", i, s, want.Held, want.Capacity, want)
		}
		if i > 0 && s == got[i-1] {
			t.Errorf("OnWait calls %d and %d: got %+v twice, want a call only when the state changes", i-1, i, s)
		}
	}
}

func TestStoreAcquireTimeoutWhileBusy(t *testing.T) {
	forEachStore(t, func(t *testing.T, _ *storeBackend, st semaphore.Store) {
		key := uniqueKey(t)
		req := semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second}
		a := hold(t, st, req)

		start := time.Now()
		l, err := st.Acquire(ctxTimeout(t, 300*time.Millisecond), req)
		if !errors.Is(err, context.DeadlineExceeded) || l != nil {
			t.Fatalf("Acquire while busy until ctx deadline: got (%v, %v), want (nil, context.DeadlineExceeded)", l, err)
		}
		if errors.Is(err, semaphore.ErrUnreachable) || errors.Is(err, semaphore.ErrBusy) {
			t.Errorf("Acquire while busy until ctx deadline: got %v, want neither ErrUnreachable nor ErrBusy", err)
		}
		if d := time.Since(start); d > 5*time.Second {
			t.Errorf("Acquire returned after %v, want soon after its 300ms deadline", d)
		}

		ctx, cancel := context.WithCancel(context.Background())
		stop := time.AfterFunc(100*time.Millisecond, cancel)
		t.Cleanup(func() { stop.Stop(); cancel() })
		if l, err := st.Acquire(ctx, req); !errors.Is(err, context.Canceled) || l != nil {
			t.Fatalf("Acquire while busy until ctx canceled: got (%v, %v), want (nil, context.Canceled)", l, err)
		}

		s := statusOf(t, st, key)
		if s.Held != 1 || len(s.Holders) != 1 || s.Holders[0].Token != a.Token() || len(s.Waiters) != 0 {
			t.Errorf("Status after the given-up waits: got %+v, want only the first holder (token %d) and no waiter", s, a.Token())
		}
		// The waits that gave up hold nothing: once the holder is gone,
		// the seat is free at once.
		release(t, a)
		b := hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second})
		if b.Token() <= a.Token() {
			t.Errorf("token after the given-up waits: got %d, want more than %d", b.Token(), a.Token())
		}
	})
}

func TestStoreReleaseTwice(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *storeBackend, st semaphore.Store) {
		key := uniqueKey(t)
		req := semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second}

		a := hold(t, st, req)
		release(t, a)
		release(t, a)
		if got := statusOf(t, st, key).Held; got != 0 {
			t.Fatalf("holders after releasing twice: got %d, want 0", got)
		}
		c := hold(t, st, req)
		release(t, a) // a stale lease must not free c's seat
		if s := statusOf(t, st, key); s.Held != 1 || s.Holders[0].Token != c.Token() {
			t.Fatalf("holders after a stale release: got %+v, want only the new holder (token %d)", s.Holders, c.Token())
		}
		if _, err := st.Acquire(ctxTimeout(t, 5*time.Second), semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true}); !errors.Is(err, semaphore.ErrBusy) {
			t.Fatalf("no-wait Acquire after a stale release: got %v, want ErrBusy", err)
		}
		if err := c.Renew(ctxTimeout(t, 5*time.Second)); err != nil {
			t.Fatalf("Renew of the new holder after a stale release: got %v, want nil", err)
		}
		if err := a.Renew(ctxTimeout(t, 5*time.Second)); !errors.Is(err, semaphore.ErrLost) {
			t.Fatalf("Renew of a released lease: got %v, want ErrLost", err)
		}
	})
}

func TestStoreCapacityDisagreement(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *storeBackend, _ semaphore.Store) {
		w := &warnings{}
		st := b.open(w.Warnf)
		key := uniqueKey(t)
		req := func(n int) semaphore.Request {
			return semaphore.Request{Key: key, Permits: n, TTL: 10 * time.Second, NoWait: true}
		}
		warning := func(asked, previous int) string {
			return fmt.Sprintf("key %q: this call asks for %d permits, the previous caller asked for %d", key, asked, previous)
		}
		expect := func(when string, want ...string) {
			t.Helper()
			if got := w.take(); !slices.Equal(got, want) {
				t.Errorf("warnings %s: got %q, want %q", when, got, want)
			}
		}

		hold(t, st, req(2))
		hold(t, st, req(2))
		expect("when all callers ask n=2")

		hold(t, st, req(3)) // 2 held, 3 allowed: granted
		expect("after a caller asks n=3 where n=2 was asked", warning(3, 2))

		// A waiting caller that disagrees looks many times but warns once.
		wait := req(1)
		wait.NoWait = false
		if _, err := st.Acquire(ctxTimeout(t, 400*time.Millisecond), wait); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("waiting Acquire n=1 with 3 held: got %v, want context.DeadlineExceeded", err)
		}
		expect("from one waiting Acquire that disagrees", warning(1, 3))
		if s := statusOf(t, st, key); s.Capacity != 1 {
			t.Errorf("Status capacity after a caller asked n=1 and was refused: got %d, want 1 (the latest asked, granted or not)", s.Capacity)
		}

		// The store never admits more than the largest N asked for.
		if _, err := st.Acquire(ctxTimeout(t, 5*time.Second), req(3)); !errors.Is(err, semaphore.ErrBusy) {
			t.Fatalf("Acquire n=3 with 3 held: got %v, want ErrBusy", err)
		}
		if s := statusOf(t, st, key); s.Held != 3 || s.Capacity != 3 {
			t.Errorf("Status: got held %d capacity %d, want held 3 (the largest n asked), capacity 3", s.Held, s.Capacity)
		}
		expect("after n=3 where n=1 was asked last", warning(3, 1))

		// A waiter behind another waiter: both disagree with the last
		// caller (n=3), and each warns once.
		first := req(1)
		first.NoWait = false
		onWait, waiting := signal()
		first.OnWait = func(semaphore.WaitState) { onWait() }
		firstDone, _ := startAcquire(t, st, first, 30*time.Second)
		select {
		case <-waiting:
		case r := <-firstDone:
			t.Fatalf("waiting Acquire n=1 with 3 held: got (%v, %v), want it to wait", r.l, r.err)
		case <-time.After(10 * time.Second):
			t.Fatalf("waiting Acquire n=1 with 3 held: OnWait not called after 10s, want it called")
		}
		second := req(2)
		second.NoWait = false
		if _, err := st.Acquire(ctxTimeout(t, 300*time.Millisecond), second); !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("waiting Acquire n=2 behind a waiter, 3 held: got %v, want context.DeadlineExceeded", err)
		}
		got := w.take()
		if len(got) == 0 || got[0] != warning(1, 3) {
			t.Fatalf("warnings from a waiter asking n=1 after n=3: got %q, want %q first", got, warning(1, 3))
		}
		if !slices.Equal(got[1:], []string{warning(2, 1)}) {
			t.Errorf("warnings after the first waiter: got %q, want [%q]", got[1:], warning(2, 1))
		}
	})
}

func TestStoreStatus(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *storeBackend, st semaphore.Store) {
		ctx := ctxTimeout(t, 10*time.Second)
		key, idle := uniqueKey(t), uniqueKey(t)

		infoA := semaphore.HolderInfo{Host: "host-a", PID: 101, Command: "backup --full /srv"}
		infoB := semaphore.HolderInfo{Host: "host-b", PID: 202, Command: `say "hi there" {x} %d ü`}
		a := hold(t, st, semaphore.Request{Key: key, Permits: 2, TTL: 10 * time.Second, Holder: infoA})
		c := hold(t, b.open(nil), semaphore.Request{Key: key, Permits: 2, TTL: 20 * time.Second, Holder: infoB})

		status, err := st.Status(ctx, []string{key, idle})
		if err != nil {
			t.Fatalf("Status: got error %v, want nil", err)
		}
		if len(status) != 2 {
			t.Fatalf("Status of 2 keys: got %d entries, want 2", len(status))
		}
		s := status[0]
		if s.Key != key || s.Capacity != 2 || s.Held != 2 || len(s.Holders) != 2 || len(s.Waiters) != 0 {
			t.Fatalf("Status: got key %q capacity %d held %d holders %d waiters %d, want %q, 2, 2, 2, 0",
				s.Key, s.Capacity, s.Held, len(s.Holders), len(s.Waiters), key)
		}
		want := map[int64]struct {
			info semaphore.HolderInfo
			ttl  time.Duration
		}{a.Token(): {infoA, 10 * time.Second}, c.Token(): {infoB, 20 * time.Second}}
		for _, h := range s.Holders {
			w, ok := want[h.Token]
			if !ok {
				t.Errorf("holder token: got %d, want one of %d, %d", h.Token, a.Token(), c.Token())
				continue
			}
			delete(want, h.Token)
			if h.HolderInfo != w.info {
				t.Errorf("holder %d: got %+v, want %+v", h.Token, h.HolderInfo, w.info)
			}
			if h.Permits != 2 {
				t.Errorf("holder %d permits: got %d, want 2", h.Token, h.Permits)
			}
			if b.kind.leases && (h.ExpiresIn <= 0 || h.ExpiresIn > w.ttl) {
				t.Errorf("holder %d ExpiresIn: got %v, want in (0, %v]", h.Token, h.ExpiresIn, w.ttl)
			}
			if !b.kind.leases && h.ExpiresIn != 0 {
				t.Errorf("holder %d ExpiresIn: got %v, want 0 (a permit that does not expire while its holder lives)", h.Token, h.ExpiresIn)
			}
			if h.Age < 0 || h.Age > 5*time.Second {
				t.Errorf("holder %d Age: got %v, want in [0, 5s]", h.Token, h.Age)
			}
		}
		if i := status[1]; i.Key != idle || i.Capacity != 0 || i.Held != 0 || i.Holders == nil || len(i.Holders) != 0 || i.Waiters == nil || len(i.Waiters) != 0 {
			t.Errorf("Status of an unused key: got %+v, want key %q, capacity 0, held 0, empty non-nil holders and waiters", i, idle)
		}
		out, err := json.Marshal(status[1])
		if err != nil {
			t.Fatalf("json.Marshal(status): %v", err)
		}
		if !strings.Contains(string(out), `"holders":[]`) || !strings.Contains(string(out), `"waiters":[]`) {
			t.Errorf("JSON of an unused key: got %s, want \"holders\":[] and \"waiters\":[]", out)
		}

		// Released permits leave the status at once.
		release(t, a)
		if s := statusOf(t, st, key); s.Held != 1 || len(s.Holders) != 1 || s.Holders[0].Token != c.Token() || s.Holders[0].HolderInfo != infoB {
			t.Errorf("Status after a holder released: got %+v, want only the holder with token %d", s, c.Token())
		}

		// Capacity is what the latest caller asked for, granted or not.
		hold(t, st, semaphore.Request{Key: key, Permits: 3, TTL: 10 * time.Second})
		if s := statusOf(t, st, key); s.Capacity != 3 || s.Held != 2 {
			t.Errorf("Status after a caller asked 3: got capacity %d held %d, want 3, 2", s.Capacity, s.Held)
		}
		hold(t, st, semaphore.Request{Key: key, Permits: 3, TTL: 10 * time.Second})
		if _, err := st.Acquire(ctx, semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true}); !errors.Is(err, semaphore.ErrBusy) {
			t.Fatalf("Acquire asking n=1 with 3 held: got %v, want ErrBusy", err)
		}
		if s := statusOf(t, st, key); s.Capacity != 1 || s.Held != 3 {
			t.Errorf("Status after callers asked 3 then 1: got capacity %d held %d, want 1, 3", s.Capacity, s.Held)
		}
	})
}

func TestStoreRefusesInvalidRequests(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *storeBackend, st semaphore.Store) {
		ctx := ctxTimeout(t, 10*time.Second)
		var problems []string
		for _, req := range []semaphore.Request{
			{Key: "", Permits: 1, TTL: 5 * time.Second},
			{Key: "ctl\nkey", Permits: 1, TTL: 5 * time.Second},
			{Key: "bad\xffutf8", Permits: 1, TTL: 5 * time.Second},
			{Key: strings.Repeat("k", semaphore.MaxKeyLen+1), Permits: 1, TTL: 5 * time.Second},
			{Key: "zero-permits", Permits: 0, TTL: 5 * time.Second},
			{Key: "negative-permits", Permits: -1, TTL: 5 * time.Second},
			{Key: "zero-ttl", Permits: 1, TTL: 0},
			{Key: "sub-ms-ttl", Permits: 1, TTL: 500 * time.Microsecond},
			{Key: "weight-above-permits", Permits: 2, Weight: 3, TTL: 5 * time.Second},
			{Key: "negative-weight", Permits: 2, Weight: -1, TTL: 5 * time.Second},
		} {
			for _, noWait := range []bool{true, false} {
				req.NoWait = noWait
				l, err := st.Acquire(ctx, req)
				if err == nil || errors.Is(err, semaphore.ErrBusy) || l != nil {
					problems = append(problems, fmt.Sprintf("Acquire(key %.20q, n=%d, weight=%d, ttl=%v, nowait=%v): got (lease %v, %v), want a validation error",
						req.Key, req.Permits, req.Weight, req.TTL, noWait, l != nil, err))
				}
			}
		}
		if written := b.written(); len(written) > 0 {
			problems = append(problems, fmt.Sprintf("written: got %q, want nothing", written))
		}
		if len(problems) > 0 {
			t.Fatalf("Acquire must refuse invalid requests and write nothing:\n%s", strings.Join(problems, "\n"))
		}
	})
}

// TestStoreWaitersServedInOrder: waiters in separate stores, as separate
// processes would be, each started once the one before it is in line, get
// the permit in the order they came where the store keeps a line. Every
// store serves them all.
func TestStoreWaitersServedInOrder(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *storeBackend, st semaphore.Store) {
		key := uniqueKey(t)
		const waiters = 5
		h := hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second})

		// A store each, as a process each would have.
		stores := make([]semaphore.Store, waiters)
		for i := range stores {
			stores[i] = b.open(nil)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		var (
			wg     sync.WaitGroup
			mu     sync.Mutex
			order  []int
			tokens []int64
			errs   = make(chan error, waiters)
		)
		t.Cleanup(func() { cancel(); wg.Wait() }) // before the stores close
		for i, s := range stores {
			wg.Go(func() {
				l, err := s.Acquire(ctx, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second, Holder: semaphore.HolderInfo{PID: 100 + i}})
				if err != nil {
					errs <- fmt.Errorf("waiter %d: got %w, want a permit", i, err)
					return
				}
				mu.Lock()
				order = append(order, i)
				tokens = append(tokens, l.Token())
				mu.Unlock()
				time.Sleep(10 * time.Millisecond)
				if err := l.Release(context.Background()); err != nil {
					errs <- fmt.Errorf("waiter %d: release: got %w, want nil", i, err)
				}
			})
			waitFor(t, 10*time.Second, fmt.Sprintf("waiter %d in Status", i), func() bool { return len(statusOf(t, st, key).Waiters) == i+1 })
			time.Sleep(100 * time.Millisecond)
		}
		release(t, h)
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if len(order) != waiters {
			t.Fatalf("waiters served: got %v, want all %d", order, waiters)
		}
		if b.kind.inLine {
			if want := []int{0, 1, 2, 3, 4}; !slices.Equal(order, want) {
				t.Errorf("order in which the waiters got the permit: got %v, want %v (the order they came)", order, want)
			}
		}
		if !slices.IsSorted(tokens) {
			t.Errorf("tokens in the order of the grants: got %v, want rising", tokens)
		}
		if s := statusOf(t, st, key); s.Held != 0 || len(s.Waiters) != 0 {
			t.Errorf("Status once every waiter is done: got %+v, want no holder and no waiter", s)
		}
	})
}

// TestStoreWeightsTakeSeats: a permit of weight K takes K of the N seats.
func TestStoreWeightsTakeSeats(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *storeBackend, st semaphore.Store) {
		key := uniqueKey(t)
		req := func(weight int) semaphore.Request {
			return semaphore.Request{Key: key, Permits: 3, Weight: weight, TTL: 10 * time.Second, NoWait: true,
				Holder: semaphore.HolderInfo{Host: "h", PID: weight, Command: "c"}}
		}
		heavy := hold(t, st, req(2))
		if s := statusOf(t, st, key); s.Held != 2 || len(s.Holders) != 1 || s.Holders[0].Weight != 2 || s.Holders[0].Token != heavy.Token() {
			t.Fatalf("Status with a holder of weight 2: got %+v, want held 2, one holder of weight 2", s)
		}
		if _, err := b.open(nil).Acquire(ctxTimeout(t, 5*time.Second), req(2)); !errors.Is(err, semaphore.ErrBusy) {
			t.Errorf("no-wait weight 2 with 2 of 3 seats held: got %v, want ErrBusy", err)
		}
		light := hold(t, st, req(0)) // weight 0 is 1
		s := statusOf(t, st, key)
		weights := map[int64]int{}
		for _, h := range s.Holders {
			weights[h.Token] = h.Weight
		}
		if want := map[int64]int{heavy.Token(): 2, light.Token(): 1}; s.Held != 3 || !maps.Equal(weights, want) {
			t.Errorf("Status with holders of weight 2 and 0: got held %d, weights by token %v, want held 3, %v", s.Held, weights, want)
		}
		if _, err := st.Acquire(ctxTimeout(t, 5*time.Second), req(1)); !errors.Is(err, semaphore.ErrBusy) {
			t.Errorf("no-wait weight 1 with 3 of 3 seats held: got %v, want ErrBusy", err)
		}
		release(t, heavy)
		full := req(3)
		full.Key = uniqueKey(t)
		hold(t, st, full) // weight N: every seat
		if s := statusOf(t, st, full.Key); s.Held != 3 || len(s.Holders) != 1 {
			t.Errorf("Status with a holder of weight N: got %+v, want held 3 by one holder", s)
		}
		if s := statusOf(t, st, key); s.Held != 1 {
			t.Errorf("Status after the holder of weight 2 released: got held %d, want 1", s.Held)
		}
		release(t, light)
		hold(t, st, req(3))
	})
}

// TestStoreWeightedHoldersNeverExceedN: under concurrency, the weights of
// the holders never add up to more than N.
func TestStoreWeightedHoldersNeverExceedN(t *testing.T) {
	forEachStore(t, func(t *testing.T, b *storeBackend, st semaphore.Store) {
		key := uniqueKey(t)
		const n, rounds = 4, 3
		weights := []int{1, 2, 3, 4, 1, 2, 3, 1}
		stores := []semaphore.Store{st, b.open(nil)}

		var (
			seats, peak atomic.Int64
			wg          sync.WaitGroup
			errs        = make(chan error, len(weights)*rounds)
		)
		for w, weight := range weights {
			s := stores[w%len(stores)]
			wg.Go(func() {
				for range rounds {
					ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
					l, err := s.Acquire(ctx, semaphore.Request{Key: key, Permits: n, Weight: weight, TTL: 10 * time.Second})
					cancel()
					if err != nil {
						errs <- fmt.Errorf("waiting acquire of weight %d: got %w, want a permit", weight, err)
						return
					}
					c := seats.Add(int64(weight))
					for p := peak.Load(); c > p && !peak.CompareAndSwap(p, c); p = peak.Load() {
					}
					time.Sleep(2 * time.Millisecond)
					seats.Add(-int64(weight))
					if err := l.Release(context.Background()); err != nil {
						errs <- fmt.Errorf("release: got %w, want nil", err)
						return
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		if got := peak.Load(); got > n || got < 1 {
			t.Errorf("most seats taken at once: got %d, want between 1 and %d", got, n)
		}
		if got := statusOf(t, st, key); got.Held != 0 || len(got.Waiters) != 0 {
			t.Errorf("Status once every worker is done: got %+v, want no holder and no waiter", got)
		}
	})
}
