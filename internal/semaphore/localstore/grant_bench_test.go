//go:build unix

package localstore

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/semrun/semrun/internal/semaphore"
)

// BenchmarkGrantLockHeld times what a grant does under the key's grant
// lock (attempt.try), with holders holding permits of the key.
func BenchmarkGrantLockHeld(b *testing.B) {
	for _, holders := range []int{20, 200} {
		b.Run(fmt.Sprintf("holders=%d", holders), func(b *testing.B) {
			s, err := New(Options{Dir: b.TempDir()})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			ctx := context.Background()
			req := semaphore.Request{Key: "bench", Permits: holders + 1, TTL: time.Second, NoWait: true}
			for range holders {
				l, err := s.Acquire(ctx, req)
				if err != nil {
					b.Fatal(err)
				}
				defer l.Release(ctx)
			}
			k, err := s.openKey(req.Key, req.Permits)
			if err != nil {
				b.Fatal(err)
			}
			defer k.close()
			var held time.Duration
			b.ResetTimer()
			for range b.N {
				a := &attempt{s: s, k: k, req: req, told: true}
				a.permits, _ = k.openPermits()
				if a.queue, err = k.open(queueFile, os.O_RDWR|os.O_CREATE); err != nil {
					b.Fatal(err)
				}
				prepare(a)
				start := time.Now()
				l, _, err := a.try(ctx, nil)
				held += time.Since(start)
				if err != nil || l == nil {
					b.Fatalf("try: %v", err)
				}
				a.close()
				_ = l.Release(ctx)
			}
			b.ReportMetric(float64(held.Microseconds())/float64(b.N), "held-µs")
		})
	}
}

// prepare does what acquireIn does before the first try.
func prepare(a *attempt) { a.draft, _ = a.k.makeDraft() }

// BenchmarkNote times what an event costs its caller: counted, and
// logged or not (NoEvents).
func BenchmarkNote(b *testing.B) {
	for _, noEvents := range []bool{false, true} {
		b.Run(fmt.Sprintf("noEvents=%v", noEvents), func(b *testing.B) {
			s, err := New(Options{Dir: b.TempDir(), NoEvents: noEvents})
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			k, err := s.openKey("bench", 1)
			if err != nil {
				b.Fatal(err)
			}
			defer k.close()
			e := semaphore.Event{
				Kind: semaphore.EventRelease, Holder: "K3QZ7WAB2M", Permits: 3, Weight: 1, Token: time.Now().UnixMicro(), Held: time.Minute,
				HolderInfo: semaphore.HolderInfo{Host: "ci-runner-07.example.com", PID: 424242, Command: "render.sh", Label: "https://ci.example.com/jobs/123456"},
			}
			b.ResetTimer()
			for range b.N {
				k.note(e)
			}
		})
	}
}
