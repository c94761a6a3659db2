package protocol

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// TestScriptsNameAPermitByItsMember: the keys hold a permit's member (the
// SHA-1 of its id), never its id, and no script takes a member for the
// id: given as an id, it is hashed again and names nothing.
func TestScriptsNameAPermitByItsMember(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key, id = "member", "PERMITIDOFTWENTYSIXLETTERS"
			k := NewKeys(testPrefix, key)
			runAcquireArgs(t, b.c, k, AcquireArgs{ID: id, Permits: 1, TTL: 10 * time.Second})
			holders := b.c.ZRange(t.Context(), k.Holders, 0, -1).Val()
			if len(holders) != 1 || holders[0] != Member(id) || len(holders[0]) != 40 {
				t.Fatalf("holders: got %q, want the member %s alone", holders, Member(id))
			}
			if r := renewArgs(t, b.c, key, RenewArgs{ID: holders[0], TTL: 10 * time.Second}); r.Renewed {
				t.Errorf("renewal with the member for an id: got %+v, want none", r)
			}
			if r := releaseArgs(t, b.c, key, ReleaseArgs{ID: holders[0]}); r.Released {
				t.Errorf("release with the member for an id: got %+v, want nothing released", r)
			}
			if r := renewArgs(t, b.c, key, RenewArgs{ID: id, TTL: 10 * time.Second}); !r.Renewed {
				t.Errorf("renewal with the id: got %+v, want renewed", r)
			}
		})
	}
}

// TestScriptsEndAHoldOfAnOlderSemrun: a hold begun by a semrun from before
// members (its permit's member is its id, its record named after the id's
// hash) is still found by its handle's secret, so that a release or a
// --handle run by a newer semrun ends it or runs under it; a member read
// from the keys, given for a secret, is no such legacy id.
func TestScriptsEndAHoldOfAnOlderSemrun(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			ctx := t.Context()
			const key, id = "legacy", "OLDHOLDSECRETTWENTYSIXCHAR"
			k := NewKeys(testPrefix, key)
			// What the older scripts wrote: a holder named by its id, and the
			// hold's record named after the id's hash.
			now := b.nowMicros(t) / 1000
			if err := b.c.ZAdd(ctx, k.Holders, redis.Z{Score: float64(now + 10_000), Member: id}).Err(); err != nil {
				t.Fatal(err)
			}
			if err := b.c.HSet(ctx, k.Info, id, "1 7 "+strconv.FormatInt(now, 10)+" 1 {}", "#used", 1, "#clock", now, "#ttl", 10_000).Err(); err != nil {
				t.Fatal(err)
			}
			old := k.Hold + ":" + shortHash(id)
			if err := b.c.HSet(ctx, old, "state", "held", "ttl", 10_000, "fence", 0, "replicas", 0, "permits", 1, "weight", 1, "token", 7,
				"meta", "{}", "bound", 0).Err(); err != nil {
				t.Fatal(err)
			}
			forged := strings.ToUpper(Member(id))[:26] // a member's shape is no id's
			if r := holdArgs(t, b.c, key, HoldArgs{Op: "renew", ID: Member(id), Share: "r.x"}); r.State != "unknown" || r.Left != 0 {
				t.Errorf("a run under a handle whose secret is a member: got %+v, want no such hold", r)
			}
			if r := holdArgs(t, b.c, key, HoldArgs{Op: "end", ID: forged, State: "released"}); r.State != "unknown" || r.Now {
				t.Errorf("an end with a made-up secret: got %+v, want no such hold", r)
			}
			if r := holdArgs(t, b.c, key, HoldArgs{Op: "renew", ID: id, Share: "r.step"}); r.State != "held" || r.Token != 7 || r.Left <= 0 {
				t.Errorf("a run under the older hold's handle: got %+v, want it held, token 7", r)
			}
			if r := holdArgs(t, b.c, key, HoldArgs{Op: "end", ID: id, State: "released", Why: "semrun release"}); r.State != "released" || !r.Now {
				t.Errorf("semrun release of the older hold: got %+v, want released now", r)
			}
			if r := holdArgs(t, b.c, key, HoldArgs{Op: "end", ID: id, Share: "r.step"}); !r.Released {
				t.Errorf("the run's end, the last one out: got %+v, want the permit given back", r)
			}
			if g := runAcquireArgs(t, b.c, k, AcquireArgs{ID: "NEXT", Permits: 1, TTL: 10 * time.Second}); !g.Granted {
				t.Errorf("a caller once the older hold ended: got %+v, want granted", g)
			}
		})
	}
}
