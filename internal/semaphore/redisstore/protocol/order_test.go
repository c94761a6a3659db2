package protocol

import (
	"context"
	"slices"
	"testing"
	"time"
)

// order is the ids of key's waiters, first in line first.
func order(t *testing.T, b backend, key string) []string {
	t.Helper()
	keys, _ := scriptKeys(key)
	ids, err := b.c.ZRange(context.Background(), keys[3], 0, -1).Result()
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// waitIn puts id in key's line, behind a holder, with prio and age.
func waitIn(t *testing.T, b backend, key, id string, prio int, age time.Duration, super bool) AcquireReply {
	t.Helper()
	r := runAcquireArgs(t, b.c, NewKeys(testPrefix, key), AcquireArgs{ID: id, Permits: 1, TTL: 10 * time.Second,
		Wait: 10 * time.Second, Priority: prio, PriorityAge: age, Supersede: super, Meta: []byte(`{"host":"h-` + id + `","pid":7}`)})
	if r.Granted || r.Position < 1 {
		t.Fatalf("%s: got %+v, want in line", id, r)
	}
	return r
}

// TestScriptsLineOrder: a waiter of higher priority is before every
// waiter of lower priority, equal ones in arrival order; with an age, a
// waiter's place is its arrival less its priority times the age.
func TestScriptsLineOrder(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "order"
			if r := runCall(t, b.c, key, "HOLDER", call{n: 1, ttl: time.Minute}); !r.Granted {
				t.Fatalf("holder: got %+v, want granted", r)
			}
			waitIn(t, b, key, "A", 0, 0, false)
			waitIn(t, b, key, "B", 5, 0, false)
			waitIn(t, b, key, "C", -3, 0, false)
			waitIn(t, b, key, "D", 5, 0, false)
			waitIn(t, b, key, "E", 0, 0, false)
			want := []string{Member("B"), Member("D"), Member("A"), Member("E"), Member("C")}
			if got := order(t, b, key); !slices.Equal(got, want) {
				t.Errorf("line: got %q, want B D A E C (priority, then arrival)", got)
			}
			// A renewal of its place keeps it.
			waitIn(t, b, key, "A", 0, 0, false)
			if got := order(t, b, key); !slices.Equal(got, want) {
				t.Errorf("line after A asked again: got %q, want it unchanged", got)
			}
			st := runStatus(t, b.c, key)
			var prios []int
			for _, w := range st.Waiters {
				prios = append(prios, w.Priority)
			}
			if !slices.Equal(prios, []int{5, 5, 0, 0, -3}) {
				t.Errorf("status: got priorities %v, want [5 5 0 0 -3]", prios)
			}
			// The holder gives its permit to the first: B.
			wl := listen(t, b.c, key)
			runRelease(t, b.c, key, "HOLDER")
			expectHandedOver(t, wl, "after the holder released", "B")

			// Aging: with an age of 1s, a waiter of priority 0 that waited
			// 3s is before one of priority 2 that came now, behind one of
			// priority 4.
			const aged = "aged"
			runCall(t, b.c, aged, "HOLDER", call{n: 1, ttl: time.Minute})
			waitIn(t, b, aged, "OLD", 0, time.Second, false)
			b.advance(3 * time.Second)
			waitIn(t, b, aged, "OLD", 0, time.Second, false)
			waitIn(t, b, aged, "NEW2", 2, time.Second, false)
			waitIn(t, b, aged, "NEW4", 4, time.Second, false)
			if got := order(t, b, aged); !slices.Equal(got, []string{Member("NEW4"), Member("OLD"), Member("NEW2")}) {
				t.Errorf("aged line: got %q, want NEW4 OLD NEW2", got)
			}
			st = runStatus(t, b.c, aged)
			if len(st.Waiters) != 3 || st.Waiters[1].Priority < 3 {
				t.Errorf("status of the aged line: got %+v, want OLD's priority raised to 3 or more", st.Waiters)
			}
			// A stored age wins over the caller's.
			keyOp(t, b.c, aged, KeyArgs{Op: "age", For: time.Hour})
			if r := waitIn(t, b, aged, "LATE", 0, time.Second, false); r.Age != time.Hour.Milliseconds() {
				t.Errorf("caller of age 1s on a key of stored age 1h: got age %d, want %d", r.Age, time.Hour.Milliseconds())
			}
			if st := runStatus(t, b.c, aged); st.PriorityAge != time.Hour {
				t.Errorf("status: got stored age %v, want 1h", st.PriorityAge)
			}
		})
	}
}

// TestScriptsSupersede: a caller that supersedes sends the one that
// superseded before it out of the line, telling it by whom; a plain
// waiter and the holder stay.
func TestScriptsSupersede(t *testing.T) {
	t.Parallel()
	for _, b := range backends(t) {
		t.Run(b.name, func(t *testing.T) {
			const key = "super"
			runCall(t, b.c, key, "HOLDER", call{n: 1, ttl: time.Minute})
			waitIn(t, b, key, "S1", 0, 0, true)
			waitIn(t, b, key, "PLAIN", 0, 0, false)
			waitIn(t, b, key, "S2", 0, 0, true)
			if got := order(t, b, key); !slices.Equal(got, []string{Member("PLAIN"), Member("S2")}) {
				t.Errorf("line: got %q, want PLAIN S2 (S1 sent away)", got)
			}
			elems, err := b.c.LRange(context.Background(), NewKeys(testPrefix, key).WakeList("S1"), 0, -1).Result()
			if err != nil || len(elems) != 1 {
				t.Fatalf("S1's wake list: got (%q, %v), want one element", elems, err)
			}
			turn := ReadTurn(elems[0])
			if turn.Superseded == nil || turn.Superseded.Host != "h-S2" || turn.Handed {
				t.Errorf("S1's turn: got %+v, want superseded by h-S2", turn)
			}
			// S1 asks again (it had not read its list): it hears it too.
			r := runAcquireArgs(t, b.c, NewKeys(testPrefix, key), AcquireArgs{ID: "S1", Permits: 1, TTL: 10 * time.Second,
				Wait: 10 * time.Second, Supersede: true, WasInLine: true})
			if r.Superseded == "" || r.Granted || r.Position != 0 || ReadMeta(r.Superseded).Host != "h-S2" {
				t.Errorf("S1 asking again: got %+v, want told it was superseded by h-S2, and not in line", r)
			}
			if got := order(t, b, key); !slices.Equal(got, []string{Member("PLAIN"), Member("S2")}) {
				t.Errorf("line after S1 asked again: got %q, want PLAIN S2", got)
			}
			if st := runStatus(t, b.c, key); len(st.Holders) != 1 {
				t.Errorf("holders: got %d, want the holder untouched", len(st.Holders))
			}
			// One that came before S2 and asks only now (its place lapsed
			// while it was stopped) is the one sent away, not S2.
			r = runAcquireArgs(t, b.c, NewKeys(testPrefix, key), AcquireArgs{ID: "STALE", Permits: 1, TTL: 10 * time.Second,
				Wait: 10 * time.Second, Supersede: true, Waited: time.Hour})
			if r.Superseded == "" || ReadMeta(r.Superseded).Host != "h-S2" || r.Position != 0 {
				t.Errorf("an older caller that supersedes, asking after S2: got %+v, want sent away, by h-S2", r)
			}
			if got := order(t, b, key); !slices.Equal(got, []string{Member("PLAIN"), Member("S2")}) {
				t.Errorf("line after the older one asked: got %q, want PLAIN S2", got)
			}
		})
	}
}
