//go:build unix

package localstore_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
	"github.com/semrun/semrun/internal/semaphore/localstore"
)

// holdMany has holders permits of key held in st until b ends, and returns
// the capacity that leaves free permits for free callers more.
func holdMany(b *testing.B, st semaphore.Store, key string, holders, free int) int {
	b.Helper()
	n := holders + free
	for range holders {
		l, err := st.Acquire(context.Background(), semaphore.Request{Key: key, Permits: n, TTL: time.Second, NoWait: true})
		if err != nil {
			b.Fatalf("Acquire: %v", err)
		}
		b.Cleanup(func() { _ = l.Release(context.Background()) })
	}
	return n
}

// BenchmarkLocalGrant times a no-wait grant and its release, with holders
// holding permits of the key: "grant-µs" is the Acquire alone.
func BenchmarkLocalGrant(b *testing.B) {
	for _, holders := range []int{20, 200} {
		b.Run(fmt.Sprintf("holders=%d", holders), func(b *testing.B) {
			st := newLocal(b, b.TempDir(), nil)
			const key = "bench"
			n := holdMany(b, st, key, holders, 1)
			req := semaphore.Request{Key: key, Permits: n, TTL: time.Second, NoWait: true}
			var granting time.Duration
			b.ResetTimer()
			for range b.N {
				start := time.Now()
				l, err := st.Acquire(context.Background(), req)
				granting += time.Since(start)
				if err != nil {
					b.Fatalf("Acquire: %v", err)
				}
				_ = l.Release(context.Background())
			}
			b.ReportMetric(float64(granting.Microseconds())/float64(b.N), "grant-µs")
		})
	}
}

// BenchmarkLocalNoWaitBusy has 4 goroutines take and give back a permit of
// a key, no-wait, beside 20 holders, with a permit free for each: every
// busy answer is spurious ("busy-%").
func BenchmarkLocalNoWaitBusy(b *testing.B) {
	const callers = 4
	st := newLocal(b, b.TempDir(), nil)
	const key = "bench"
	n := holdMany(b, st, key, 20, callers)
	req := semaphore.Request{Key: key, Permits: n, TTL: time.Second, NoWait: true}
	var busy, tries, failed atomic.Int64
	var next atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for next.Add(1) <= int64(b.N) {
				tries.Add(1)
				l, err := st.Acquire(context.Background(), req)
				tally(l, err, &busy, &failed)
			}
		}()
	}
	wg.Wait()
	if failed.Load() > 0 {
		b.Errorf("%d Acquires failed", failed.Load())
	}
	b.ReportMetric(100*float64(busy.Load())/float64(tries.Load()), "busy-%")
}

// eventStores are two stores in lock directories of their own, closed
// when b ends: the first writes keys' logs, the second not (NoEvents).
func eventStores(b *testing.B) [2]*localstore.Store {
	var out [2]*localstore.Store
	for i, noEvents := range []bool{false, true} {
		st, err := localstore.New(localstore.Options{Dir: b.TempDir(), NoEvents: noEvents})
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { _ = st.Close() })
		out[i] = st
	}
	return out
}

// BenchmarkLocalEvents times a no-wait grant and its release beside 20
// holders, of a store that writes keys' logs and of one that does not
// (NoEvents), in turns, so that both meet the machine as it is:
// "events-µs" and "noevents-µs" are each's grant and release. Both keep
// the counters.
func BenchmarkLocalEvents(b *testing.B) {
	type side struct {
		st   semaphore.Store
		req  semaphore.Request
		took time.Duration
	}
	var sides [2]*side
	for i, st := range eventStores(b) {
		n := holdMany(b, st, "bench", 20, 1)
		sides[i] = &side{st: st, req: semaphore.Request{Key: "bench", Permits: n, TTL: time.Second, NoWait: true}}
	}
	b.ResetTimer()
	for i := range b.N {
		for j := range sides {
			s := sides[(i+j)%2] // each first every other time
			start := time.Now()
			l, err := s.st.Acquire(context.Background(), s.req)
			if err != nil {
				b.Fatalf("Acquire: %v", err)
			}
			_ = l.Release(context.Background())
			s.took += time.Since(start)
		}
	}
	b.ReportMetric(float64(sides[0].took.Nanoseconds())/1e3/float64(b.N), "events-µs")
	b.ReportMetric(float64(sides[1].took.Nanoseconds())/1e3/float64(b.N), "noevents-µs")
}

// BenchmarkLocalHandover times a hand-over: from a holder's Release to
// the return of the Acquire of the caller waiting first in line, of a
// store that writes keys' logs and of one that does not (NoEvents), in
// turns: "events-µs" and "noevents-µs". Both the release's event and
// the grant's are written in it, one on each side.
func BenchmarkLocalHandover(b *testing.B) {
	type side struct {
		st   semaphore.Store
		took time.Duration
	}
	var sides [2]*side
	for i, st := range eventStores(b) {
		sides[i] = &side{st: st}
	}
	ctx := context.Background()
	req := semaphore.Request{Key: "bench", Permits: 1, TTL: time.Second}
	b.ResetTimer()
	for i := range b.N {
		for j := range sides {
			s := sides[(i+j)%2] // each first every other time
			held := req
			held.NoWait = true
			l, err := s.st.Acquire(ctx, held)
			if err != nil {
				b.Fatalf("Acquire: %v", err)
			}
			waiting := make(chan struct{}, 1)
			got := make(chan time.Time, 1)
			wait := req
			wait.OnWait = func(semaphore.WaitState) {
				select {
				case waiting <- struct{}{}:
				default:
				}
			}
			done := make(chan struct{})
			go func() {
				defer close(done)
				l, err := s.st.Acquire(ctx, wait)
				got <- time.Now()
				if err == nil {
					_ = l.Release(ctx)
				}
			}()
			<-waiting
			time.Sleep(time.Millisecond) // in its wait for a permit
			start := time.Now()
			_ = l.Release(ctx)
			s.took += (<-got).Sub(start)
			<-done
		}
	}
	b.ReportMetric(float64(sides[0].took.Nanoseconds())/1e3/float64(b.N), "events-µs")
	b.ReportMetric(float64(sides[1].took.Nanoseconds())/1e3/float64(b.N), "noevents-µs")
}
