package semaphoretest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

func ruleWaiterGetsReleasedPermit(t *testing.T, b *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	a := Hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second})

	var waits []semaphore.WaitState
	onWait, waiting := Signal()
	got, _ := StartAcquire(t, st, semaphore.Request{
		Key: key, Permits: 1, TTL: 10 * time.Second,
		OnWait: func(s semaphore.WaitState) {
			waits = append(waits, s)
			onWait()
		},
	}, 30*time.Second)
	MustWait(t, got, waiting, "waiting Acquire with the only permit held")

	Release(t, a)
	r := Receive(t, got, 10*time.Second, "waiting Acquire after the holder released")
	if r.Err != nil {
		t.Fatalf("waiting Acquire after the holder released: got %v, want a permit", r.Err)
	}
	checkWaits(t, b.Kind, waits, semaphore.WaitState{Held: 1, Capacity: 1, Position: 1, Waiting: 1})
	if r.L.Token() <= a.Token() {
		t.Errorf("token of the waiter: got %d, want more than the first holder's %d", r.L.Token(), a.Token())
	}
	if s := StatusOf(t, st, key); s.Held != 1 || s.Holders[0].Token != r.L.Token() || len(s.Waiters) != 0 {
		t.Errorf("Status after the waiter got in: got %+v, want one holder with token %d and no waiter", s, r.L.Token())
	}
	if _, err := AcquireWithin(t, st, 5*time.Second, semaphore.Request{Key: key, Permits: 1, TTL: time.Second, NoWait: true}); !errors.Is(err, semaphore.ErrBusy) {
		t.Errorf("no-wait Acquire while the waiter holds: got %v, want ErrBusy", err)
	}
}

// checkWaits checks the OnWait calls of a lone waiter that waited for one
// state, want: a store that keeps a line reports exactly want; one that
// does not may know less (Position and Waiting 0) and learn its position
// later, but says the same Held and Capacity and never repeats itself.
func checkWaits(t *testing.T, kind Kind, got []semaphore.WaitState, want semaphore.WaitState) {
	t.Helper()
	if kind.InLine {
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

func ruleAcquireTimeoutWhileBusy(t *testing.T, _ *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	req := semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second}
	a := Hold(t, st, req)

	start := time.Now()
	l, err := AcquireWithin(t, st, 300*time.Millisecond, req)
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
	if l, err := acquireCtx(t, st, ctx, 100*time.Millisecond, req); !errors.Is(err, context.Canceled) || l != nil {
		t.Fatalf("Acquire while busy until ctx canceled: got (%v, %v), want (nil, context.Canceled)", l, err)
	}

	s := StatusOf(t, st, key)
	if s.Held != 1 || len(s.Holders) != 1 || s.Holders[0].Token != a.Token() || len(s.Waiters) != 0 {
		t.Errorf("Status after the given-up waits: got %+v, want only the first holder (token %d) and no waiter", s, a.Token())
	}
	// The waits that gave up hold nothing: once the holder is gone,
	// the permit is free at once.
	Release(t, a)
	b := Hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 10 * time.Second})
	if b.Token() <= a.Token() {
		t.Errorf("token after the given-up waits: got %d, want more than %d", b.Token(), a.Token())
	}
}

// ruleWaitersServedInOrder: waiters in separate stores, as separate
// processes would be, each started once the one before it is in line, get
// the permit in the order they came where the store keeps a line. Every
// store serves them all.
func ruleWaitersServedInOrder(t *testing.T, b *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	const waiters = 5
	h := Hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second})

	// A store each, as a process each would have.
	stores := make([]semaphore.Store, waiters)
	for i := range stores {
		stores[i] = b.Open(nil)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		order  []int
		tokens []int64
		errs   = make(chan error, waiters)
	)
	t.Cleanup(func() { // before the stores close
		cancel()
		within(t, 10*time.Second, "every waiter returned once their context ended", wg.Wait)
	})
	for i, s := range stores {
		wg.Go(func() {
			l, err := s.Acquire(ctx, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second, Holder: semaphore.HolderInfo{PID: 100 + i, Label: fmt.Sprintf("job %d", i)}})
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
		WaitFor(t, 10*time.Second, fmt.Sprintf("waiter %d in Status", i), func() bool { return len(StatusOf(t, st, key).Waiters) == i+1 })
		time.Sleep(100 * time.Millisecond)
	}
	// Status shows each waiter as it asked.
	for _, w := range StatusOf(t, st, key).Waiters {
		if want := fmt.Sprintf("job %d", w.PID-100); w.Label != want {
			t.Errorf("waiter of pid %d: got label %q, want %q", w.PID, w.Label, want)
		}
	}
	Release(t, h)
	if !within(t, 40*time.Second, "every waiter served", wg.Wait) {
		t.FailNow()
	}
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if len(order) != waiters {
		t.Fatalf("waiters served: got %v, want all %d", order, waiters)
	}
	if b.Kind.InLine {
		if want := []int{0, 1, 2, 3, 4}; !slices.Equal(order, want) {
			t.Errorf("order in which the waiters got the permit: got %v, want %v (the order they came)", order, want)
		}
	}
	if !slices.IsSorted(tokens) {
		t.Errorf("tokens in the order of the grants: got %v, want rising", tokens)
	}
	if s := StatusOf(t, st, key); s.Held != 0 || len(s.Waiters) != 0 {
		t.Errorf("Status once every waiter is done: got %+v, want no holder and no waiter", s)
	}
}

// ruleNoCallerPassesTheLine: a caller that came later never gets a permit
// before one that came earlier and still waits, even when its smaller
// weight would fit in the permits free meanwhile, and a caller that will
// not wait is busy then. Every store keeps the first in line first; a
// store that keeps the whole line (InLine) also serves the ones behind it
// in the order they came, where one that does not may serve those in any
// order.
func ruleNoCallerPassesTheLine(t *testing.T, b *Backend, st semaphore.Store) {
	key := UniqueKey(t)
	req := func(weight, pid int) semaphore.Request {
		return semaphore.Request{Key: key, Permits: 3, Weight: weight, TTL: 30 * time.Second, Holder: semaphore.HolderInfo{PID: pid}}
	}
	h := Hold(t, st, req(2, 1)) // 1 of the 3 permits free
	// A, B and C join in that order, each from a store of its own, as
	// processes would: A needs 2 permits, B and C would fit in the free one.
	var line []queued
	for i, name := range []string{"A", "B", "C"} {
		weight := 1
		if i == 0 {
			weight = 2
		}
		got, _ := StartAcquire(t, b.Open(nil), req(weight, 100+i), 30*time.Second)
		line = append(line, queued{name, got})
		waitInLine(t, st, key, line)
	}
	if _, err := AcquireWithin(t, st, 5*time.Second, semaphore.Request{Key: key, Permits: 3, TTL: time.Second, NoWait: true}); !errors.Is(err, semaphore.ErrBusy) {
		t.Errorf("no-wait Acquire of 1 permit with 1 of 3 free and 3 callers waiting: got %v, want ErrBusy", err)
	}

	Release(t, h)
	a := Receive(t, line[0].got, 10*time.Second, "A, first in line, after the holder released")
	if a.Err != nil {
		t.Fatalf("A, first in line, after the holder released: got %v, want a permit", a.Err)
	}
	Release(t, a.L) // B and C now both fit
	tokens := map[string]int64{"A": a.L.Token()}
	for _, q := range line[1:] {
		r := Receive(t, q.got, 10*time.Second, q.name+" after A released")
		if r.Err != nil {
			t.Fatalf("%s after A released: got %v, want a permit", q.name, r.Err)
		}
		tokens[q.name] = r.L.Token()
	}
	if tokens["B"] <= tokens["A"] || tokens["C"] <= tokens["A"] {
		t.Errorf("tokens by caller: got %v, want A's the lowest (A came first)", tokens)
	}
	if b.Kind.InLine && tokens["C"] <= tokens["B"] {
		t.Errorf("tokens by caller: got %v, want B's below C's (B came before C)", tokens)
	}
}

// queued is a caller waiting in the background, by name.
type queued struct {
	name string
	got  <-chan Acquired
}

// waitInLine waits until Status shows each caller of line waiting, and
// fails at once if one of them got an answer instead: each came after a
// caller that still waits, but the first, whose weight does not fit.
func waitInLine(t *testing.T, st semaphore.Store, key string, line []queued) {
	t.Helper()
	WaitFor(t, 10*time.Second, fmt.Sprintf("%d waiters for key %q in Status", len(line), key), func() bool {
		for _, q := range line {
			select {
			case r := <-q.got:
				if r.Err != nil {
					t.Fatalf("%s: got error %v, want it to wait its turn", q.name, r.Err)
				}
				t.Fatalf("%s: got a permit (token %d) while a caller that came before it waited, want it to wait its turn", q.name, r.L.Token())
			default:
			}
		}
		return len(StatusOf(t, st, key).Waiters) == len(line)
	})
}
