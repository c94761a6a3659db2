package redisstore

import (
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/semaphoretest"
)

// TestRedisPriorityOrder: behind a holder, waiters of priorities 0, 5
// and -3 are granted 5, 0, -3, one after another as the permit is given
// back; the holder is never pre-empted.
func TestRedisPriorityOrder(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	key := uniqueKey(t)
	h := hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second})
	type waiter struct {
		prio int
		got  <-chan semaphoretest.Acquired
	}
	var ws []waiter
	for i, p := range []int{0, 5, -3} {
		got, _ := startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second, Priority: p}, 30*time.Second)
		ws = append(ws, waiter{p, got})
		waitListening(t, raw, key, int64(i+1))
	}
	if w := statusOf(t, st, key).Waiters; len(w) != 3 || w[0].Priority != 5 || w[1].Priority != 0 || w[2].Priority != -3 {
		t.Fatalf("Status: got waiters %+v, want priorities 5, 0, -3 in that order", w)
	}
	if len(statusOf(t, st, key).Holders) != 1 {
		t.Fatalf("Status: want the holder still holding")
	}
	release(t, h)
	for _, want := range []int{5, 0, -3} {
		var next *waiter
		for i := range ws {
			if ws[i].prio == want {
				next = &ws[i]
			}
		}
		r := receive(t, next.got, 10*time.Second, "waiter of the highest priority left")
		if r.Err != nil {
			t.Fatalf("waiter of priority %d: got %v, want the permit", want, r.Err)
		}
		for _, other := range ws {
			if other.prio != want {
				select {
				case r := <-other.got:
					t.Fatalf("waiter of priority %d got %+v while the one of priority %d held", other.prio, r, want)
				default:
				}
			}
		}
		ws = slices.DeleteFunc(ws, func(w waiter) bool { return w.prio == want })
		release(t, r.L)
	}
}

// TestRedisSupersede: a caller that supersedes sends the one before it
// away, with a SupersededError naming it, whether that one waits on its
// wake list; a plain waiter and the holder stay.
func TestRedisSupersede(t *testing.T) {
	t.Parallel()
	_, st, raw := setup(t, Options{})
	key := uniqueKey(t)
	h := hold(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second})
	first, _ := startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second, Supersede: true,
		Holder: semaphore.HolderInfo{Host: "old", PID: 1}}, 30*time.Second)
	waitListening(t, raw, key, 1)
	plain, _ := startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second}, 30*time.Second)
	waitListening(t, raw, key, 2)
	newer, _ := startAcquire(t, st, semaphore.Request{Key: key, Permits: 1, TTL: 30 * time.Second, Supersede: true,
		Holder: semaphore.HolderInfo{Host: "new", PID: 2, Label: "deploy #9"}}, 30*time.Second)
	r := receive(t, first, 10*time.Second, "the first that superseded")
	var sup *semaphore.SupersededError
	if !errors.As(r.Err, &sup) || !errors.Is(r.Err, semaphore.ErrBusy) || sup.By.Host != "new" || sup.By.PID != 2 || sup.By.Label != "deploy #9" {
		t.Fatalf("the first that superseded: got (%v, %v), want a SupersededError naming host new, pid 2, label deploy #9", r.L, r.Err)
	}
	waitListening(t, raw, key, 2)
	if len(statusOf(t, st, key).Holders) != 1 {
		t.Fatalf("Status: want the holder untouched")
	}
	release(t, h)
	for _, got := range []<-chan semaphoretest.Acquired{plain, newer} {
		r := receive(t, got, 10*time.Second, "the waiters left, in order")
		if r.Err != nil {
			t.Fatalf("waiter left: got %v, want the permit", r.Err)
		}
		release(t, r.L)
	}
	var events []semaphore.EventKind
	err := st.Events(ctxTimeout(t, 10*time.Second), semaphore.EventQuery{Keys: []string{key}}, func(e semaphore.Event) error {
		events = append(events, e.Kind)
		return nil
	})
	if err != nil {
		t.Fatalf("Events: %v", err)
	}
	if !slices.Contains(events, semaphore.EventSupersede) {
		t.Errorf("events: got %v, want a supersede", events)
	}
}
