package protocol

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/semrun/semrun/internal/semaphore"
)

// logOf reads key's log whole, through DecodeEvent, failing t on an entry
// that is not an event: the scripts write none.
func logOf(t *testing.T, c *redis.Client, key string) []semaphore.Event {
	t.Helper()
	msgs, err := c.XRange(context.Background(), NewKeys(testPrefix, key).Events, "-", "+").Result()
	if err != nil {
		t.Fatalf("XRANGE of key %q's log: got error %v, want its entries", key, err)
	}
	var out []semaphore.Event
	for _, m := range msgs {
		e, ok := DecodeEvent(key, m)
		if !ok {
			t.Fatalf("entry %s of key %q's log: %v is not an event", m.ID, key, m.Values)
		}
		out = append(out, e)
	}
	return out
}

// countsOf are key's counters as status.lua answers them; zero when none.
func countsOf(t *testing.T, c *redis.Client, key string) semaphore.Counts {
	t.Helper()
	if st := runStatus(t, c, key); st.Counts != nil {
		return *st.Counts
	}
	return semaphore.Counts{}
}

func kindsOf(events []semaphore.Event) []semaphore.EventKind {
	var out []semaphore.EventKind
	for _, e := range events {
		out = append(out, e.Kind)
	}
	return out
}

// TestScriptsLogEachGrantOnce: a grant is logged and counted by the call
// that makes it, and never again: not by a repeat of that call, nor by the
// call of a waiter that takes the turn a release handed it.
func TestScriptsLogEachGrantOnce(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "once"
			k := NewKeys(testPrefix, key)
			holder := AcquireArgs{ID: "PERMIT0HOLDER", Permits: 1, TTL: 10 * time.Second, Meta: []byte(`{"host":"a","pid":1}`), Waited: 1500 * time.Millisecond}
			first := runAcquireArgs(t, b.c, k, holder)
			if !first.Granted || !first.Fresh {
				t.Fatalf("first grant: got %+v, want granted, and the key's counters fresh", first)
			}
			if again := runAcquireArgs(t, b.c, k, holder); !again.Granted || again.Token != first.Token || again.Fresh {
				t.Fatalf("the same call again: got %+v, want the same grant, counters not renewed again", again)
			}
			waiter := AcquireArgs{ID: "PERMIT0WAITER", Permits: 1, TTL: 10 * time.Second, Meta: []byte(`{"host":"b","pid":2}`),
				Wait: 10 * time.Second, Waited: 2 * time.Second}
			if in := runAcquireArgs(t, b.c, k, waiter); in.Granted || in.Position != 1 {
				t.Fatalf("a waiter: got %+v, want first in line", in)
			}
			b.advance(100 * time.Millisecond)
			r, err := DecodeRelease(runScript(t, b.c, k, ReleaseArgs{ID: holder.ID, Exit: 3}))
			if err != nil || !r.Released || len(r.Handed) != 1 {
				t.Fatalf("release: got (%+v, %v), want released, the permit handed to the waiter", r, err)
			}
			if took := runAcquireArgs(t, b.c, k, waiter); !took.Granted {
				t.Fatalf("the waiter asks again: got %+v, want its turn taken", took)
			}
			runScript(t, b.c, k, ReleaseArgs{ID: holder.ID, Exit: 3}) // a repeat: nothing more

			got := logOf(t, b.c, key)
			if want := []semaphore.EventKind{semaphore.EventGrant, semaphore.EventRelease, semaphore.EventGrant}; !slices.Equal(kindsOf(got), want) {
				t.Fatalf("log: got %+v, want %v", got, want)
			}
			g, rel, handed := got[0], got[1], got[2]
			if g.Token != first.Token || g.Host != "a" || g.PID != 1 || g.Waited != 1500*time.Millisecond || g.Permits != 1 || g.Weight != 1 || !IsPublicID(g.Holder) {
				t.Errorf("grant: got %+v, want token %d, host a, pid 1, waited 1.5s, its public id", g, first.Token)
			}
			if rel.Holder != g.Holder || rel.ExitStatus == nil || *rel.ExitStatus != 3 || rel.Held < 100*time.Millisecond || rel.Held > 10*time.Second {
				t.Errorf("release: got %+v, want holder %s, exit 3, held about 100ms", rel, g.Holder)
			}
			// It waited since its call began: 2s before it joined the line.
			if handed.Host != "b" || handed.Token <= first.Token || handed.Waited < 2100*time.Millisecond || handed.Waited > 12*time.Second {
				t.Errorf("the waiter's grant: got %+v, want host b, a later token, waited 2.1s or more", handed)
			}
			c := countsOf(t, b.c, key)
			if c.Grants != 2 || c.Wait.Count() != 2 || c.Held.Count() != 1 || c.Held.Sum != rel.Held || c.RecentHold != rel.Held {
				t.Errorf("counts: got %+v, want 2 grants and waits, 1 hold of %v, the recent hold", c, rel.Held)
			}
			if want := semaphore.Bucket(1500 * time.Millisecond); c.Wait.Counts[want] != 2 || c.Wait.Counts[want] != c.Wait.Count() {
				t.Errorf("wait histogram: got %v, want both waits, of 1.5 and 2.1s, in bucket %d", c.Wait.Counts, want)
			}
		})
	}
}

// TestScriptsQuietLogsNothingButCounts: a caller that keeps no log
// (NoEvents) writes none, and is counted.
func TestScriptsQuietLogsNothingButCounts(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "quiet"
			k := NewKeys(testPrefix, key)
			a := AcquireArgs{ID: "PERMIT0QUIET", Permits: 1, TTL: 10 * time.Second, Quiet: true}
			if r := runAcquireArgs(t, b.c, k, a); !r.Granted {
				t.Fatalf("grant: got %+v, want granted", r)
			}
			runScript(t, b.c, k, ReleaseArgs{ID: a.ID, Quiet: true})
			runScript(t, b.c, k, KeyArgs{Op: "pause", Reason: "x", Quiet: true})
			if n, err := b.c.Exists(context.Background(), k.Events).Result(); err != nil || n != 0 {
				t.Errorf("log of a quiet key: got (%d, %v), want none", n, err)
			}
			if c := countsOf(t, b.c, key); c.Grants != 1 || c.Held.Count() != 1 {
				t.Errorf("counts of a quiet key: got %+v, want 1 grant, 1 hold", c)
			}
			ttl, err := b.c.PTTL(context.Background(), k.Stats).Result()
			if err != nil || ttl < EventLife-time.Minute || ttl > EventLife {
				t.Errorf("PTTL of the counters: got (%v, %v), want about %v", ttl, err, EventLife)
			}
		})
	}
}

// TestScriptsSurviveHostileEventKeys: a log or counters that someone
// else wrote (another type, counts that are none or too large) never
// fail a grant or a release: they make way, or count anew.
func TestScriptsSurviveHostileEventKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			for name, poison := range map[string]func(k Keys){
				"strings": func(k Keys) {
					b.c.Set(ctx, k.Events, "not a stream", 0)
					b.c.Set(ctx, k.Stats, "not a hash", 0)
				},
				"lists": func(k Keys) {
					b.c.RPush(ctx, k.Events, "x", "y")
					b.c.RPush(ctx, k.Stats, "x")
				},
				"counts": func(k Keys) {
					b.c.HSet(ctx, k.Stats, "grants", "many", "w1", "99999999999999999999999", "wsum", "-5", "recent", "1e400",
						"h1", strings.Repeat("9", 30), "#until", "soon", "w99", "7", "other", "x")
				},
				"full counts": func(k Keys) {
					b.c.HSet(ctx, k.Stats, "grants", MaxInt, "wsum", MaxInt, "#until", MaxInt)
				},
			} {
				key := "hostile-" + strings.ReplaceAll(name, " ", "-")
				k := NewKeys(testPrefix, key)
				poison(k)
				a := AcquireArgs{ID: "PERMIT0" + strings.ToUpper(strings.ReplaceAll(name, " ", "")), Permits: 1, Weight: 1, TTL: 10 * time.Second}
				r, err := DecodeAcquire(runScript(t, b.c, k, a))
				if err != nil || !r.Granted {
					t.Fatalf("%s: grant: got (%+v, %v), want granted", name, r, err)
				}
				if rel, err := DecodeRelease(runScript(t, b.c, k, ReleaseArgs{ID: a.ID})); err != nil || !rel.Released {
					t.Fatalf("%s: release: got (%+v, %v), want released", name, rel, err)
				}
				st := runStatus(t, b.c, key)
				if st.Held != 0 || st.Counts == nil || st.Counts.Grants < 1 || st.Counts.Grants > MaxInt || st.Counts.Wait.Sum < 0 {
					t.Errorf("%s: status after a run: got %+v (counts %+v), want nothing held and the run counted, bounded", name, st, st.Counts)
				}
				if name != "full counts" && st.Counts != nil && st.Counts.Grants != 1 {
					t.Errorf("%s: grants: got %d, want 1, counted anew", name, st.Counts.Grants)
				}
				if name == "full counts" && (st.Counts.Grants != 1 || st.Counts.Wait.Sum > 100*365*24*time.Hour) {
					t.Errorf("%s: counts at their bound: got %+v, want grants counted anew, the sum bounded", name, st.Counts)
				}
				// A log that was none made way for one the scripts read.
				if got := logOf(t, b.c, key); !slices.Equal(kindsOf(got), []semaphore.EventKind{semaphore.EventGrant, semaphore.EventRelease}) {
					t.Errorf("%s: log after a run: got %+v, want a grant and a release", name, got)
				}
				ttl, err := b.c.PTTL(ctx, k.Stats).Result()
				if err != nil || ttl <= 0 || ttl > EventLife {
					t.Errorf("%s: PTTL of the counters: got (%v, %v), want at most %v", name, ttl, err, EventLife)
				}
			}
		})
	}
}

// TestDecodeEventBoundsWhatItReads: an entry is read whole and bounded,
// or skipped; nothing in it can make a reader allocate or print without
// bound.
func TestDecodeEventBoundsWhatItReads(t *testing.T) {
	long := strings.Repeat("é", 1000)
	for _, tt := range []struct {
		name string
		m    redis.XMessage
		ok   bool
		want func(e semaphore.Event) bool
	}{
		{"a grant", redis.XMessage{ID: "1700000000123-4", Values: map[string]any{"e": "grant", "id": "0123456789", "m": `{"host":"h","pid":7,"label":"l"}`,
			"n": "3", "w": "2", "t": "99", "wait": "1500"}}, true,
			func(e semaphore.Event) bool {
				return e.Time.Equal(time.UnixMilli(1700000000123)) && e.Kind == semaphore.EventGrant && e.Holder == "0123456789" && e.Host == "h" &&
					e.PID == 7 && e.Label == "l" && e.Permits == 3 && e.Weight == 2 && e.Token == 99 && e.Waited == 1500*time.Millisecond && e.ExitStatus == nil
			}},
		{"no kind", redis.XMessage{ID: "1-1", Values: map[string]any{"id": "0123456789"}}, false, nil},
		{"another kind", redis.XMessage{ID: "1-1", Values: map[string]any{"e": "explode"}}, false, nil},
		{"a bad id", redis.XMessage{ID: "99999999999999999999-1", Values: map[string]any{"e": "grant"}}, false, nil},
		{"an id past MaxInt", redis.XMessage{ID: "9007199254740992-0", Values: map[string]any{"e": "grant"}}, false, nil},
		{"hostile fields", redis.XMessage{ID: "5-0", Values: map[string]any{"e": "release", "id": "not-an-id\x1b[2J", "m": `{"host":"` + long + `","pid":-4,"command":"` + long + `","label":"` + long + `","max_runtime_ns":-1}`,
			"n": "-1", "w": "99999999999", "t": "1e9", "x": "999", "held": "99999999999999999999", "wait": "-5", "cool": "9007199254740991",
			"cap": "x", "why": long, "until": "9007199254740991", "f": "yes"}}, true,
			func(e semaphore.Event) bool {
				return e.Holder == "" && len(e.Host) <= 255 && len(e.Command) <= 255 && len(e.Label) <= semaphore.MaxLabel && e.PID == 0 &&
					e.MaxRuntime == 0 && e.Permits == 0 && e.Weight == 0 && e.Token == 0 && e.ExitStatus == nil && e.Held == 0 && e.Waited == 0 &&
					e.Cooling == MaxCool && len(e.Reason) <= semaphore.MaxReason && e.Until == MaxPause && !e.Forced &&
					strings.HasPrefix(long, e.Reason) && strings.HasPrefix(long, e.Label)
			}},
		{"a meta too long", redis.XMessage{ID: "5-0", Values: map[string]any{"e": "busy", "m": `{"host":"` + strings.Repeat("h", MaxMeta) + `"}`}}, true,
			func(e semaphore.Event) bool { return e.Host == "" }},
		{"a meta that is not one", redis.XMessage{ID: "5-0", Values: map[string]any{"e": "busy", "m": `{"pid":"x"`}}, true,
			func(e semaphore.Event) bool { return reflect.DeepEqual(e.HolderInfo, semaphore.HolderInfo{}) }},
	} {
		e, ok := DecodeEvent("k", tt.m)
		if ok != tt.ok || (ok && (e.Key != "k" || !tt.want(e))) {
			t.Errorf("%s: got (%+v, %v), want ok %v and bounded", tt.name, e, ok, tt.ok)
		}
	}
}

// TestScriptsReadTheOldBuckets: counters a release before the buckets
// began at 10ms kept ("w1"... by index of semaphore.OldBuckets) are read
// still, each in the bucket of its bound, beside the new ones, named by
// their bound: every cumulative count a histogram had stays, and rises.
func TestScriptsReadTheOldBuckets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "oldbuckets"
			k := NewKeys(testPrefix, key)
			// As the old scripts left them: 4 waits of at most 1s (w1), 2
			// of 5s to 15s (w3), 1 longer than a day (w15); a hold of 1h.
			old := len(semaphore.OldBuckets)
			b.c.HSet(ctx, k.Stats, "grants", 7, "w1", 4, "w3", 2, fmt.Sprintf("w%d", old+1), 1, "wsum", 90_000_000,
				"h10", 1, "hsum", 3_600_000)
			before := countsOf(t, b.c, key)
			a := AcquireArgs{ID: "PERMIT0NEWBUCKETS", Permits: 1, TTL: 10 * time.Second, Waited: 30 * time.Millisecond}
			if r := runAcquireArgs(t, b.c, k, a); !r.Granted {
				t.Fatalf("grant: got %+v, want granted", r)
			}
			after := countsOf(t, b.c, key)
			want := make([]uint64, len(semaphore.Buckets)+1)
			want[semaphore.Bucket(time.Second)] = 4
			want[semaphore.Bucket(15*time.Second)] = 2
			want[len(semaphore.Buckets)] = 1
			if !slices.Equal(before.Wait.Counts, want) || before.Wait.Count() != 7 || before.Held.Counts[semaphore.Bucket(time.Hour)] != 1 {
				t.Errorf("the old counts: got waits %v, holds %v; want waits %v, the hold in the bucket of 1h", before.Wait.Counts, before.Held.Counts, want)
			}
			want[semaphore.Bucket(30*time.Millisecond)]++
			if !slices.Equal(after.Wait.Counts, want) || after.Grants != 8 || after.Wait.Sum != 90_000_030*time.Millisecond {
				t.Errorf("a grant after waiting 30ms: got %+v, want waits %v, 8 grants", after, want)
			}
			for i := range want {
				if cumulative(before.Wait.Counts, i) > cumulative(after.Wait.Counts, i) {
					t.Errorf("the count of waits up to bucket %d went down: %d, then %d", i, cumulative(before.Wait.Counts, i), cumulative(after.Wait.Counts, i))
				}
			}
			if n, err := b.c.HGet(ctx, k.Stats, "w:50").Int(); err != nil || n != 1 {
				t.Errorf("the field of the 50ms bucket: got (%d, %v), want 1", n, err)
			}
		})
	}
}

// cumulative is how many counts has up to and with bucket i.
func cumulative(counts []uint64, i int) uint64 {
	var n uint64
	for _, c := range counts[:i+1] {
		n += c
	}
	return n
}

// TestScriptsKeepAnIdleKeysCapacity: once a key's records expired (no
// holder for a while), status still says the capacity its latest grant
// asked, kept with the counters; a key with neither says none.
func TestScriptsKeepAnIdleKeysCapacity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "idlecap"
			k := NewKeys(testPrefix, key)
			for _, n := range []int{5, 3} {
				a := AcquireArgs{ID: fmt.Sprintf("PERMIT0IDLE%d", n), Permits: n, TTL: 10 * time.Second}
				if r := runAcquireArgs(t, b.c, k, a); !r.Granted {
					t.Fatalf("grant: got %+v, want granted", r)
				}
				runScript(t, b.c, k, ReleaseArgs{ID: a.ID})
			}
			if err := b.c.Del(ctx, k.List()...).Err(); err != nil { // as when they expire
				t.Fatal(err)
			}
			if st := runStatus(t, b.c, key); st.Capacity != 3 {
				t.Errorf("an idle key: got capacity %d, want 3, its latest grant's", st.Capacity)
			}
			if st := runStatus(t, b.c, "idlecap-never"); st.Capacity != 0 {
				t.Errorf("a key never granted: got capacity %d, want 0 (unknown)", st.Capacity)
			}
		})
	}
}
