package protocol

import (
	"fmt"
	"testing"
	"time"
)

// After a silence: nobody called the key for longer than its holders
// renew (they crashed, or were frozen, or the clock stepped). A min hold
// still cools, and status reads the key as the next call will find it.

// TestScriptsCoolingOutlivesASilence: a permit with a min hold whose
// holder never came back (SIGKILL: neither renewed nor released) cools
// until its min hold has passed even when nobody calls the key past its
// lease: the keys outlive the lease, so that the first call after the
// silence finds it and cools it. So with a permit handed to a waiter,
// whose first call records its terms, and with a hold's, whose begin
// does; a hold that ends within its min hold cools too, and a keeper that
// comes back to a cooling finds its hold lost.
func TestScriptsCoolingOutlivesASilence(t *testing.T) {
	t.Parallel()
	// The min hold leaves seconds to spare after the silence: on a
	// redis-server, a loaded machine takes time to make the four keys.
	const ttl, cool = time.Second, 5 * time.Second
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			keys := map[string]string{}
			// A run granted at once.
			keys["granted"] = "silent-granted"
			runAcquireArgs(t, b.c, NewKeys(testPrefix, keys["granted"]), AcquireArgs{ID: "A", Permits: 1, TTL: ttl, Cool: cool})

			// A run handed its permit by a release, its terms recorded by
			// its first call. Its waiter lease is its TTL, as a run's.
			keys["handed"] = "silent-handed"
			kh := NewKeys(testPrefix, keys["handed"])
			runAcquireArgs(t, b.c, kh, AcquireArgs{ID: "H", Permits: 1, TTL: ttl})
			if g := runAcquireArgs(t, b.c, kh, AcquireArgs{ID: "W", Permits: 1, TTL: ttl, Wait: ttl, Cool: cool}); g.Position != 1 {
				t.Fatalf("waiter: got %+v, want it in line", g)
			}
			releaseArgs(t, b.c, keys["handed"], ReleaseArgs{ID: "H"})
			if r := renewArgs(t, b.c, keys["handed"], RenewArgs{ID: "W", TTL: ttl, Cool: cool}); !r.Renewed {
				t.Fatalf("the waiter's first call: got %+v, want renewed", r)
			}

			// A hold, its min hold recorded by its begin, renewed once by
			// its keeper.
			keys["hold"] = "silent-hold"
			runAcquireArgs(t, b.c, NewKeys(testPrefix, keys["hold"]), AcquireArgs{ID: "K", Permits: 1, TTL: ttl})
			if r := holdArgs(t, b.c, keys["hold"], HoldArgs{Op: "begin", ID: "K", TTL: ttl, Meta: []byte(`{}`), Cool: cool}); r.State != "held" {
				t.Fatalf("hold begin: got %+v, want held", r)
			}
			if r := holdArgs(t, b.c, keys["hold"], HoldArgs{Op: "renew", ID: "K", Share: "k.keeper"}); r.State != "held" {
				t.Fatalf("keeper's renewal: got %+v, want held", r)
			}

			// A hold ended (semrun release) within its min hold: it cools
			// at once, its exit status unknown.
			keys["ended"] = "silent-ended"
			runAcquireArgs(t, b.c, NewKeys(testPrefix, keys["ended"]), AcquireArgs{ID: "E", Permits: 1, TTL: ttl})
			holdArgs(t, b.c, keys["ended"], HoldArgs{Op: "begin", ID: "E", TTL: ttl, Meta: []byte(`{}`), Cool: cool})
			if r := holdArgs(t, b.c, keys["ended"], HoldArgs{Op: "end", ID: "E", State: "released", Why: "semrun release"}); r.State != "released" || !r.Released {
				t.Fatalf("hold end: got %+v, want released, the permit given back", r)
			}
			if st := runStatus(t, b.c, keys["ended"]); len(st.Cooling) != 1 || st.Cooling[0].ExitStatus != -1 || len(st.Holders) != 0 {
				t.Errorf("status of a hold ended within its min hold: got %+v, want it cooling, exit status unknown", st)
			}

			// Past the leases and what a silence pushes them back by, and
			// past the keys' life were it the leases'.
			b.advance(2*ttl + 200*time.Millisecond)
			for what, key := range keys {
				if g := runAcquireArgs(t, b.c, NewKeys(testPrefix, key), AcquireArgs{ID: "B", Permits: 1, TTL: ttl}); g.Granted {
					t.Errorf("%s: caller after a silence, within the min hold: got %+v, want busy", what, g)
				}
				if st := runStatus(t, b.c, key); len(st.Cooling) != 1 || st.Cooling[0].ExitStatus != -1 {
					t.Errorf("%s: status after a silence: got %+v, want it cooling, exit status unknown", what, st)
				}
			}
			if r := holdArgs(t, b.c, keys["hold"], HoldArgs{Op: "renew", ID: "K", Share: "k.keeper"}); r.State != "lost" {
				t.Errorf("the keeper back to a hold that cools: got %+v, want lost", r)
			}

			// Each freed once its min hold passed, asked every third of its
			// lease (no silence). A cooling made before the silence was
			// pushed back with the leases (see rebase in lib.lua): a lease
			// more, at most.
			granted := map[string]bool{}
			for waited := 2*ttl + 200*time.Millisecond; waited < cool+2*ttl; waited += ttl / 3 {
				b.advance(ttl / 3)
				for what, key := range keys {
					g := runAcquireArgs(t, b.c, NewKeys(testPrefix, key), AcquireArgs{ID: "B", Permits: 1, TTL: ttl})
					granted[what] = granted[what] || g.Granted
				}
			}
			for what := range keys {
				if !granted[what] {
					t.Errorf("%s: no caller granted within %v of the grant, want one once the min hold of %v passed", what, cool+2*ttl, cool)
				}
			}
		})
	}
}

// TestScriptsStatusReadsTheKeyAsARenewal: after any silence, status shows
// a holder exactly when its renewal, made then, keeps it; and a holder
// status does not show no later renewal brings back. So for a run's lease
// (renew.lua), a permit handed over whose waiter has yet to take it in
// full (its claim), and a hold (hold.lua), under one lease or beside a
// longer one. On miniredis, whose clock the test sets.
func TestScriptsStatusReadsTheKeyAsARenewal(t *testing.T) {
	t.Parallel()
	b := backends(t)[0]
	type holder struct {
		name string
		// start makes the holder on key; renew renews it, telling whether
		// it held.
		start func(key string, ttl time.Duration)
		renew func(key string, ttl time.Duration) bool
	}
	holders := []holder{
		{"lease", func(key string, ttl time.Duration) {
			runAcquireArgs(t, b.c, NewKeys(testPrefix, key), AcquireArgs{ID: "A", Permits: 2, TTL: ttl})
		}, func(key string, ttl time.Duration) bool {
			return renewArgs(t, b.c, key, RenewArgs{ID: "A", TTL: ttl}).Renewed
		}},
		{"claim", func(key string, ttl time.Duration) {
			k := NewKeys(testPrefix, key)
			runAcquireArgs(t, b.c, k, AcquireArgs{ID: "H", Permits: 1, TTL: ttl})
			runAcquireArgs(t, b.c, k, AcquireArgs{ID: "A", Permits: 1, TTL: ttl, Wait: ttl})
			releaseArgs(t, b.c, key, ReleaseArgs{ID: "H"})
		}, func(key string, ttl time.Duration) bool {
			return renewArgs(t, b.c, key, RenewArgs{ID: "A", TTL: ttl}).Renewed
		}},
		{"hold", func(key string, ttl time.Duration) {
			runAcquireArgs(t, b.c, NewKeys(testPrefix, key), AcquireArgs{ID: "A", Permits: 2, TTL: ttl})
			holdArgs(t, b.c, key, HoldArgs{Op: "begin", ID: "A", TTL: ttl, Meta: []byte(`{}`)})
			holdArgs(t, b.c, key, HoldArgs{Op: "renew", ID: "A", Share: "k.keeper"})
		}, func(key string, ttl time.Duration) bool {
			return holdArgs(t, b.c, key, HoldArgs{Op: "renew", ID: "A", Share: "k.keeper"}).State == "held"
		}},
	}
	n := 0
	for _, h := range holders {
		for _, c := range []struct{ ttl, longest time.Duration }{{time.Second, time.Second}, {3 * time.Second, 10 * time.Second}} {
			for d := time.Duration(0); d <= 2*c.longest+time.Second; d += c.longest / 8 {
				// How much later the renewal comes than status: 0, at once.
				for _, later := range []time.Duration{0, time.Millisecond, c.ttl / 2, c.longest} {
					n++
					key := fmt.Sprintf("as-renewal-%d", n)
					h.start(key, c.ttl)
					if c.longest > c.ttl {
						// Another caller's longer lease, given back: the key
						// remembers it.
						runAcquireArgs(t, b.c, NewKeys(testPrefix, key), AcquireArgs{ID: "L", Permits: 2, TTL: c.longest})
						releaseArgs(t, b.c, key, ReleaseArgs{ID: "L"})
					}
					b.advance(d)
					st := runStatus(t, b.c, key)
					shown := len(st.Holders) == 1 && st.Held >= 1
					b.advance(later)
					renewed := h.renew(key, c.ttl)
					switch {
					case later == 0 && shown != renewed:
						t.Errorf("%s, lease %v beside %v, silent %v: status shows a holder: %v (%+v); its renewal then kept it: %v, want the same",
							h.name, c.ttl, c.longest, d, shown, st.Holders, renewed)
					case !shown && renewed:
						t.Errorf("%s, lease %v beside %v, silent %v: status showed no holder, and a renewal %v later kept it, want it lost",
							h.name, c.ttl, c.longest, d, later)
					}
				}
			}
		}
	}
}
