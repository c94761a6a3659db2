package protocol

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Bounded permits (a max runtime the store enforces) and cooling (a min
// hold), on both backends.

func renewArgs(t *testing.T, c *redis.Client, key string, a RenewArgs) RenewReply {
	t.Helper()
	r, err := DecodeRenew(runScript(t, c, NewKeys(testPrefix, key), a))
	if err != nil {
		t.Fatalf("renew.lua for %q: got %v, want its reply", a.ID, err)
	}
	return r
}

func releaseArgs(t *testing.T, c *redis.Client, key string, a ReleaseArgs) ReleaseReply {
	t.Helper()
	r, err := DecodeRelease(runScript(t, c, NewKeys(testPrefix, key), a))
	if err != nil {
		t.Fatalf("release.lua for %q: got %v, want its reply", a.ID, err)
	}
	return r
}

func holdArgs(t *testing.T, c *redis.Client, key string, a HoldArgs) HoldReply {
	t.Helper()
	r, err := DecodeHold(runScript(t, c, NewKeys(testPrefix, key), a))
	if err != nil {
		t.Fatalf("hold.lua %s for %q: got %v, want its reply", a.Op, a.ID, err)
	}
	return r
}

// TestScriptsBoundCapsTheLease: a bounded permit is granted and renewed
// up to its bound and no further, is not renewed from then on, and its
// permit is free then, whatever its TTL.
func TestScriptsBoundCapsTheLease(t *testing.T) {
	t.Parallel()
	const bound, ttl = 1500 * time.Millisecond, 20 * time.Second
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "bound"
			k := NewKeys(testPrefix, key)
			g := runAcquireArgs(t, b.c, k, AcquireArgs{ID: "A", Permits: 1, TTL: ttl, Bound: bound})
			if !g.Granted || g.Left != bound.Milliseconds() || g.Since != g.Now {
				t.Fatalf("bounded grant: got %+v, want granted, %d ms left, since = now", g, bound.Milliseconds())
			}
			if r := renewArgs(t, b.c, key, RenewArgs{ID: "A", TTL: ttl, Bound: bound}); !r.Renewed || r.Left <= 0 || r.Left > bound.Milliseconds() {
				t.Errorf("renewal before the bound: got %+v, want renewed with at most %v left", r, bound)
			}
			if g := runAcquireArgs(t, b.c, k, AcquireArgs{ID: "B", Permits: 1, TTL: ttl}); g.Granted {
				t.Fatalf("no-wait caller before the bound: got %+v, want busy", g)
			}
			b.advance(bound + 100*time.Millisecond)
			if r := renewArgs(t, b.c, key, RenewArgs{ID: "A", TTL: ttl, Bound: bound}); r.Renewed {
				t.Errorf("renewal past the bound: got %+v, want refused", r)
			}
			if g := runAcquireArgs(t, b.c, k, AcquireArgs{ID: "B", Permits: 1, TTL: ttl}); !g.Granted || g.Left != ttl.Milliseconds() {
				t.Errorf("no-wait caller past the bound of a %v lease: got %+v, want granted a full lease", ttl, g)
			}
		})
	}
}

// TestScriptsBoundOfAPermitHandedOver: a permit handed to a waiter is
// bound from its hand-over, once its holder's first call says how long:
// a renewal never extends it past the bound.
func TestScriptsBoundOfAPermitHandedOver(t *testing.T) {
	t.Parallel()
	const bound, ttl = 1500 * time.Millisecond, 20 * time.Second
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "bound-handed"
			k := NewKeys(testPrefix, key)
			sub := listen(t, b.c, key)
			runAcquire(t, b.c, key, "A", 1, ttl, "")
			w := AcquireArgs{ID: "W", Permits: 1, TTL: ttl, Wait: 10 * time.Second, Bound: bound}
			if g := runAcquireArgs(t, b.c, k, w); g.Granted {
				t.Fatalf("waiter behind a holder: got %+v, want in line", g)
			}
			runRelease(t, b.c, key, "A")
			expectHandedOver(t, sub, "after the holder released", "W")
			b.advance(500 * time.Millisecond)
			r := renewArgs(t, b.c, key, RenewArgs{ID: "W", TTL: ttl, Bound: bound})
			if !r.Renewed || r.Left <= 0 || r.Left > (bound-500*time.Millisecond).Milliseconds() {
				t.Errorf("first renewal 500ms after the hand-over: got %+v, want at most %v left", r, bound-500*time.Millisecond)
			}
			b.advance(bound)
			if r := renewArgs(t, b.c, key, RenewArgs{ID: "W", TTL: ttl, Bound: bound}); r.Renewed {
				t.Errorf("renewal past the bound: got %+v, want refused", r)
			}
		})
	}
}

// TestScriptsHoldEndsAtItsBound: a bounded hold's permit and shares are
// renewed up to its bound, and it ends as max-runtime there.
func TestScriptsHoldEndsAtItsBound(t *testing.T) {
	t.Parallel()
	const bound, ttl = 1500 * time.Millisecond, 20 * time.Second
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "bound-hold"
			k := NewKeys(testPrefix, key)
			if g := runAcquireArgs(t, b.c, k, AcquireArgs{ID: "H", Permits: 1, TTL: ttl, Bound: bound}); !g.Granted {
				t.Fatalf("bounded grant: got %+v, want granted", g)
			}
			if r := holdArgs(t, b.c, key, HoldArgs{Op: "begin", ID: "H", TTL: ttl, Meta: []byte("{}"), Bound: bound}); r.State != "held" || r.Hard <= 0 || r.Hard > bound.Milliseconds() {
				t.Fatalf("begin: got %+v, want held, with at most %v to its bound", r, bound)
			}
			r := holdArgs(t, b.c, key, HoldArgs{Op: "renew", ID: "H", Share: "r.one"})
			if r.State != "held" || r.Left <= 0 || r.Left > bound.Milliseconds() || r.Hard <= 0 {
				t.Errorf("share renewal before the bound: got %+v, want held, at most %v left", r, bound)
			}
			b.advance(bound + 100*time.Millisecond)
			if r := holdArgs(t, b.c, key, HoldArgs{Op: "renew", ID: "H", Share: "r.one"}); r.State != "max-runtime" {
				t.Errorf("share renewal past the bound: got %+v, want the hold ended as max-runtime", r)
			}
			if g := runAcquireArgs(t, b.c, k, AcquireArgs{ID: "B", Permits: 1, TTL: ttl}); !g.Granted {
				t.Errorf("no-wait caller past the hold's bound: got %+v, want granted", g)
			}
		})
	}
}

// TestScriptsCooling: a permit given back before its min hold stays
// taken, with its command's exit status, until then; callers find the
// key busy, a waiter is served when it ends, and a permit whose min hold
// passed is given back at once.
func TestScriptsCooling(t *testing.T) {
	t.Parallel()
	const cool, ttl = 1500 * time.Millisecond, 20 * time.Second
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "cooling"
			sub := listen(t, b.c, key)
			runCall(t, b.c, key, "A", call{n: 2, ttl: ttl, weight: 2, meta: `{"host":"h1"}`})
			r := releaseArgs(t, b.c, key, ReleaseArgs{ID: "A", Cool: cool, Exit: 3})
			if !r.Released || r.Cooling <= 0 || r.Cooling > cool.Milliseconds() {
				t.Fatalf("release within the min hold: got %+v, want released, cooling for at most %v", r, cool)
			}
			st := runStatus(t, b.c, key)
			if st.Held != 2 || len(st.Holders) != 0 || len(st.Cooling) != 1 {
				t.Fatalf("status while cooling: got %+v, want 2 held, no holder, one cooling", st)
			}
			if c := st.Cooling[0]; c.ExitStatus != 3 || c.Weight != 2 || c.Host != "h1" || c.EndsIn <= 0 || c.EndsIn > cool {
				t.Errorf("cooling: got %+v, want exit 3, weight 2, host h1, ending within %v", c, cool)
			}
			if g := runCall(t, b.c, key, "B", call{n: 2, ttl: ttl}); g.Granted {
				t.Errorf("no-wait caller while cooling: got %+v, want busy", g)
			}
			if g := runCall(t, b.c, key, "W", call{n: 2, ttl: ttl, wait: 10 * time.Second}); g.Granted || g.Position != 1 || g.Lapse <= 0 || g.Lapse > cool.Milliseconds() {
				t.Errorf("waiter while cooling: got %+v, want in line, told to look again when the cooling ends", g)
			}
			b.advance(cool + 100*time.Millisecond)
			if g := runCall(t, b.c, key, "W", call{n: 2, ttl: ttl, wait: 10 * time.Second}); !g.Granted {
				t.Errorf("waiter asking once the cooling ended: got %+v, want granted", g)
			}
			expectHandedOver(t, sub, "once the cooling ended: the waiter that asked took its own turn")
			if st := runStatus(t, b.c, key); len(st.Cooling) != 0 || st.Held != 1 {
				t.Errorf("status after the cooling: got %+v, want no cooling, 1 held", st)
			}
			// Past its min hold, a permit goes back at once.
			b.advance(cool + 100*time.Millisecond)
			if r := releaseArgs(t, b.c, key, ReleaseArgs{ID: "W", Cool: cool, Exit: 0}); !r.Released || r.Cooling != 0 {
				t.Errorf("release past the min hold: got %+v, want released, no cooling", r)
			}
			if g := runCall(t, b.c, key, "C", call{n: 2, ttl: ttl, weight: 2}); !g.Granted {
				t.Errorf("no-wait caller after a release past the min hold: got %+v, want granted", g)
			}
		})
	}
}

// TestScriptsSilenceNeverShortensACooling: the leases a silence pushes
// back are never cut to the longest lease from now: a cooling of an hour
// keeps its hour. On miniredis, whose clock jumps.
func TestScriptsSilenceNeverShortensACooling(t *testing.T) {
	t.Parallel()
	b := backends(t)[0]
	const key = "cooling-silence"
	runCall(t, b.c, key, "A", call{n: 2, ttl: 2 * time.Second})
	runCall(t, b.c, key, "B", call{n: 2, ttl: 2 * time.Second})
	releaseArgs(t, b.c, key, ReleaseArgs{ID: "A", Cool: time.Hour, Exit: 0})
	b.advance(1500 * time.Millisecond) // past half the longest lease: B's pushed back
	st := runStatus(t, b.c, key)
	if g := runCall(t, b.c, key, "C", call{n: 2, ttl: 2 * time.Second}); g.Granted || g.Moved <= 0 {
		t.Fatalf("caller after a silence: got %+v, want busy, the holders pushed back", g)
	}
	after := runStatus(t, b.c, key)
	if len(st.Cooling) != 1 || len(after.Cooling) != 1 || after.Cooling[0].EndsIn < st.Cooling[0].EndsIn {
		t.Errorf("cooling across a silence: got %+v before, %+v after, want it no shorter", st.Cooling, after.Cooling)
	}
}

// TestScriptsSilenceOfACoolingKeyIsNoNews: nobody renews a cooling, so a
// key that only cools is silent by nature: the cron recipe's next tick,
// a minute later, finds it busy and is told nothing about a silence (the
// warning of a stepped clock or of holders that all stopped renewing is
// for a key with holders that renew). On miniredis, whose clock jumps.
func TestScriptsSilenceOfACoolingKeyIsNoNews(t *testing.T) {
	t.Parallel()
	b := backends(t)[0]
	const key = "cooling-only"
	runCall(t, b.c, key, "A", call{n: 1, ttl: 2 * time.Second})
	releaseArgs(t, b.c, key, ReleaseArgs{ID: "A", Cool: time.Hour, Exit: 0})
	b.advance(time.Minute)
	if g := runCall(t, b.c, key, "C", call{n: 1, ttl: 2 * time.Second}); g.Granted || g.Moved != 0 {
		t.Fatalf("caller a minute after the last, to a key that only cools: got %+v, want busy, nothing moved", g)
	}
	// A holder that renews, beside the cooling, makes a silence news again.
	runCall(t, b.c, key, "D", call{n: 2, ttl: 2 * time.Second})
	b.advance(1500 * time.Millisecond)
	if g := runCall(t, b.c, key, "E", call{n: 2, ttl: 2 * time.Second}); g.Granted || g.Moved <= 0 {
		t.Fatalf("caller after a silence, with a holder beside the cooling: got %+v, want busy, the holder pushed back", g)
	}
}

// TestScriptsRecordedTermsHoldWhateverTheCallSays: a bound recorded at
// the grant caps a renewal that does not repeat it (an old or broken
// client), and a renewal tells how long is left to the bound, which a
// step of the server's clock moves closer.
func TestScriptsRecordedTermsHoldWhateverTheCallSays(t *testing.T) {
	t.Parallel()
	const bound, ttl = 1500 * time.Millisecond, 20 * time.Second
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "terms"
			k := NewKeys(testPrefix, key)
			runAcquireArgs(t, b.c, k, AcquireArgs{ID: "A", Permits: 1, TTL: ttl, Bound: bound})
			r := renewArgs(t, b.c, key, RenewArgs{ID: "A", TTL: ttl})
			if !r.Renewed || r.Left > bound.Milliseconds() || r.Hard <= 0 || r.Hard > bound.Milliseconds() {
				t.Errorf("renewal that does not repeat the bound: got %+v, want renewed up to the recorded bound, and told how far it is", r)
			}
			b.advance(bound + 100*time.Millisecond)
			if r := renewArgs(t, b.c, key, RenewArgs{ID: "A", TTL: ttl}); r.Renewed {
				t.Errorf("renewal past the recorded bound that does not repeat it: got %+v, want refused", r)
			}
		})
	}
}

// TestScriptsCoolingIsNoLease: a renewal or a repeated grant of a permit
// that cools (late, or from a caller that still has its id) is refused,
// and leaves the cooling as it was; a permit given back with Release (no
// command ran) does not cool; a record of a cooling that is not one is
// no cooling.
func TestScriptsCoolingIsNoLease(t *testing.T) {
	t.Parallel()
	const ttl = 2 * time.Second
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "cooling-no-lease"
			k := NewKeys(testPrefix, key)
			runAcquireArgs(t, b.c, k, AcquireArgs{ID: "A", Permits: 1, TTL: ttl, Cool: time.Hour})
			releaseArgs(t, b.c, key, ReleaseArgs{ID: "A", Cool: time.Hour, Exit: 0})
			if r := renewArgs(t, b.c, key, RenewArgs{ID: "A", TTL: ttl, Cool: time.Hour}); r.Renewed {
				t.Errorf("renewal of a permit that cools: got %+v, want refused", r)
			}
			if g := runAcquireArgs(t, b.c, k, AcquireArgs{ID: "A", Permits: 1, TTL: ttl, Cool: time.Hour}); g.Granted {
				t.Errorf("a repeated grant of a permit that cools: got %+v, want none", g)
			}
			if st := runStatus(t, b.c, key); len(st.Cooling) != 1 || st.Cooling[0].EndsIn < 59*time.Minute {
				t.Errorf("the cooling after them: got %+v, want its hour", st.Cooling)
			}

			runAcquireArgs(t, b.c, k, AcquireArgs{ID: "B", Permits: 2, TTL: ttl, Cool: time.Hour})
			if r := releaseArgs(t, b.c, key, ReleaseArgs{ID: "B"}); !r.Released || r.Cooling != 0 {
				t.Errorf("Release of a permit no command ran under: got %+v, want it given back at once", r)
			}

			runAcquireArgs(t, b.c, k, AcquireArgs{ID: "C", Permits: 2, TTL: ttl})
			if err := b.c.HSet(t.Context(), k.Info, "#cool "+Member("C"), "garbage").Err(); err != nil {
				t.Fatal(err)
			}
			if r := renewArgs(t, b.c, key, RenewArgs{ID: "C", TTL: ttl}); !r.Renewed {
				t.Errorf("renewal of a holder whose cooling record is not one: got %+v, want renewed", r)
			}
			if st := runStatus(t, b.c, key); len(st.Holders) != 1 || st.Held != 2 {
				t.Errorf("status of a holder whose cooling record is not one: got %+v, want it listed as a holder", st)
			}
		})
	}
}

// TestScriptsLapsedPermitCools: a permit whose holder never gave it back
// (it crashed, its release was lost) cools until its min hold has passed,
// when the sweep finds it lapsed.
func TestScriptsLapsedPermitCools(t *testing.T) {
	t.Parallel()
	const ttl, cool = time.Second, 2500 * time.Millisecond
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "lapsed-cools"
			k := NewKeys(testPrefix, key)
			runAcquireArgs(t, b.c, k, AcquireArgs{ID: "A", Permits: 1, TTL: ttl, Cool: cool})
			// Callers keep the key touched, as on a busy key: no silence
			// pushes the lease back.
			for range 3 {
				b.advance(ttl * 2 / 5)
				if g := runAcquireArgs(t, b.c, k, AcquireArgs{ID: "B", Permits: 1, TTL: ttl}); g.Granted {
					t.Fatalf("caller once the lease lapsed, within the min hold: got %+v, want busy", g)
				}
			}
			if st := runStatus(t, b.c, key); len(st.Cooling) != 1 || st.Cooling[0].ExitStatus != -1 {
				t.Errorf("status once the lease lapsed: got %+v, want it cooling, its status unknown", st)
			}
			b.advance(cool)
			if g := runAcquireArgs(t, b.c, k, AcquireArgs{ID: "B", Permits: 1, TTL: ttl}); !g.Granted {
				t.Errorf("caller once the min hold passed: got %+v, want granted", g)
			}
		})
	}
}
