package semaphoretest

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// severalRules are the rules of a store that grants several keys in one
// step (semaphore.AllAtOnce).
var severalRules = []rule{
	{"SeveralInEveryOrder", ruleSeveralInEveryOrder},
	{"SeveralWaitHoldsNothing", ruleSeveralWaitHoldsNothing},
	{"SeveralKeepsItsPlace", ruleSeveralKeepsItsPlace},
}

// allAtOnce is st's AcquireAll; the test fails where it has none.
func allAtOnce(t *testing.T, st semaphore.Store) semaphore.AllAtOnce {
	t.Helper()
	all, ok := st.(semaphore.AllAtOnce)
	if !ok {
		t.Fatalf("%T grants no several keys in one step", st)
	}
	return all
}

// several asks for a permit of each of keys, n each, with the others
// named in each one's holder.
func several(n int, noWait bool, keys ...string) []semaphore.Request {
	var reqs []semaphore.Request
	for i, k := range keys {
		with := append(append([]string{}, keys[:i]...), keys[i+1:]...)
		reqs = append(reqs, semaphore.Request{Key: k, Permits: n, TTL: 5 * time.Second, NoWait: noWait,
			Holder: semaphore.HolderInfo{Host: "h", PID: 1, With: with}})
	}
	return reqs
}

// Callers of several keys listing them in every order, and callers of one
// key beside them, all at once, each from a store of its own: never more
// than N holders of a key (counted by the callers themselves), and every
// caller is served: none waits for another for ever.
func ruleSeveralInEveryOrder(t *testing.T, b *Backend, _ semaphore.Store) {
	base := UniqueKey(t)
	names := []string{base + "-a", base + "-b", base + "-c"}
	orders := [][]int{{0, 1}, {1, 0}, {1, 2}, {2, 1}, {0, 1, 2}, {2, 1, 0}, {2, 0, 1}, {0}, {1}, {2}}
	var holding, worst [3]atomic.Int32
	var served atomic.Int32
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for range 3 {
		for _, order := range orders {
			st := b.Open(nil)
			wg.Go(func() {
				keys := make([]string, len(order))
				for j, i := range order {
					keys[j] = names[i]
				}
				var lease semaphore.Lease
				var err error
				if len(keys) == 1 {
					lease, err = st.Acquire(ctx, several(1, false, keys...)[0])
				} else {
					lease, err = allAtOnce(t, st).AcquireAll(ctx, several(1, false, keys...))
				}
				if err != nil {
					t.Errorf("keys %v: got %v, want their permits", keys, err)
					return
				}
				for _, i := range order {
					if n := holding[i].Add(1); n > worst[i].Load() {
						worst[i].Store(n)
					}
				}
				time.Sleep(5 * time.Millisecond)
				for _, i := range order {
					holding[i].Add(-1)
				}
				if err := lease.Release(context.Background()); err != nil {
					t.Errorf("keys %v: release: %v", keys, err)
				}
				served.Add(1)
			})
		}
	}
	wg.Wait()
	for i := range worst {
		if w := worst[i].Load(); w != 1 {
			t.Errorf("key %s: at most %d holders at once, want 1", names[i], w)
		}
	}
	if got, want := served.Load(), int32(3*len(orders)); got != want {
		t.Errorf("served %d callers, want %d", got, want)
	}
}

// A caller of several keys that will not wait gets the busy answer of the
// key that is held, and holds nothing; one that waits holds nothing while
// it waits, and status shows it under each key; one whose wait ends
// leaves nothing behind.
func ruleSeveralWaitHoldsNothing(t *testing.T, b *Backend, st semaphore.Store) {
	base := UniqueKey(t)
	a, c := base+"-a", base+"-b"
	holder := Hold(t, st, semaphore.Request{Key: c, Permits: 1, TTL: 5 * time.Second})
	var busy *semaphore.BusyError
	if _, err := allAtOnce(t, st).AcquireAll(context.Background(), several(1, true, a, c)); !errors.As(err, &busy) || busy.Key != c {
		t.Fatalf("no-wait with %s held: got %v, want it busy", c, err)
	}
	if s := StatusOf(t, st, a); s.Held != 0 || len(s.Waiters) != 0 {
		t.Fatalf("%s after the busy answer: got %d held, %d waiting; want nothing", a, s.Held, len(s.Waiters))
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := allAtOnce(t, b.Open(nil)).AcquireAll(ctx, several(1, false, a, c))
		done <- err
	}()
	WaitFor(t, 10*time.Second, "the caller of both waiting under "+a, func() bool {
		s := StatusOf(t, st, a)
		return len(s.Waiters) == 1 && len(s.Waiters[0].With) == 1 && s.Waiters[0].With[0] == c
	})
	if s := StatusOf(t, st, a); s.Held != 0 {
		t.Fatalf("%s while the caller of both waits: got %d held, want 0", a, s.Held)
	}
	stop()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("the wait ended: got %v, want context.Canceled", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the wait did not end within 10s of its context")
	}
	if s := StatusOf(t, st, a); s.Held != 0 || len(s.Waiters) != 0 {
		t.Fatalf("%s once the wait ended: got %d held, %d waiting; want nothing", a, s.Held, len(s.Waiters))
	}
	Release(t, holder)
}

// A caller of several keys behind a stream of callers of one of them
// keeps its place: in a store that keeps a line (InLine), every caller of
// the stream that asked after it joined is granted after it; elsewhere it
// is served within the test's bound all the same.
func ruleSeveralKeepsItsPlace(t *testing.T, b *Backend, st semaphore.Store) {
	base := UniqueKey(t)
	a, c := base+"-a", base+"-b"
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var joined atomic.Bool
	var mu sync.Mutex
	var late []time.Time // grants of stream callers that asked after it joined
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		s := b.Open(nil)
		wg.Go(func() {
			for {
				select {
				case <-stop:
					return
				default:
				}
				after := joined.Load()
				l, err := s.Acquire(ctx, semaphore.Request{Key: c, Permits: 1, TTL: 5 * time.Second})
				if err != nil {
					t.Errorf("stream caller: %v", err)
					return
				}
				if after {
					mu.Lock()
					late = append(late, time.Now())
					mu.Unlock()
				}
				time.Sleep(20 * time.Millisecond)
				_ = l.Release(ctx)
			}
		})
	}
	time.Sleep(200 * time.Millisecond) // the stream is flowing
	go func() {
		for ctx.Err() == nil {
			for _, w := range StatusOf(t, st, c).Waiters {
				if len(w.With) > 0 {
					joined.Store(true)
					return
				}
			}
			time.Sleep(time.Millisecond)
		}
	}()
	l, err := allAtOnce(t, b.Open(nil)).AcquireAll(ctx, several(1, false, a, c))
	granted := time.Now()
	if err == nil {
		_ = l.Release(ctx) // before the stream stops: it may wait for c
	}
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("the caller of both: got %v, want its permits", err)
	}
	if !b.Kind.InLine {
		return
	}
	if !joined.Load() {
		t.Fatal("the caller of both was never seen in line: the rule proved nothing")
	}
	mu.Lock()
	defer mu.Unlock()
	for _, g := range late {
		if g.Before(granted) {
			t.Errorf("a stream caller that asked after the caller of both joined was granted %v before it", granted.Sub(g))
		}
	}
}
