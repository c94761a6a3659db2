package protocol

import (
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// An operator's hand on a key (key.lua), and what the other scripts do
// with it, on both backends.

func keyOp(t *testing.T, c *redis.Client, key string, a KeyArgs) KeyReply {
	t.Helper()
	r, err := DecodeKey(runScript(t, c, NewKeys(testPrefix, key), a))
	if err != nil {
		t.Fatalf("key.lua %s: got %v, want its reply", a.Op, err)
	}
	return r
}

// TestScriptsStoredCapacity: a stored capacity wins over each caller's,
// lowering it stops no holder, a caller heavier than it is told so, and
// unsetting it gives each caller its own again.
func TestScriptsStoredCapacity(t *testing.T) {
	t.Parallel()
	const ttl = 20 * time.Second
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "stored"
			runCall(t, b.c, key, "A", call{n: 3, ttl: ttl})
			runCall(t, b.c, key, "B", call{n: 3, ttl: ttl})
			if r := keyOp(t, b.c, key, KeyArgs{Op: "set", Cap: 1}); r.Stored != 1 {
				t.Fatalf("set 1: got %+v, want stored 1", r)
			}
			if n := runRenew(t, b.c, key, "A", ttl); n != 1 {
				t.Errorf("holder's renewal once the capacity was lowered under the holders: got %d, want renewed", n)
			}
			if g := runCall(t, b.c, key, "C", call{n: 5, ttl: ttl}); g.Granted || g.Stored != 1 {
				t.Errorf("caller asking for 5 of a key stored at 1, 2 held: got %+v, want busy, told the stored capacity", g)
			}
			if g := runCall(t, b.c, key, "D", call{n: 5, ttl: ttl, weight: 2}); g.Granted || !g.Over {
				t.Errorf("caller of weight 2 on a key stored at 1: got %+v, want told it is over", g)
			}
			runRelease(t, b.c, key, "A")
			if g := runCall(t, b.c, key, "C", call{n: 5, ttl: ttl}); g.Granted {
				t.Errorf("caller with 1 held of a stored 1: got %+v, want busy", g)
			}
			if st := runStatus(t, b.c, key); st.StoredCapacity != 1 {
				t.Errorf("status: got stored capacity %d, want 1", st.StoredCapacity)
			}
			if r := keyOp(t, b.c, key, KeyArgs{Op: "unset"}); r.Stored != 0 {
				t.Fatalf("unset: got %+v, want none stored", r)
			}
			if g := runCall(t, b.c, key, "C", call{n: 5, ttl: ttl}); !g.Granted || g.Stored != 0 {
				t.Errorf("caller asking for 5, 1 held, once unset: got %+v, want granted", g)
			}
		})
	}
}

// TestScriptsPause: a paused key grants nothing, to callers or to its
// line, and says why; a resume hands the permits to the line; a pause with
// an end ends by itself.
func TestScriptsPause(t *testing.T) {
	t.Parallel()
	const ttl = 20 * time.Second
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "paused"
			sub := listen(t, b.c, key)
			runCall(t, b.c, key, "A", call{n: 1, ttl: ttl})
			keyOp(t, b.c, key, KeyArgs{Op: "pause", Reason: "db upkeep"})
			w := call{n: 1, ttl: ttl, wait: 10 * time.Second}
			if g := runCall(t, b.c, key, "W", w); g.Granted || g.Position != 1 || !g.Paused || g.Reason != "db upkeep" || g.PausedFor != 0 {
				t.Errorf("waiter on a paused key: got %+v, want in line, told the pause", g)
			}
			runRelease(t, b.c, key, "A")
			expectHandedOver(t, sub, "a release on a paused key")
			if g := runCall(t, b.c, key, "N", call{n: 1, ttl: ttl}); g.Granted || !g.Paused {
				t.Errorf("no-wait caller on a paused key with a permit free: got %+v, want busy, paused", g)
			}
			if st := runStatus(t, b.c, key); st.Paused == nil || st.Paused.Reason != "db upkeep" || st.Paused.EndsIn != 0 {
				t.Errorf("status: got pause %+v, want db upkeep, no end", st.Paused)
			}
			if r := keyOp(t, b.c, key, KeyArgs{Op: "resume"}); r.Paused {
				t.Fatalf("resume: got %+v, want not paused", r)
			}
			expectHandedOver(t, sub, "the resume", "W")
			runRelease(t, b.c, key, "W")

			keyOp(t, b.c, key, KeyArgs{Op: "pause", For: time.Second})
			if g := runCall(t, b.c, key, "N", call{n: 1, ttl: ttl}); g.Granted || g.PausedFor <= 0 || g.PausedFor > 1000 {
				t.Errorf("no-wait caller within a pause of 1s: got %+v, want busy, told when it ends", g)
			}
			b.advance(1100 * time.Millisecond)
			if g := runCall(t, b.c, key, "N", call{n: 1, ttl: ttl}); !g.Granted || g.Paused {
				t.Errorf("no-wait caller after a pause of 1s: got %+v, want granted", g)
			}
		})
	}
}

// TestScriptsRevoke: a revoked holder is renewed no more, told why, and
// its permit stays taken until it lets go or lapses; --force frees it at
// once and the next token is higher; an id no holder has is said so; a
// hold revoked ends as revoked.
func TestScriptsRevoke(t *testing.T) {
	t.Parallel()
	const ttl = 20 * time.Second
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "revoked"
			k := NewKeys(testPrefix, key)
			first := runCall(t, b.c, key, "A", call{n: 1, ttl: ttl})
			st := runStatus(t, b.c, key)
			if len(st.Holders) != 1 || len(st.Holders[0].ID) != 10 {
				t.Fatalf("status: got %+v, want one holder with a public id", st.Holders)
			}
			id := st.Holders[0].ID
			if r := keyOp(t, b.c, key, KeyArgs{Op: "revoke", Holder: "0123456789"}); r.Found {
				t.Errorf("revoke of an id no holder has: got %+v, want not found", r)
			}
			if r := keyOp(t, b.c, key, KeyArgs{Op: "revoke", Holder: id, Reason: "host gone"}); !r.Found {
				t.Fatalf("revoke: got %+v, want found", r)
			}
			if r := renewArgs(t, b.c, key, RenewArgs{ID: "A", TTL: ttl}); r.Renewed || !r.Revoked || r.Reason != "host gone" {
				t.Errorf("renewal of a revoked permit: got %+v, want refused, revoked, with the reason", r)
			}
			if g := runCall(t, b.c, key, "B", call{n: 1, ttl: ttl}); g.Granted {
				t.Errorf("caller right after a revoke: got %+v, want busy until the holder lets go", g)
			}
			runRelease(t, b.c, key, "A")
			if g := runCall(t, b.c, key, "B", call{n: 1, ttl: ttl}); !g.Granted {
				t.Errorf("caller once the revoked holder let go: got %+v, want granted", g)
			}

			id = runStatus(t, b.c, key).Holders[0].ID
			if r := keyOp(t, b.c, key, KeyArgs{Op: "revoke", Holder: id, Force: true}); !r.Found {
				t.Fatalf("forced revoke: got %+v, want found", r)
			}
			g := runCall(t, b.c, key, "C", call{n: 1, ttl: ttl})
			if !g.Granted || g.Token <= first.Token {
				t.Errorf("caller right after a forced revoke: got %+v, want granted a higher token than %d", g, first.Token)
			}
			if r := renewArgs(t, b.c, key, RenewArgs{ID: "B", TTL: ttl}); r.Renewed {
				t.Errorf("renewal of a permit revoked by force: got %+v, want refused", r)
			}

			// A hold, revoked, ends so.
			runRelease(t, b.c, key, "C")
			runAcquireArgs(t, b.c, k, AcquireArgs{ID: "H", Permits: 1, TTL: ttl})
			holdArgs(t, b.c, key, HoldArgs{Op: "begin", ID: "H", TTL: ttl, Meta: []byte("{}")})
			keyOp(t, b.c, key, KeyArgs{Op: "revoke", Holder: runStatus(t, b.c, key).Holders[0].ID, Reason: "stuck job"})
			if r := holdArgs(t, b.c, key, HoldArgs{Op: "renew", ID: "H", Share: "r.one"}); r.State != "revoked" || r.Why != "an operator revoked it: stuck job" {
				t.Errorf("share renewal of a revoked hold: got %+v, want it ended as revoked, with the reason", r)
			}
		})
	}
}

// TestScriptsPolicyThatIsNoHash: a policy key of another type (someone
// else wrote it) holds no settings: runs and renewals go on, and an
// operator's next setting replaces it.
func TestScriptsPolicyThatIsNoHash(t *testing.T) {
	t.Parallel()
	const ttl = 20 * time.Second
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "policy-garbage"
			k := NewKeys(testPrefix, key)
			runCall(t, b.c, key, "A", call{n: 2, ttl: ttl})
			if err := b.c.Set(t.Context(), k.Policy, "x", 0).Err(); err != nil {
				t.Fatal(err)
			}
			if n := runRenew(t, b.c, key, "A", ttl); n != 1 {
				t.Errorf("renewal with a policy that is no hash: got %d, want renewed", n)
			}
			if g := runCall(t, b.c, key, "B", call{n: 2, ttl: ttl}); !g.Granted {
				t.Errorf("caller with a policy that is no hash: got %+v, want granted", g)
			}
			if r := keyOp(t, b.c, key, KeyArgs{Op: "set", Cap: 1}); r.Stored != 1 {
				t.Errorf("set over a policy that is no hash: got %+v, want stored 1", r)
			}
		})
	}
}

// TestScriptsOperatorCallsKeepTheSilenceRule: an operator's call after a
// silence pushes leases back, as any call does, rather than sweeping
// holders whose commands still run and handing their permits on.
func TestScriptsOperatorCallsKeepTheSilenceRule(t *testing.T) {
	t.Parallel()
	b := backends(t)[0] // miniredis: its clock jumps
	const key = "operator-silence"
	const ttl = 2 * time.Second
	runCall(t, b.c, key, "A", call{n: 1, ttl: ttl})
	b.advance(ttl + 100*time.Millisecond) // a silence: a step, or A stalled
	keyOp(t, b.c, key, KeyArgs{Op: "resume"})
	if st := runStatus(t, b.c, key); len(st.Holders) != 1 {
		t.Errorf("holders after an operator's call that followed a silence: got %+v, want A, pushed back", st.Holders)
	}
}
