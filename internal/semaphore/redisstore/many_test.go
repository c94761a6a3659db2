package redisstore

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/redistest"
	"github.com/semrun/semrun/internal/semaphore"
)

// reqsOf asks for one permit of each key, n permits each.
func reqsOf(n int, noWait bool, keys ...string) []semaphore.Request {
	var reqs []semaphore.Request
	for _, k := range keys {
		reqs = append(reqs, semaphore.Request{Key: k, Permits: n, TTL: 5 * time.Second, NoWait: noWait})
	}
	return reqs
}

// Callers of several keys listing them in every order, and callers of one
// key beside them, all at once: never more than N holders of a key (each
// key counted by the callers themselves), and all of them are served
// (none waits for another for ever).
func TestAcquireAllOrdersNeitherOverlapNorDeadlock(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	st := newStore(t, srv.URL(), Options{})
	orders := [][]string{{"a", "b"}, {"b", "a"}, {"b", "c"}, {"c", "b"}, {"a", "b", "c"}, {"c", "b", "a"}, {"c", "a", "b"}, {"a"}, {"b"}, {"c"}}
	var holding [3]atomic.Int32
	var worst [3]atomic.Int32
	var served atomic.Int32
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var wg sync.WaitGroup
	for round := range 3 {
		for _, keys := range orders {
			wg.Add(1)
			go func() {
				defer wg.Done()
				var lease semaphore.Lease
				var err error
				if len(keys) == 1 {
					lease, err = st.Acquire(ctx, reqsOf(1, false, keys...)[0])
				} else {
					lease, err = st.AcquireAll(ctx, reqsOf(1, false, keys...))
				}
				if err != nil {
					t.Errorf("round %d, keys %v: got %v, want their permits", round, keys, err)
					return
				}
				for _, k := range keys {
					i := k[0] - 'a'
					if n := holding[i].Add(1); n > worst[i].Load() {
						worst[i].Store(n)
					}
				}
				time.Sleep(5 * time.Millisecond)
				for _, k := range keys {
					holding[k[0]-'a'].Add(-1)
				}
				if err := lease.Release(context.Background()); err != nil {
					t.Errorf("keys %v: release: %v", keys, err)
				}
				served.Add(1)
			}()
		}
	}
	wg.Wait()
	for i := range worst {
		if w := worst[i].Load(); w != 1 {
			t.Errorf("key %c: at most %d holders at once, want 1", 'a'+i, w)
		}
	}
	if got, want := served.Load(), int32(3*len(orders)); got != want {
		t.Errorf("served %d callers, want %d", got, want)
	}
}

// A caller of several keys that will not wait gets the busy answer of the
// key that is held, and holds nothing; one interrupted while it waits
// leaves every line, so that callers of its keys are not held up.
func TestAcquireAllNoWaitAndInterrupted(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	st := newStore(t, srv.URL(), Options{})
	ctx := context.Background()
	holder, err := st.Acquire(ctx, reqsOf(1, false, "nb")[0])
	if err != nil {
		t.Fatal(err)
	}
	var busy *semaphore.BusyError
	if _, err := st.AcquireAll(ctx, reqsOf(1, true, "na", "nb")); !errors.As(err, &busy) || busy.Key != "nb" {
		t.Fatalf("no-wait with nb held: got %v, want nb busy", err)
	}
	if s := statusOf(t, st, "na"); s.Held != 0 || len(s.Waiters) != 0 {
		t.Fatalf("na after the busy answer: got %d held, %d waiting; want nothing", s.Held, len(s.Waiters))
	}
	waitCtx, stop := context.WithTimeout(ctx, 500*time.Millisecond)
	defer stop()
	if _, err := st.AcquireAll(waitCtx, reqsOf(1, false, "na", "nb")); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a wait cut short: got %v, want the deadline", err)
	}
	if s := statusOf(t, st, "na"); s.Held != 0 || len(s.Waiters) != 0 {
		t.Fatalf("na after the wait ended: got %d held, %d waiting; want nothing", s.Held, len(s.Waiters))
	}
	// na is free to anyone at once.
	l, err := st.Acquire(ctx, reqsOf(1, true, "na")[0])
	if err != nil {
		t.Fatalf("na once the caller of both left: got %v, want it granted", err)
	}
	_ = l.Release(ctx)
	_ = holder.Release(ctx)
}

// On a Cluster no script sees every key: AcquireAll says so, holding
// nothing, and the caller takes the keys one after another instead.
func TestAcquireAllNotOnACluster(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	st := newStore(t, srv.URL(), Options{})
	st.cluster = true
	if _, err := st.AcquireAll(context.Background(), reqsOf(1, true, "ca", "cb")); !errors.Is(err, semaphore.ErrNotAtOnce) {
		t.Fatalf("on a cluster: got %v, want ErrNotAtOnce", err)
	}
}

// A caller of several keys behind a stream of callers of one of them: it
// keeps its place in that key's line, so that every caller of the stream
// that came after it is granted after it.
func TestAcquireAllKeepsItsPlaceInAStream(t *testing.T) {
	t.Parallel()
	srv := redistest.New(t)
	st := newStore(t, srv.URL(), Options{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var joined atomic.Bool // the caller of both is in line
	var mu sync.Mutex
	var lateGrants []time.Time // grants of stream callers that asked after it joined
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				late := joined.Load()
				l, err := st.Acquire(ctx, reqsOf(1, false, "sb")[0])
				if err != nil {
					t.Errorf("stream caller: %v", err)
					return
				}
				if late {
					mu.Lock()
					lateGrants = append(lateGrants, time.Now())
					mu.Unlock()
				}
				time.Sleep(20 * time.Millisecond)
				_ = l.Release(ctx)
			}
		}()
	}
	time.Sleep(200 * time.Millisecond) // the stream is flowing
	go func() {
		for ctx.Err() == nil {
			if s := statusOf(t, st, "sb"); slicesContainsWith(s.Waiters) {
				joined.Store(true)
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	both := reqsOf(1, false, "sa", "sb")
	both[0].Holder.With, both[1].Holder.With = []string{"sb"}, []string{"sa"}
	l, err := st.AcquireAll(ctx, both)
	granted := time.Now()
	if !joined.Load() {
		t.Errorf("the caller of both was never seen in line: the test proved nothing")
	}
	close(stop)
	wg.Wait()
	if err != nil {
		t.Fatalf("the caller of both: got %v, want its permits", err)
	}
	_ = l.Release(ctx)
	mu.Lock()
	defer mu.Unlock()
	for _, g := range lateGrants {
		if g.Before(granted) {
			t.Errorf("a stream caller that asked after the caller of both joined was granted %v before it", granted.Sub(g))
		}
	}
}

// slicesContainsWith tells whether a waiter of a caller of several keys
// is among ws.
func slicesContainsWith(ws []semaphore.Waiter) bool {
	for _, w := range ws {
		if len(w.With) > 0 {
			return true
		}
	}
	return false
}
